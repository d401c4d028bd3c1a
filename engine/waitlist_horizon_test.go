package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestWaitlistRebuiltMapHoldsExpiredSeats: a map built from scratch between a hold's
// expiry and the sweep that offers its seats — an engine that starts (or restarts)
// following the show, a rebuild after a feed gap or a Resync, every build of a show
// past Config.MaxWatchedShows — finds the hold keys gone (Redis drops an expired key),
// yet shows the seats and an area's places held, as a followed map does, until the
// horizon passes their expiry: the best-available index and the area's expiry set
// still have them at it (readLateHolds, setAreas).
func TestWaitlistRebuiltMapHoldsExpiredSeats(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wr", 6)
	ctx := t.Context()
	sh, err := v.e.show(ctx, "wr")
	if err != nil {
		t.Fatal(err)
	}
	k := newKeys(v.cfg.KeyPrefix, "wr")
	bad := 0
	const rounds = 3
	for round := range rounds {
		x := v.hold("wr", 300*time.Millisecond, "xavier", "A1", "A2", "A3", "A4")
		if _, err := v.holdPlaces("wr", 300*time.Millisecond, "yvonne", 6); err != nil {
			t.Fatal(err)
		}
		ann, bob := fmt.Sprint("ann", round), fmt.Sprint("bob", round)
		v.join("wr", ann, "A", 4, offerTTL)
		v.join("wr", bob, "GA", 6, offerTTL)
		if _, err := v.e.SeatMap(ctx, "wr"); err != nil { // the followed view, for comparison
			t.Fatal(err)
		}
		// The hold keys are gone: Redis's clock passed the expiry.
		for v.rdb.Exists(ctx, k.hold("A1")).Val() == 1 {
			time.Sleep(time.Millisecond)
		}
		offered := func() bool { return v.offerMade("wr", ann, "A") && v.offerMade("wr", bob, "GA") }
		var shown []string
		for deadline := x.ExpiresAt.Add(5 * time.Second); !offered(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no offer 5 s after the hold expired", round)
			}
			fresh, err := v.e.buildSeatMap(ctx, sh) // a map built from scratch
			if err != nil {
				t.Fatal(err)
			}
			followed, err := v.e.SeatMap(ctx, "wr")
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range fresh.States {
				if fresh.Layout[i].Category == "A" && st == SeatFree {
					wa, _ := v.e.WaitEntry(ctx, "wr", ann, "A")
					wb, _ := v.e.WaitEntry(ctx, "wr", bob, "GA")
					shown = append(shown, fmt.Sprintf("%s free in the rebuilt map v%d (the followed map: %v) at %v; ann %+v bob %+v",
						fresh.Layout[i].ID, fresh.Version, followed.States[i], time.Now().Format("15:04:05.000"), wa, wb))
				}
			}
			for _, a := range fresh.Areas {
				if a.Free != 0 {
					shown = append(shown, fmt.Sprintf("%s %d free in the rebuilt map", a.AreaID, a.Free))
				}
			}
		}
		if len(shown) > 0 {
			for _, m := range v.rdb.XRevRangeN(ctx, k.feed(), "+", "-", 40).Val() {
				t.Logf("feed %s %v", m.ID, m.Values)
			}
			t.Logf("xavier expires %v (%d)", x.ExpiresAt.Format("15:04:05.000"), x.ExpiresAt.UnixMilli())
			bad++
			t.Errorf("round %d: an expired seat shown free before the waitlist's offer: %v", round, shown[:min(len(shown), 4)])
		}
		v.offerGone("wr", ann, "A") // the offers expire before the next round holds
		v.offerGone("wr", bob, "GA")
	}
	t.Logf("%d of %d rounds showed an expired seat free before its offer", bad, rounds)
}

// TestWaitlistSecondEngineHoldsExpiredSeats is TestWaitlistRebuiltMapHoldsExpiredSeats
// through the public API: a second engine (another process, or this one restarted)
// reads the show's map for the first time between a hold's expiry and the sweep that
// offers its seats to the waitlist.
func TestWaitlistSecondEngineHoldsExpiredSeats(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("w2", 6)
	ctx := t.Context()
	k := newKeys(v.cfg.KeyPrefix, "w2")
	bad := 0
	const rounds = 3
	for round := range rounds {
		other := v.twin() // started now; its first SeatMap of the show builds the map
		v.hold("w2", 300*time.Millisecond, "xavier", "A1", "A2", "A3", "A4")
		ann := fmt.Sprint("ann", round)
		v.join("w2", ann, "A", 4, offerTTL)
		for v.rdb.Exists(ctx, k.hold("A1")).Val() == 1 {
			time.Sleep(time.Millisecond)
		}
		m, err := other.SeatMap(ctx, "w2")
		if err != nil {
			t.Fatal(err)
		}
		made := v.offerMade("w2", ann, "A")
		var free []string
		for i, st := range m.States {
			if m.Layout[i].Category == "A" && st == SeatFree {
				free = append(free, m.Layout[i].ID)
			}
		}
		if len(free) > 0 {
			bad++
			t.Errorf("round %d: the second engine's first map shows %v free (offer made by then: %v); the waitlist gets them",
				round, free, made)
		}
		v.offerGone("w2", ann, "A")
		other.Close()
	}
	t.Logf("%d of %d rounds", bad, rounds)
}

// TestWaitlistHorizonWaitsForTheWholeSweep: a sweep gives back at most 500 expired
// holds of a section a call (common.lua: L.reap); one that stopped there does not move
// the horizon, though it did not stop at its bound of offers. 600 seats of a section
// expire together with 7 entries of 100 waiting: the first sweep reaps 500 and offers 5,
// the next reaps the rest and offers the 6th; no map shows those 100 free meanwhile.
func TestWaitlistHorizonWaitsForTheWholeSweep(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold, c.MaxSeatsPerHolder = 100, 100 })
	var seats []Seat
	for i := range 600 {
		seats = append(seats, Seat{ID: fmt.Sprintf("A%03d", i), Section: "A", Row: "1", Position: i + 1, Rank: i + 1, Category: "A"})
	}
	ctx := t.Context()
	if err := v.e.CreateShowVenue(ctx, "rb6", Venue{Seats: seats}); err != nil {
		t.Fatal(err)
	}
	// The holds must outlive the joins: a seat that expired before anyone waited is
	// shown free at once (a join starts the horizon at its time).
	const life = 5 * time.Second
	start := time.Now()
	var last Hold
	for h := range 6 {
		ids := make([]string, 100)
		for i := range ids {
			ids[i] = seats[h*100+i].ID
		}
		last = v.hold("rb6", life, fmt.Sprint("x", h), ids...)
	}
	for j := range 7 {
		v.join("rb6", fmt.Sprint("w", j), "A", 100, 3*time.Second)
	}
	if _, err := v.e.SeatMap(ctx, "rb6"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= life {
		t.Fatalf("the holds and joins took %v, longer than the holds' life (%v): the entries did not wait for the seats", took, life)
	}
	offered := func(holder string) bool {
		w, err := v.e.WaitEntry(ctx, "rb6", holder, "A")
		return err == nil && w.Offer != nil
	}
	k := newKeys(v.cfg.KeyPrefix, "rb6")
	for v.rdb.Exists(ctx, k.hold(last.SeatIDs[0])).Val() == 1 {
		time.Sleep(time.Millisecond)
	}
	worst := 0
	for deadline := time.Now().Add(10 * time.Second); !offered("w5"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the 6th entry has no offer 10 s after the holds expired")
		}
		m, err := v.e.SeatMap(ctx, "rb6")
		if err != nil {
			t.Fatal(err)
		}
		free := 0
		for _, st := range m.States {
			if st == SeatFree {
				free++
			}
		}
		worst = max(worst, free)
	}
	if worst > 0 {
		t.Fatalf("the followed map showed %d expired seats free before the 6th entry (waiting for them) was offered them", worst)
	}
}
