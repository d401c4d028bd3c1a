package engine

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// rollBackRedis makes Redis look as if it had been restored from a snapshot taken
// before generation gen was handed out (a failover to a lagging replica, a restart from
// an older RDB): the show's counter is gen-1 and seat has no marker. Everything else
// (the database, the other keys) is as it was.
func (v *env) rollBackRedis(show, seat string, gen int64) {
	v.t.Helper()
	ctx := context.Background()
	k := newKeys(v.cfg.KeyPrefix, show)
	if err := v.rdb.HDel(ctx, v.soldKey(show, seat), seat).Err(); err != nil {
		v.t.Fatal(err)
	}
	if err := v.rdb.Set(ctx, k.gen(), strconv.FormatInt(gen-1, 10), 0).Err(); err != nil {
		v.t.Fatal(err)
	}
}

// TestTombstoneLeavesACollidingHold: after Redis lost data (its counter went back, a
// seat's marker went with it), a new hold can get the generation of a booking the
// database has — regen.lua exists for exactly that hold: its confirmation is refused by
// the fence, the hold is re-issued above the database's high-water mark and books. A
// tombstone drops only the hold that made its booking (reserved under the booking's
// id), never another hold of the same generation: Bob's hold survives both the
// cancellation's tombstone and Resync's, and books.
func TestTombstoneLeavesACollidingHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// cancelFirst: Alice's booking is cancelled before Redis loses data, and the
		// tombstone comes back with Resync; else it is cancelled after Bob's hold.
		cancelFirst bool
	}{
		{"resync writes the old tombstone", true},
		{"the cancellation comes after the hold", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, func(c *Config) { c.MarkerRepairInterval = time.Hour })
			v.show("tcx", "A1", "A2")
			a := v.hold("tcx", time.Minute, "alice", "A1")
			b, err := v.e.Confirm(t.Context(), a, ConfirmOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.cancelFirst {
				if err := v.e.Cancel(t.Context(), b.ID); err != nil {
					t.Fatal(err)
				}
			}
			v.rollBackRedis("tcx", "A1", b.Generation)

			bob := v.hold("tcx", 2*time.Minute, "bob", "A1")
			if bob.Generation != b.Generation {
				t.Fatalf("setup: bob's hold has generation %d, want the colliding %d", bob.Generation, b.Generation)
			}
			if tc.cancelFirst {
				// The operator's answer to a Redis that lost data: it "never drops a
				// hold it did not find on a sold seat".
				if err := v.e.Resync(t.Context(), "tcx"); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := v.e.Cancel(t.Context(), b.ID); err != nil {
					t.Fatal(err)
				}
			}
			if m := v.soldMarkers("tcx"); len(m) != 0 {
				t.Fatalf("setup: A1 is sold in Redis: %v", m)
			}
			hv := v.holdValue("tcx", "A1")
			_, cerr := v.e.Confirm(t.Context(), bob, ConfirmOptions{})
			if hv == "" || cerr != nil {
				t.Fatalf("bob's live hold on the free seat A1 (generation %d, which collides with alice's cancelled booking): "+
					"hold key after the tombstone %q, Confirm: %v — want the hold kept and booked (re-issued by regen)", bob.Generation, hv, cerr)
			}
		})
	}
}
