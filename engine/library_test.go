package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestStaleLibrariesAreDeleted: on every master, the holdfast library of a version no
// engine holds a lease on (an upgrade left it) is deleted; one whose lease is held (an
// engine of that version still runs), this version's, and libraries that are not
// holdfast's stay. The engine leases its own library for libraryLease. A Redis of its
// own: other tests flush the shared one's libraries.
func TestStaleLibrariesAreDeleted(t *testing.T) {
	t.Parallel()
	var rdb redis.UniversalClient
	if testsvc.ClusterMode() {
		rdb = testsvc.StartCluster(t).Client()
	} else {
		rdb = testsvc.StartRedis(t).Client()
	}
	v := newEnvWith(t, testsvc.Database(t), rdb)
	ctx := t.Context()
	const stale, leased, foreign = "holdfast_00000000a1a1", "holdfast_00000000b2b2", "tickets"
	libs := map[string]string{
		stale:   strings.ReplaceAll(lua.LibraryCode(), lua.LibraryName(), stale),
		leased:  strings.ReplaceAll(lua.LibraryCode(), lua.LibraryName(), leased),
		foreign: "#!lua name=tickets\nredis.register_function('tickets_one', function() return 1 end)",
	}
	// Leased before it is loaded: the engine's loop may clean up meanwhile.
	if err := rdb.Set(ctx, libraryLeaseKey(leased), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	err := lua.EachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		if err := lua.LoadOn(ctx, c); err != nil {
			return err
		}
		for _, code := range libs {
			if err := c.FunctionLoad(ctx, code).Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	v.e.keepLibrary(ctx)

	var masters atomic.Int32 // the callbacks run at once on a Cluster
	err = lua.EachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		masters.Add(1)
		have := map[string]bool{}
		all, err := c.FunctionList(ctx, redis.FunctionListQuery{}).Result()
		for _, l := range all {
			have[l.Name] = true
		}
		for name, want := range map[string]bool{stale: false, leased: true, foreign: true, lua.LibraryName(): true} {
			if have[name] != want {
				t.Errorf("%s: library %s loaded %v, want %v", c.Options().Addr, name, have[name], want)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if testsvc.ClusterMode() && masters.Load() < 2 {
		t.Fatalf("checked %d masters of a Redis Cluster", masters.Load())
	}
	ttl, err := rdb.PTTL(ctx, libraryLeaseKey(lua.LibraryName())).Result()
	if err != nil || ttl <= libraryLease-time.Minute || ttl > libraryLease {
		t.Fatalf("this version's lease lives %v (%v), want about %v", ttl, err, libraryLease)
	}
	// The engine still answers: its library is there, and the deleted one was not its.
	v.show("s1", "A1")
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, HolderID: "alice", TTL: time.Minute}); err != nil {
		t.Fatalf("hold after the clean-up: %v", err)
	}
}

// TestLibraryLeasesAreTheServers: an engine whose keys are in another database than 0
// leases its library in database 0, where every engine of the server looks, whatever
// its own database (a library is the server's); and it does so from its start, on a
// loop of its own, whatever its marker-repair interval.
func TestLibraryLeasesAreTheServers(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	db1 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = db1.Close() })
	newEnvWith(t, testsvc.Database(t), db1, func(c *Config) { c.MarkerRepairInterval = 24 * time.Hour })
	db0 := srv.Client()
	key := libraryLeaseKey(lua.LibraryName())
	waitFor(t, "the lease in database 0", 10*time.Second, func() bool {
		ttl, err := db0.PTTL(t.Context(), key).Result()
		return err == nil && ttl > libraryLease-time.Minute
	})
	if n, err := db1.Exists(t.Context(), key).Result(); err != nil || n != 0 {
		t.Fatalf("the lease is in the engine's own database too (%d, %v): an engine on database 0 would not see one there", n, err)
	}
}

// TestCleanUpsAtOnce: engines cleaning up the same stale libraries at once each
// succeed: a library another deleted first is not an error.
func TestCleanUpsAtOnce(t *testing.T) {
	t.Parallel()
	c := testsvc.StartRedis(t).Client()
	ctx := t.Context()
	for i := range 20 {
		name := fmt.Sprintf("holdfast_00000000d%03x", i)
		if err := c.FunctionLoad(ctx, strings.ReplaceAll(lua.LibraryCode(), lua.LibraryName(), name)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	none := func(context.Context, string) (bool, error) { return false, nil }
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = lua.DeleteStale(ctx, c, none) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("clean-up %d: %v", i, err)
		}
	}
	if libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "holdfast_*"}).Result(); err != nil || len(libs) != 0 {
		t.Fatalf("%d stale libraries left (%v)", len(libs), err)
	}
}
