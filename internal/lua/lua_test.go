package lua

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

// TestLibraryHasEveryScript: every .lua file but common.lua is a function of the
// library, with the flags its "-- flags:" line names, once Redis loaded it — a new
// file joins without anyone listing it.
func TestLibraryHasEveryScript(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := srv.Client()
	if err := Load(t.Context(), rdb); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
	libs, err := rdb.FunctionList(t.Context(), redis.FunctionListQuery{}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST: %v, %d libraries", err, len(libs))
	}
	got := map[string][]string{}
	for _, f := range libs[0].Functions {
		got[f.Name] = f.Flags
	}
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	for _, e := range entries {
		if name := strings.TrimSuffix(e.Name(), ".lua"); name != "common" {
			want[prefix+name] = nil
		}
	}
	want[Verify.Name()] = []string{"no-writes"}
	for _, s := range []*Script{Release, Reserve, Unreserve, Mark, Lower, Shrink} {
		want[s.Name()] = []string{"allow-oom"}
	}
	if len(got) != len(want) || len(want) < 18 {
		t.Fatalf("%d functions loaded, want %d (one per script): %v", len(got), len(want), got)
	}
	for name, flags := range want {
		f, ok := got[name]
		if !ok || strings.Join(f, ",") != strings.Join(flags, ",") {
			t.Errorf("function %s: loaded %v with flags %v, want flags %v", name, ok, f, flags)
		}
	}
}

// loadCounter counts the FUNCTION LOAD commands a client sends.
type loadCounter struct{ n atomic.Int64 }

func (l *loadCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *loadCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "function") && strings.EqualFold(cmd.Args()[1].(string), "load") {
			l.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (l *loadCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRunLoadsTheLibraryOnceWhenRedisLostIt: after FUNCTION FLUSH, many calls at once
// each answer (Redis says "Function not found", Run loads the library and calls again),
// and one of them loads the library, not each.
func TestRunLoadsTheLibraryOnceWhenRedisLostIt(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := srv.Client()
	loadsSeen := &loadCounter{}
	rdb.AddHook(loadsSeen)
	for round := range 3 {
		if err := rdb.FunctionFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		before := loadsSeen.n.Load()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// counts.lua with no counts: checks its key and answers.
				if err := Counts.Run(t.Context(), rdb, []string{"lt:{s}:gen"}).Err(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a call after FUNCTION FLUSH: %v", round, err)
		}
		if n := loadsSeen.n.Load() - before; n != 1 {
			t.Fatalf("round %d: %d FUNCTION LOADs for 64 calls that found the library gone, want 1", round, n)
		}
	}
}

// TestCallsSeeOnlyTheirOwnKeysAndArguments: the library's top level lives from one call
// to the next (common.lua's KEYS, ARGV and layout), so each call must start from its
// own: a hold of three seats of one show, a call of another function, then a hold of
// one seat of another show, each acts on its own keys only.
func TestCallsSeeOnlyTheirOwnKeysAndArguments(t *testing.T) {
	srv := testsvc.StartRedis(t)
	rdb := srv.Client()
	ctx := t.Context()
	rdb.Set(ctx, "la:{a}:gen", 1, 0)
	rdb.Set(ctx, "lb:{b}:gen", 1, 0)
	keys := func(base string, seats ...string) []string {
		ks := []string{base + "gen", base + "holder:"}
		for _, s := range seats {
			ks = append(ks, base+"hold:"+s)
		}
		for range seats {
			ks = append(ks, base+"sold:0")
		}
		return ks
	}
	args := func(token string, seats ...string) []any {
		a := []any{"", token, 60000, 0, "1 1 0 -1 0 0 0"}
		for _, s := range seats {
			a = append(a, s)
		}
		return a
	}
	first, err := Hold.Run(ctx, rdb, keys("la:{a}:", "A1", "A2", "A3"), args(strings.Repeat("a", 32), "A1", "A2", "A3")...).Slice()
	if err != nil || first[0] != "OK" {
		t.Fatalf("first hold: %v %v", first, err)
	}
	if err := Counts.Run(ctx, rdb, []string{"lb:{b}:gen"}).Err(); err != nil {
		t.Fatalf("counts: %v", err)
	}
	second, err := Hold.Run(ctx, rdb, keys("lb:{b}:", "B1"), args(strings.Repeat("b", 32), "B1")...).Slice()
	if err != nil || second[0] != "OK" {
		t.Fatalf("a one-seat hold of another show after a three-seat hold: %v %v", second, err)
	}
	if v := rdb.Get(ctx, "lb:{b}:hold:B1").Val(); !strings.HasPrefix(v, strings.Repeat("b", 32)+":") {
		t.Fatalf("the second hold's key holds %q", v)
	}
	if a, b := rdb.Keys(ctx, "la:{a}:hold:*").Val(), rdb.Keys(ctx, "lb:{b}:hold:*").Val(); len(a) != 3 || len(b) != 1 {
		t.Fatalf("hold keys %v and %v, want 3 of the first show and 1 of the second", a, b)
	}
}
