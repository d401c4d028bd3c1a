package engine

import (
	"context"
	"strings"
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
	if err := rdb.Set(ctx, libraryLeaseKey(leased), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	v.e.keepLibrary(ctx)

	masters := 0
	err = lua.EachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		masters++
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
	if testsvc.ClusterMode() && masters < 2 {
		t.Fatalf("checked %d masters of a Redis Cluster", masters)
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
