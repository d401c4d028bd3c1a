package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConfirmPartBooksItAndReleasesTheRest: a hold of two seats and 6 places confirmed
// in part (a seat and 2 places) books exactly that part, fenced and claimed; the other
// seat and the 4 other places are another buyer's at once; the hold is spent.
func TestConfirmPartBooksItAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 6, "A1", "A2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{SeatIDs: []string{"A1"}, Places: []Places{{AreaID: "FLOOR", Count: 2}}})
	if err != nil {
		t.Fatalf("Confirm of a part: %v", err)
	}
	if !slices.Equal(b.SeatIDs, []string{"A1"}) || !slices.Equal(b.Places, []Places{{AreaID: "FLOOR", Count: 2}}) || b.Generation != h.Generation {
		t.Fatalf("booking %+v, want A1 and 2 places of generation %d", b, h.Generation)
	}
	if c := v.claims("s1"); len(c) != 1 || c["A1"] != b.ID.String() {
		t.Fatalf("claims %v, want A1 alone", c)
	}
	if n := v.count("SELECT generation::int FROM seat_fences WHERE show_id = 's1' AND seat_id = 'A2'"); n != 0 {
		t.Fatalf("A2's fence at %d: the part not booked moved a fence", n)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 2 {
		t.Fatalf("FLOOR sold %d in PostgreSQL, want 2", sold)
	}
	if _, held, sold := v.areaState("s1", "FLOOR"); held != 0 || sold != 2 {
		t.Fatalf("Redis: FLOOR held %d sold %d, want 0 and 2", held, sold)
	}
	// The rest is another buyer's at once: A2 and the 8 places left.
	other, err := v.holdPlaces("s1", time.Minute, "bob", 8, "A2")
	if err != nil {
		t.Fatalf("another buyer after the partial confirmation: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), other, ConfirmOptions{}); err != nil {
		t.Fatalf("confirming the other buyer: %v", err)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 10 {
		t.Fatalf("FLOOR sold %d, want 10", sold)
	}
	// The hold made its booking: confirming it again, whole or in part, books nothing.
	for _, opts := range []ConfirmOptions{{}, {SeatIDs: []string{"A2"}}} {
		if _, err := v.e.Confirm(t.Context(), h, opts); err == nil {
			t.Fatalf("the spent hold confirmed again (%+v)", opts)
		}
	}
	if n := v.bookings("s1"); n != 2 || v.doubleBookings() != 0 {
		t.Fatalf("%d bookings, %d seats booked twice", n, v.doubleBookings())
	}
}

// TestConfirmPartWithItsKeyReplays: a partial confirmation retried with its idempotency
// key gets its booking; the same key with another part of the hold is
// ErrIdempotencyKeyReused; a part that is the whole hold is a whole confirmation.
func TestConfirmPartWithItsKeyReplays(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 4, "A1", "A2")
	if err != nil {
		t.Fatal(err)
	}
	opts := ConfirmOptions{IdempotencyKey: "k1", Places: []Places{{AreaID: "FLOOR", Count: 3}}}
	b, err := v.e.Confirm(t.Context(), h, opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Confirm(t.Context(), h, opts)
	if err != nil || again.ID != b.ID || !again.Replayed || !slices.Equal(again.Places, []Places{{AreaID: "FLOOR", Count: 3}}) || len(again.SeatIDs) != 0 {
		t.Fatalf("retry: %+v, %v; want booking %s replayed", again, err, b.ID)
	}
	other := opts
	other.Places = []Places{{AreaID: "FLOOR", Count: 2}}
	if _, err := v.e.Confirm(t.Context(), h, other); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("the key with another part: %v, want ErrIdempotencyKeyReused", err)
	}
	whole, err := v.holdPlaces("s1", time.Minute, "bob", 6, "A1", "A2")
	if err != nil {
		t.Fatalf("A1, A2 and the 6 places after alice's part: %v", err)
	}
	wb, err := v.e.Confirm(t.Context(), whole, ConfirmOptions{SeatIDs: []string{"A2", "A1"}, Places: []Places{{AreaID: "FLOOR", Count: 6}}})
	if err != nil || !slices.Equal(wb.SeatIDs, []string{"A1", "A2"}) || wb.Places[0].Count != 6 {
		t.Fatalf("the whole hold named as its part: %+v, %v", wb, err)
	}
	if _, held, sold := v.areaState("s1", "FLOOR"); held != 0 || sold != 9 || v.areaSold("s1", "FLOOR") != 9 {
		t.Fatalf("FLOOR held %d sold %d in Redis, %d in PostgreSQL; want 0, 9, 9", held, sold, v.areaSold("s1", "FLOOR"))
	}
}

// TestConfirmPartRefusalsChangeNothing: a part the hold does not have is
// ErrInvalidArgument, and a part of a hold that is not current ErrHoldLost; each leaves
// Redis and PostgreSQL as they were, and the hold still confirms afterwards.
func TestConfirmPartRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
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
		{"an area twice", h, nil, []Places{{AreaID: "FLOOR", Count: 1}, {AreaID: "FLOOR", Count: 1}}, ErrInvalidArgument},
		{"no count", h, nil, []Places{{AreaID: "FLOOR", Count: 0}}, ErrInvalidArgument},
		{"a bad seat id", h, []string{"A 1"}, nil, ErrInvalidArgument},
		{"another token", other, []string{"A1"}, nil, ErrHoldLost},
	}
	for _, c := range cases {
		beforeR, beforeD := v.redisSnapshot(), v.dbSnapshot()
		if _, err := v.e.Confirm(t.Context(), c.h, ConfirmOptions{SeatIDs: c.seats, Places: c.places}); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if after := v.redisSnapshot(); after != beforeR {
			t.Errorf("%s changed Redis:\n%s\nthen\n%s", c.name, beforeR, after)
		}
		if after := v.dbSnapshot(); after != beforeD {
			t.Errorf("%s changed PostgreSQL:\n%s\nthen\n%s", c.name, beforeD, after)
		}
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{Places: []Places{{AreaID: "FLOOR", Count: 1}}})
	if err != nil || len(b.SeatIDs) != 0 || b.Places[0].Count != 1 {
		t.Fatalf("the hold after the refusals: %+v, %v", b, err)
	}
}

// TestPausedPartialConfirmFenced: a partial confirmation pauses before its batch; its
// hold expires, another buyer books the seat, and Redis then has the old hold back (a
// failover to a replica that missed the expiry). Resumed, the old generation is refused
// by the seat's fence (and the re-issued one by the claim): one booking, the newer one.
func TestPausedPartialConfirmFenced(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	other := v.twin()
	old := v.hold("s1", time.Second, "alice", "A1", "A2") // current at the first check on a loaded machine
	values := map[string]string{"A1": v.holdValue("s1", "A1"), "A2": v.holdValue("s1", "A2")}
	var newer Booking
	v.e.hooks.beforeWrite = func(ctx context.Context) {
		v.waitExpired(old)
		h, err := other.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, HolderID: "bob"})
		if err == nil {
			newer, err = other.Confirm(ctx, h, ConfirmOptions{})
		}
		if err != nil {
			t.Errorf("the newer buyer: %v", err)
		}
		k := newKeys(v.cfg.KeyPrefix, "s1")
		for s, val := range values {
			if err := v.rdb.Set(ctx, k.hold(s), val, time.Minute).Err(); err != nil {
				t.Error(err)
			}
		}
	}
	// Its caller's copy says it lives a minute more: it goes to its batch unasked.
	old.ExpiresAt = time.Now().Add(time.Minute)
	_, err := v.e.Confirm(t.Context(), old, ConfirmOptions{SeatIDs: []string{"A1"}})
	v.e.hooks.beforeWrite = nil
	if err == nil || !(errors.Is(err, ErrSeatsUnavailable) || errors.Is(err, ErrStaleGeneration) || errors.Is(err, ErrHoldLost)) {
		t.Fatalf("the paused partial confirmation: %v, want a refusal", err)
	}
	if n := testutil.ToFloat64(v.e.m.fenceRefusals); n < 1 {
		t.Fatalf("%v fence refusals: the old generation was not refused by the fence", n)
	}
	if n := v.bookings("s1"); n != 1 {
		t.Fatalf("%d bookings, want the newer one alone", n)
	}
	if c := v.claims("s1"); len(c) != 1 || c["A1"] != newer.ID.String() {
		t.Fatalf("claims %v, want A1 by the newer booking %s", c, newer.ID)
	}
}

// TestConfirmPartRacesShrink: a partial confirmation and a Shrink of one hold at once:
// exactly one wins. A won confirmation books its part and frees the rest; a won Shrink
// leaves the hold as it kept it. Never a seat booked twice nor a place oversold.
func TestConfirmPartRacesShrink(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 4)
	won := map[string]int{}
	for i := range 30 {
		h, err := v.holdPlaces("s1", time.Minute, "alice", 3, "A1", "A2")
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
			shrunk, shrinkErr = v.e.Shrink(t.Context(), h, []string{"A2"}, nil)
		}()
		go func() {
			defer wg.Done()
			_, confirmErr = v.e.Confirm(t.Context(), h, ConfirmOptions{SeatIDs: []string{"A1"}, Places: []Places{{AreaID: "FLOOR", Count: 2}}})
		}()
		wg.Wait()
		switch {
		case shrinkErr == nil && confirmErr == nil:
			t.Fatalf("round %d: both the shrink and the partial confirmation succeeded", i)
		case shrinkErr != nil && confirmErr != nil:
			t.Fatalf("round %d: both failed: shrink %v, confirm %v", i, shrinkErr, confirmErr)
		case shrinkErr != nil && !errors.Is(shrinkErr, ErrHoldLost):
			t.Fatalf("round %d: shrink after the confirmation: %v, want ErrHoldLost", i, shrinkErr)
		case confirmErr != nil && !errors.Is(confirmErr, ErrHoldLost):
			t.Fatalf("round %d: confirmation after the shrink: %v, want ErrHoldLost", i, confirmErr)
		}
		if confirmErr == nil {
			won["confirm"]++
			if c := v.claims("s1"); len(c) != 1 || c["A1"] == "" || v.areaSold("s1", "FLOOR") != 2 {
				t.Fatalf("round %d: claims %v, FLOOR sold %d after a partial confirmation", i, c, v.areaSold("s1", "FLOOR"))
			}
			// A2 and the place not booked are free at once.
			if h2, err := v.holdPlaces("s1", time.Minute, "bob", 2, "A2"); err != nil {
				t.Fatalf("round %d: the rest after the partial confirmation: %v", i, err)
			} else if err := v.e.Release(t.Context(), h2); err != nil {
				t.Fatal(err)
			}
			v.cancelAll("s1")
			continue
		}
		won["shrink"]++
		if err := v.e.Release(t.Context(), shrunk); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
	t.Logf("won: %v", won)
}

// TestConfirmPartConcurrentBuyersNeverOversell: 200 buyers on a 60-place area with 20
// seats, each holding places and a seat, then confirming part of the hold, shrinking
// first, releasing or letting the hold expire at random, all at once: PostgreSQL never
// sells more than 60 places, sold equals the places confirmed, no seat is booked twice,
// and once every hold has ended every place not sold can be held again.
func TestConfirmPartConcurrentBuyersNeverOversell(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := make([]Seat, 20)
	for i := range seats {
		seats[i] = Seat{ID: seatNames(20)[i], Position: i + 1}
	}
	if err := v.e.CreateShowVenue(t.Context(), "s1", Venue{Seats: seats, Areas: []Area{{ID: "FLOOR", Capacity: 60}}}); err != nil {
		t.Fatal(err)
	}
	if h, err := v.holdPlaces("s1", time.Minute, "first", 1); err != nil {
		t.Fatal(err)
	} else if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	var confirmed atomic.Int64
	var wg sync.WaitGroup
	for buyer := range 200 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(buyer), 11))
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
			if r.IntN(3) == 0 && n > 1 {
				if h, err = v.e.Shrink(t.Context(), h, []string{seat}, []Places{{AreaID: "FLOOR", Count: n - 1}}); err != nil {
					if !errors.Is(err, ErrHoldLost) && !busy(err) {
						t.Errorf("shrink: %v", err)
					}
					return
				}
				n--
			}
			switch r.IntN(3) {
			case 0, 1:
				// A part: some of the places, with or without the seat. Asked again with
				// its key while the answer is unknown.
				opts := ConfirmOptions{IdempotencyKey: fmt.Sprint("k", buyer), Places: []Places{{AreaID: "FLOOR", Count: 1 + r.IntN(n)}}}
				if r.IntN(2) == 0 {
					opts.SeatIDs = []string{seat}
				}
				b, err := v.e.Confirm(t.Context(), h, opts)
				for try := 0; busy(err) && try < 20; try++ {
					b, err = v.e.Confirm(t.Context(), h, opts)
				}
				if err == nil {
					confirmed.Add(int64(b.Places[0].Count))
				} else if !errors.Is(err, ErrHoldLost) {
					t.Errorf("confirm: %v", err)
				}
			case 2:
				if err := v.e.Release(t.Context(), h); err != nil && !errors.Is(err, ErrHoldLost) && !busy(err) {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	sold := v.areaSold("s1", "FLOOR")
	if sold > 60 || int64(sold) != confirmed.Load() {
		t.Fatalf("FLOOR sold %d (capacity 60), confirmed %d", sold, confirmed.Load())
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
	// Every hold has ended by now (their TTL): every place not sold comes back.
	for _, s := range seats {
		v.waitExpired(Hold{ShowID: "s1", SeatIDs: []string{s.ID}})
	}
	time.Sleep(250 * time.Millisecond)
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
