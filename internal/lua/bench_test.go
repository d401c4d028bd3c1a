package lua

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

// BenchmarkHoldFunction calls the hold function one at a time on a Redis of its own
// (one seat, no holder, no waiting room, a show not indexed) and reports what Redis
// spent per hold: usec/call from INFO commandstats (the function's own time) and
// cpu-usec/call from used_cpu_sys+user (with the network I/O). The sub-benchmarks are
// the profile of a hold: the function as it is, then without its feed entry, without
// its sale-rules read, without its argument checks, and the floor, a function that
// only does INCR and SET NX PX. Run with -benchtime=20000x or more.
func BenchmarkHoldFunction(b *testing.B) {
	srv := testsvc.StartRedis(b)
	rdb := srv.Client()
	ctx := b.Context()
	variants := []struct{ name, from, to string }{
		{"as-is", "", ""},
		{"no-feed-entry", `local id = feed({"h", seat_list(F), "x", int(now + ttl)})`, `local id = "0-0"`},
		{"no-rules-read", "local rules, closed = sale_rules(given, ARGV[5])", "local rules, closed = given, nil"},
		{"no-argument-checks", "local n, err = layout(F, 1, 1)\nif not n then return err end", "local n = 1; N = 1; BASE = string.sub(KEYS[1], 1, -4)"},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			lib := strings.Replace(library, v.from, v.to, 1)
			if v.from != "" && lib == library {
				b.Fatalf("%s: %q is not in hold.lua", v.name, v.from)
			}
			name := strings.ReplaceAll(v.name, "-", "_")
			lib = strings.ReplaceAll(lib, prefix, name+"_")
			if err := rdb.FunctionLoadReplace(ctx, lib).Err(); err != nil {
				b.Fatal(err)
			}
			base := "b" + name + ":{s}:"
			rdb.Set(ctx, base+"gen", 1, 0)
			perCall(b, rdb, func(i int) error {
				seat := "S" + strconv.Itoa(i)
				res, err := rdb.FCall(ctx, name+"_hold", []string{base + "gen", base + "holder:", base + "hold:" + seat, base + "sold:" + strconv.Itoa(i/100)},
					"", fmt.Sprintf("%032x", i), 600000, 0, "1 1 0 -1 0 0 0", seat).Slice()
				if err == nil && res[0] != "OK" {
					err = fmt.Errorf("hold: %v", res)
				}
				return err
			})
		})
	}
	b.Run("floor", func(b *testing.B) {
		floor := "#!lua name=floor\nredis.register_function('floor', function(k, a) redis.call('INCR', k[1]) return redis.call('SET', k[2], a[1], 'NX', 'PX', 600000) end)"
		if err := rdb.FunctionLoadReplace(ctx, floor).Err(); err != nil {
			b.Fatal(err)
		}
		perCall(b, rdb, func(i int) error {
			return rdb.FCall(ctx, "floor", []string{"f:{s}:gen", "f:{s}:hold:S" + strconv.Itoa(i)}, "x").Err()
		})
	})
}

// seq numbers the calls of every run, so that no call repeats an earlier one's seat.
var seq int

// perCall runs call b.N times and reports Redis's time per call.
func perCall(b *testing.B, rdb *redis.Client, call func(i int) error) {
	ctx := b.Context()
	calls0, usec0 := fcallStats(ctx, rdb)
	cpu0 := redisCPU(ctx, rdb)
	b.ResetTimer()
	for range b.N {
		seq++
		if err := call(seq); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	calls, usec := fcallStats(ctx, rdb)
	b.ReportMetric((usec-usec0)/(calls-calls0), "usec/call")
	b.ReportMetric(1e6*(redisCPU(ctx, rdb)-cpu0)/float64(b.N), "cpu-usec/call")
}

// fcallStats is INFO commandstats' calls and usec of FCALL.
func fcallStats(ctx context.Context, rdb *redis.Client) (calls, usec float64) {
	for _, line := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls = x
			case "usec":
				usec = x
			}
		}
	}
	return calls, usec
}

// redisCPU is used_cpu_sys + used_cpu_user, in seconds.
func redisCPU(ctx context.Context, rdb *redis.Client) float64 {
	var sec float64
	for _, line := range strings.Split(rdb.Info(ctx, "cpu").Val(), "\n") {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			x, _ := strconv.ParseFloat(v, 64)
			sec += x
		}
	}
	return sec
}
