package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestShrinkKeepsPart: Shrink keeps a seat and 2 of 6 places under the same token,
// generation and expiry; the seat and the 4 places given back are sellable at once; the
// shrunk hold confirms exactly what it kept; the hold as it was is lost.
func TestShrinkKeepsPart(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 6, "A1", "A2")
	if err != nil {
		t.Fatal(err)
	}
	s, err := v.e.Shrink(t.Context(), h, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 2}})
	if err != nil {
		t.Fatalf("Shrink: %v", err)
	}
	if s.Token != h.Token || s.Generation != h.Generation || !s.ExpiresAt.Equal(h.ExpiresAt) ||
		!slices.Equal(s.SeatIDs, []string{"A1"}) || len(s.Places) != 1 || s.Places[0].Count != 2 {
		t.Fatalf("shrunk hold %+v, from %+v", s, h)
	}
	if _, held, _ := v.areaState("s1", "FLOOR"); held != 2 {
		t.Fatalf("FLOOR held %d after the shrink, want 2", held)
	}
	// What was given back is another buyer's at once: A2 and the 8 places left.
	other, err := v.holdPlaces("s1", time.Minute, "bob", 8, "A2")
	if err != nil {
		t.Fatalf("another buyer after the shrink: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirming the hold as it was: %v, want ErrHoldLost", err)
	}
	b, err := v.e.Confirm(t.Context(), s, ConfirmOptions{})
	if err != nil {
		t.Fatalf("confirming the shrunk hold: %v", err)
	}
	if !slices.Equal(b.SeatIDs, []string{"A1"}) || len(b.Places) != 1 || b.Places[0].Count != 2 {
		t.Fatalf("booking %+v, want A1 and 2 places", b)
	}
	if _, err := v.e.Confirm(t.Context(), other, ConfirmOptions{}); err != nil {
		t.Fatalf("confirming the other buyer: %v", err)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 10 {
		t.Fatalf("FLOOR sold %d, want 10", sold)
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
}

// TestShrinkKeepAllChangesNothing: keeping the whole hold is a shrink by nothing.
func TestShrinkKeepAllChangesNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
	before := v.redisSnapshot()
	s, err := v.e.Shrink(t.Context(), h, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 3}})
	if err != nil || !slices.Equal(s.SeatIDs, h.SeatIDs) || !slices.Equal(s.Places, h.Places) {
		t.Fatalf("Shrink keeping everything: %+v, %v", s, err)
	}
	if after := v.redisSnapshot(); after != before {
		t.Fatalf("keeping everything changed Redis:\n%s\nthen\n%s", before, after)
	}
}

// TestShrinkRefusalsChangeNothing: a part the hold does not have, nothing kept, a lost
// hold: each is refused with its typed error, and Redis and PostgreSQL are as they were.
func TestShrinkRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
	stale := h
	stale.Generation++
	other := h
	other.Token = newToken()
	cases := []struct {
		name   string
		h      Hold
		seats  []string
		places []Places
		want   error
	}{
		{"a seat not in the hold", h, []string{"A2"}, nil, ErrInvalidArgument},
		{"a seat in the hold and one not", h, []string{"A1", "A2"}, nil, ErrInvalidArgument},
		{"an area not in the hold", h, []string{"A1"}, []Places{{AreaID: "BALCONY", Count: 1}}, ErrInvalidArgument},
		{"more places than held", h, nil, []Places{{AreaID: "FLOOR", Count: 4}}, ErrInvalidArgument},
		{"a seat twice", h, []string{"A1", "A1"}, nil, ErrInvalidArgument},
		{"no count", h, nil, []Places{{AreaID: "FLOOR", Count: 0}}, ErrInvalidArgument},
		{"nothing kept", h, nil, nil, ErrInvalidArgument},
		{"an older generation", stale, []string{"A1"}, nil, ErrHoldLost},
		{"another token", other, []string{"A1"}, nil, ErrHoldLost},
	}
	for _, c := range cases {
		beforeR, beforeD := v.redisSnapshot(), v.dbSnapshot()
		if _, err := v.e.Shrink(t.Context(), c.h, c.seats, c.places); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if after := v.redisSnapshot(); after != beforeR {
			t.Errorf("%s changed Redis:\n%s\nthen\n%s", c.name, beforeR, after)
		}
		if after := v.dbSnapshot(); after != beforeD {
			t.Errorf("%s changed PostgreSQL:\n%s\nthen\n%s", c.name, beforeD, after)
		}
	}
	// A released hold is lost too, and its shrink changes nothing.
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	beforeR, beforeD := v.redisSnapshot(), v.dbSnapshot()
	if _, err := v.e.Shrink(t.Context(), h, []string{"A1"}, nil); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("shrinking a released hold: %v, want ErrHoldLost", err)
	}
	if v.redisSnapshot() != beforeR || v.dbSnapshot() != beforeD {
		t.Fatal("shrinking a released hold changed something")
	}
}

// TestShrinkRacesConfirm: a Shrink and a Confirm of one hold at once: exactly one of them
// wins. A won Confirm books the whole hold; a won Shrink leaves the hold as it kept it,
// and what it gave back is free. Never a seat booked twice nor a place oversold.
func TestShrinkRacesConfirm(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 40)
	won := map[string]int{}
	for i := range 40 {
		h, err := v.holdPlaces("s1", time.Minute, "alice", 1, "A1")
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		var wg sync.WaitGroup
		var shrinkErr, confirmErr error
		var shrunk Hold
		wg.Add(2)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%8) * 2 * time.Millisecond) // the confirmation's head start
			shrunk, shrinkErr = v.e.Shrink(t.Context(), h, nil, []Places{{AreaID: "FLOOR", Count: 1}})
		}()
		go func() { defer wg.Done(); _, confirmErr = v.e.Confirm(t.Context(), h, ConfirmOptions{}) }()
		wg.Wait()
		switch {
		case shrinkErr == nil && confirmErr == nil:
			t.Fatalf("round %d: both the shrink and the confirmation succeeded", i)
		case shrinkErr != nil && confirmErr != nil:
			t.Fatalf("round %d: both failed: shrink %v, confirm %v", i, shrinkErr, confirmErr)
		case shrinkErr != nil && !errors.Is(shrinkErr, ErrHoldLost):
			t.Fatalf("round %d: shrink after the confirmation: %v, want ErrHoldLost", i, shrinkErr)
		case confirmErr != nil && !errors.Is(confirmErr, ErrHoldLost):
			t.Fatalf("round %d: confirmation after the shrink: %v, want ErrHoldLost", i, confirmErr)
		}
		if confirmErr == nil {
			won["confirm"]++
			// A1 is booked: cancel it for the next round.
			if n := v.count("SELECT count(*)::int FROM seat_claims WHERE show_id = 's1'"); n != 1 {
				t.Fatalf("round %d: %d claims after a confirmation", i, n)
			}
			v.cancelAll("s1")
			continue
		}
		won["shrink"]++
		if h2, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, HolderID: "bob", TTL: time.Minute}); err != nil {
			t.Fatalf("round %d: A1 after the shrink gave it back: %v", i, err)
		} else if err := errors.Join(v.e.Release(t.Context(), h2), v.e.Release(t.Context(), shrunk)); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
	t.Logf("won: %v", won)
}

// cancelAll cancels every confirmed booking of a show.
func (v *env) cancelAll(show string) {
	v.t.Helper()
	rows, err := v.pool.Query(v.t.Context(), "SELECT booking_id FROM bookings WHERE show_id = $1 AND status = 'confirmed'", show)
	if err != nil {
		v.t.Fatal(err)
	}
	var ids [][16]byte
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			v.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		if err := v.e.Cancel(v.t.Context(), id); err != nil {
			v.t.Fatal(err)
		}
	}
}

// busy is a refusal for the shared machine's load (a script or a batch slower than its
// bound), which is no answer about the inventory: the test goes on without that step.
func busy(err error) bool { return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOverloaded) }

// TestShrinkConcurrentBuyersNeverOversell: 200 buyers on a 60-place area with 20 seats,
// each holding places and a seat, then shrinking, confirming, releasing or letting the
// hold expire at random, all at once: PostgreSQL never sells more than 60 places, sold
// equals the places confirmed, no seat is booked twice, and once every hold has ended
// Redis holds nothing.
func TestShrinkConcurrentBuyersNeverOversell(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := make([]Seat, 20)
	for i := range seats {
		seats[i] = Seat{ID: seatNames(20)[i], Position: i + 1}
	}
	if err := v.e.CreateShowVenue(t.Context(), "s1", Venue{Seats: seats, Areas: []Area{{ID: "FLOOR", Capacity: 60}}}); err != nil {
		t.Fatal(err)
	}
	// One hold first: the engine's check of Redis's memory policy is done before the
	// 200 buyers arrive at once.
	if h, err := v.holdPlaces("s1", time.Minute, "first", 1); err != nil {
		t.Fatal(err)
	} else if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	var confirmed atomic.Int64
	var wg sync.WaitGroup
	for buyer := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(buyer), 7))
			seat := seats[r.IntN(len(seats))].ID
			n := 1 + r.IntN(4)
			h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{seat}, HolderID: fmt.Sprint("buyer", buyer),
				TTL: 200 * time.Millisecond, Places: []Places{{AreaID: "FLOOR", Count: n}}})
			if err != nil {
				if !errors.Is(err, ErrSeatsUnavailable) && !busy(err) {
					t.Errorf("hold: %v", err)
				}
				return
			}
			if r.IntN(2) == 0 {
				keep := 1 + r.IntN(n)
				if h, err = v.e.Shrink(t.Context(), h, nil, []Places{{AreaID: "FLOOR", Count: keep}}); err != nil {
					if !errors.Is(err, ErrHoldLost) && !busy(err) {
						t.Errorf("shrink: %v", err)
					}
					return
				}
			}
			switch r.IntN(3) {
			case 0:
				// Asked again with its key while the answer is unknown: the count of
				// places confirmed is only what was answered as booked.
				opts := ConfirmOptions{IdempotencyKey: fmt.Sprint("k", buyer)}
				b, err := v.e.Confirm(t.Context(), h, opts)
				for try := 0; busy(err) && try < 20; try++ {
					b, err = v.e.Confirm(t.Context(), h, opts)
				}
				if err == nil {
					confirmed.Add(int64(b.Places[0].Count))
				} else if !errors.Is(err, ErrHoldLost) {
					t.Errorf("confirm: %v", err)
				}
			case 1:
				if err := v.e.Release(t.Context(), h); err != nil && !errors.Is(err, ErrHoldLost) && !busy(err) {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	sold := v.areaSold("s1", "FLOOR")
	if sold > 60 || int64(sold) != confirmed.Load() {
		t.Fatalf("FLOOR sold %d (capacity 60), confirmed %d", sold, confirmed.Load())
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
	time.Sleep(300 * time.Millisecond)
	for left, i := 60-sold, 0; left > 0; i++ {
		n := min(left, 10) // the holder limit
		if _, err := v.holdPlaces("s1", time.Minute, fmt.Sprint("last", i), n); err != nil {
			t.Fatalf("the places never sold, once every hold ended (%d left to hold): %v", left, err)
		}
		left -= n
	}
	if _, held, s := v.areaState("s1", "FLOOR"); held != 60-sold || s != sold {
		t.Fatalf("Redis: FLOOR held %d sold %d, want %d and %d", held, s, 60-sold, sold)
	}
}
