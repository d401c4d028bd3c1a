package engine

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// redisCPUSeconds is the Redis server's CPU so far (user and system).
func redisCPUSeconds(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, _ := strconv.ParseFloat(val, 64)
			total += f
		}
	}
	return total
}

// BenchmarkAreaHold prints the Redis CPU of a hold of one seat and of a hold of one
// place of an area (redis-µs/hold), each on its own show, one holder per hold.
func BenchmarkAreaHold(b *testing.B) {
	for _, mode := range []string{"seat", "place"} {
		b.Run(mode, func(b *testing.B) {
			pool, rdb := testsvc.Database(b), testsvc.Redis(b)
			cfg := Config{KeyPrefix: testsvc.KeyPrefix(b), MaxSeatsPerHold: 1}
			e, err := New(pool, rdb, &cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(e.Close)
			v := struct {
				e   *Engine
				rdb redis.UniversalClient
			}{e, rdb}
			seats := make([]Seat, b.N)
			for i := range seats {
				seats[i] = Seat{ID: fmt.Sprintf("S%07d", i), Position: i + 1}
			}
			show := "bench-" + mode
			if err := v.e.CreateShowVenue(context.Background(), show, Venue{Seats: seats,
				Areas: []Area{{ID: "FLOOR", Capacity: min(maxAreaCapacity, b.N)}}}); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			before := redisCPUSeconds(b, v.rdb)
			b.ResetTimer()
			for i := range b.N {
				req := HoldRequest{ShowID: show, TTL: time.Minute, HolderID: fmt.Sprintf("h%d", i)}
				if mode == "seat" {
					req.SeatIDs = []string{seats[i].ID}
				} else {
					req.Places = []Places{{AreaID: "FLOOR", Count: 1}}
				}
				if _, err := v.e.Hold(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((redisCPUSeconds(b, v.rdb)-before)*1e6/float64(b.N), "redis-µs/hold")
		})
	}
}
