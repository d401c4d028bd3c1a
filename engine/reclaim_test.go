package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReclaimRefusesTheOldToken: a holder's live holds come back with fresh tokens and
// larger generations, their seats and expiries unchanged; every call with an old token
// is ErrHoldLost and changes nothing; the new ones extend and confirm; another holder's
// hold is neither returned nor touched.
func TestReclaimRefusesTheOldToken(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "B1", "C1")
	pair := v.hold("s1", time.Minute, "alice", "A1", "A2")
	single := v.hold("s1", time.Minute, "alice", "B1")
	bobs := v.hold("s1", time.Minute, "bob", "C1")

	got, err := v.e.Reclaim(ctx, "s1", "alice")
	if err != nil {
		t.Fatalf("reclaim: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("reclaimed %d holds, want 2: %+v", len(got), got)
	}
	for i, old := range []Hold{pair, single} {
		h := got[i]
		if fmt.Sprint(h.SeatIDs) != fmt.Sprint(old.SeatIDs) || h.Token == old.Token || h.Generation <= bobs.Generation ||
			h.HolderID != "alice" || !h.ExpiresAt.Equal(old.ExpiresAt) && h.ExpiresAt.Sub(old.ExpiresAt).Abs() > 5*time.Millisecond {
			t.Fatalf("reclaimed %+v for %+v", h, old)
		}
		before := v.redisSnapshot()
		if _, err := v.e.Extend(ctx, old, 2*time.Minute); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("extend with the old token: %v, want ErrHoldLost", err)
		}
		if err := v.e.Release(ctx, old); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("release with the old token: %v, want ErrHoldLost", err)
		}
		if _, err := v.e.Confirm(ctx, old, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("confirm with the old token: %v, want ErrHoldLost", err)
		}
		if after := v.redisSnapshot(); after != before {
			t.Fatalf("the old token's calls changed Redis:\n%s\n%s", before, after)
		}
	}
	if _, err := v.e.Extend(ctx, got[0], 2*time.Minute); err != nil {
		t.Fatalf("extend the reclaimed hold: %v", err)
	}
	if _, err := v.e.Confirm(ctx, got[1], ConfirmOptions{}); err != nil {
		t.Fatalf("confirm the reclaimed hold: %v", err)
	}
	if _, err := v.e.Confirm(ctx, bobs, ConfirmOptions{}); err != nil {
		t.Fatalf("bob's hold after alice's reclaim: %v", err)
	}
	again, err := v.e.Reclaim(ctx, "s1", "alice")
	if err != nil || len(again) != 1 || fmt.Sprint(again[0].SeatIDs) != "[A1 A2]" {
		t.Fatalf("second reclaim: %+v, %v; want the one live hold A1 A2", again, err)
	}
	if _, err := v.e.Reclaim(ctx, "s1", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("reclaim without a holder: %v, want ErrInvalidArgument", err)
	}
}

// TestReclaimFencesTheOldDevice: the old device's confirmation pauses after its first
// Redis check; meanwhile the holder reclaims on a new device and books the seat. The old
// device's confirmation is refused — by Redis when Redis kept the reclaim, and by the
// fence when Redis lost the reclaim and the sale (a failover to a replica that had
// neither): the old hold is back in Redis as it was, and PostgreSQL's fence, which has
// seen the reclaimed generation, refuses it. One booking, the new device's.
func TestReclaimFencesTheOldDevice(t *testing.T) {
	t.Parallel()
	for _, redisLost := range []bool{false, true} {
		t.Run(fmt.Sprintf("redisLost=%v", redisLost), func(t *testing.T) {
			t.Parallel()
			v := newEnv(t)
			v.show("s1", "A1")
			other := v.twin()
			old := v.hold("s1", time.Minute, "alice", "A1")
			oldValue := v.holdValue("s1", "A1")
			var newer Booking
			v.e.hooks.beforeWrite = func(ctx context.Context) {
				hs, err := other.Reclaim(ctx, "s1", "alice")
				if err != nil || len(hs) != 1 {
					t.Errorf("reclaim: %v, %v", hs, err)
					return
				}
				if newer, err = other.Confirm(ctx, hs[0], ConfirmOptions{}); err != nil {
					t.Errorf("new device's confirm: %v", err)
				}
				if redisLost {
					v.rdb.Set(ctx, newKeys(v.cfg.KeyPrefix, "s1").hold("A1"), oldValue, time.Minute)
					v.rdb.HDel(ctx, v.soldKey("s1", "A1"), "A1")
				}
			}
			_, err := v.e.Confirm(t.Context(), old, ConfirmOptions{})
			// Redis kept the reclaim: the batch's check refuses the old token. It lost it:
			// the fence refuses the old generation (counted below); the engine takes that
			// for a counter Redis set back, re-issues the hold above the fence, and the
			// seat's claim refuses it.
			if want := map[bool]error{false: ErrHoldLost, true: ErrSeatsUnavailable}[redisLost]; !errors.Is(err, want) {
				t.Fatalf("old device: %v, want %v", err, want)
			}
			if n := v.bookings("s1"); n != 1 {
				t.Fatalf("%d bookings, want 1", n)
			}
			if c := v.claims("s1"); c["A1"] != newer.ID.String() {
				t.Fatalf("claim %v, want the new device's booking %s", c, newer.ID)
			}
			if fenced := testutil.ToFloat64(v.e.m.fenceRefusals); redisLost && fenced < 1 {
				t.Fatalf("the fence refused %v times, want it to refuse the old generation", fenced)
			}
		})
	}
}

// TestConcurrentReclaimAndConfirmBookOnce: a holder's holds are confirmed with their
// old tokens by one device while others reclaim them over and over and confirm what
// they got. No seat is booked twice, and every hold ends either booked once or live
// under exactly one token (the last reclaim's).
func TestConcurrentReclaimAndConfirmBookOnce(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 32 })
	ctx := t.Context()
	seats := seatNames(16)
	v.show("s1", seats...)
	var holds []Hold
	for i := 0; i < len(seats); i += 2 {
		holds = append(holds, v.hold("s1", time.Minute, "alice", seats[i], seats[i+1]))
	}
	refusal := func(err error) bool {
		return err == nil || errors.Is(err, ErrHoldLost) || errors.Is(err, ErrStaleGeneration) || errors.Is(err, ErrSeatsUnavailable)
	}
	var wg sync.WaitGroup
	for _, h := range holds {
		wg.Go(func() {
			if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); !refusal(err) {
				t.Errorf("old-token confirm: %v", err)
			}
		})
	}
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for round := 0; round < 3; round++ {
				hs, err := v.e.Reclaim(ctx, "s1", "alice")
				if err != nil {
					t.Errorf("reclaim: %v", err)
					return
				}
				if g%2 == 1 && len(hs) > 0 {
					if _, err := v.e.Confirm(ctx, hs[round%len(hs)], ConfirmOptions{}); !refusal(err) {
						t.Errorf("reclaimed confirm: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
	live, err := v.e.Reclaim(ctx, "s1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	booked := v.bookings("s1")
	if booked == 0 || booked+len(live) != len(holds) {
		t.Fatalf("%d bookings and %d live holds, want %d in all and a booking", booked, len(live), len(holds))
	}
}

// TestReclaimAfterADeadBatchLapses: a batch reserved one
// of a holder's 10-minute holds and never decided (its process died after the check, or
// every reply to it and to its give-back was lost). Once the reservation has lapsed,
// within its own bound, Reclaim gives the holder every live hold again, that one
// included — as Release and Extend act on it — rather than waiting for a batch that
// ended and answering ErrUnavailable for the hold's whole life. The new token books.
func TestReclaimAfterADeadBatchLapses(t *testing.T) {
	t.Parallel()
	v := newEnv(t, shortReservations)
	v.show("rl", "A1", "B1")
	dead := v.hold("rl", 10*time.Minute, "alice", "A1")
	live := v.hold("rl", 10*time.Minute, "alice", "B1")
	start := time.Now()
	v.reserveAs(dead, uuid.New())
	var got []Hold
	within := time.Until(start.Add(v.e.reserveLife() + 2*time.Second))
	waitFor(t, "reclaim after the lapse", within, tryWithin(t, "reclaim", func(ctx context.Context) (err error) {
		got, err = v.e.Reclaim(ctx, "rl", "alice")
		return err
	}))
	t.Logf("reclaimed %v after the dead batch's check (the reservation's bound: %v)", time.Since(start).Round(time.Millisecond), v.e.reserveLife())
	if len(got) != 2 || fmt.Sprint(got[0].SeatIDs, got[1].SeatIDs) != "[A1] [B1]" {
		t.Fatalf("reclaimed %+v, want the holds of A1 and B1", got)
	}
	if strings.Contains(v.holdValue("rl", "A1"), "|") {
		t.Fatalf("hold value after the reclaim %q still carries the dead batch's reservation", v.holdValue("rl", "A1"))
	}
	if err := v.e.Release(t.Context(), dead); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("release with the old token: %v, want ErrHoldLost", err)
	}
	// The short statement timeout can cut a confirmation on a loaded machine: retry it
	// under one idempotency key until it answers, within a reservation's bound.
	key := ConfirmOptions{IdempotencyKey: "reclaimed-" + uuid.NewString()}
	waitFor(t, "the reclaimed hold confirmed", v.e.reserveLife()+2*time.Second, tryWithin(t, "confirm the reclaimed hold", func(ctx context.Context) error {
		_, err := v.e.Confirm(ctx, got[0], key)
		return err
	}))
	if v.bookings("rl") != 1 || v.doubleBookings() != 0 || live.Token == got[1].Token {
		t.Fatalf("%d bookings (want 1), %d double", v.bookings("rl"), v.doubleBookings())
	}
}
