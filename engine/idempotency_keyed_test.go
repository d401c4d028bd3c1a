package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestKeyedBestRetryAfterShrinkMakesNoSecondHold: DESIGN says a hold's key answers
// with its hold while the hold lives. A best-available hold shrunk by giving back its
// first seat lives on; a retry of its request under its key must get that hold again,
// not a second hold of other seats.
func TestKeyedBestRetryAfterShrinkMakesNoSecondHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	// Keep one seat of three, each in turn (whichever seat the script chose first is
	// given back in two of the three).
	for j := range 3 {
		show := fmt.Sprintf("b%d", j)
		if err := v.e.CreateShowLayout(ctx, show, venueLayout(1, 2, 6)); err != nil {
			t.Fatal(err)
		}
		req := BestRequest{ShowID: show, Count: 3, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}
		first, err := v.e.HoldBest(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := v.e.Shrink(ctx, first, first.SeatIDs[j:j+1], nil)
		if err != nil {
			t.Fatal(err)
		}
		counter := v.counter(show)
		again, err := v.e.HoldBest(ctx, req)
		if err != nil {
			t.Errorf("keeping %v: the retry while the shrunk hold lives: %v", kept.SeatIDs, err)
			continue
		}
		if again.Token != kept.Token || v.counter(show) != counter {
			t.Errorf("the retry while the shrunk hold (%v, token %s) lives made a new hold: %v, token %s, counter %d -> %d",
				kept.SeatIDs, kept.Token, again.SeatIDs, again.Token, counter, v.counter(show))
		}
	}
}

// TestKeyedPlaceHoldRetryAfterShrinkMakesNoSecondHold: as above for a hold of
// places only: a shrink that keeps part of its places renames its place key, and the
// retry under the key must not make a second hold of places.
func TestKeyedPlaceHoldRetryAfterShrinkMakesNoSecondHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.areaVenue("v1", 10)
	req := HoldRequest{ShowID: "v1", TTL: time.Minute, HolderID: "alice", Places: []Places{{AreaID: "FLOOR", Count: 4}}, IdempotencyKey: "k1"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := v.e.Shrink(ctx, first, nil, []Places{{AreaID: "FLOOR", Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	counter := v.counter("v1")
	again, err := v.e.Hold(ctx, req)
	_, held, _ := v.areaState("v1", "FLOOR")
	if err != nil || again.Token != kept.Token || v.counter("v1") != counter || held != 2 {
		t.Fatalf("the retry while the shrunk hold (token %s) lives: %+v, %v; counter %d -> %d, FLOOR held %d (want 2)",
			kept.Token, again, err, counter, v.counter("v1"), held)
	}
}

// TestKeyedHoldRetryAfterShrinkGetsItsHold: a named hold shrunk by giving back its
// first seat (in sorted order) lives on; a retry of its request under its key must get
// it again, not ErrSeatUnavailable.
func TestKeyedHoldRetryAfterShrinkGetsItsHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "A3")
	req := HoldRequest{ShowID: "s1", SeatIDs: []string{"A1", "A2"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := v.e.Shrink(ctx, first, []string{"A2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil || again.Token != kept.Token {
		t.Fatalf("the retry while the shrunk hold (%v, token %s) lives: %+v, %v", kept.SeatIDs, kept.Token, again, err)
	}
	if !slices.Equal(again.SeatIDs, kept.SeatIDs) {
		t.Logf("the retry answers seats %v, the hold has %v", again.SeatIDs, kept.SeatIDs)
	}
}

// TestCancelSeatsOfTheWholeBookingRetried: a partial cancellation that names the
// whole booking is a cancellation; retried under its key it gets the first answer and
// changes nothing; another request under the key is refused.
func TestCancelSeatsOfTheWholeBookingRetried(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2")
	b, err := v.e.Confirm(ctx, v.hold("s1", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := retried(v, "cancel seats of the whole booking", func() (Booking, error) {
		return v.e.CancelSeats(keyed(ctx, "k"), b.ID, []string{"A2", "A1"}, nil)
	})
	if got.Status != BookingCancelled {
		t.Fatalf("%+v, want cancelled", got)
	}
	if err := v.e.Cancel(keyed(ctx, "k"), b.ID); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("a cancel under the key of a partial one: %v, want ErrIdempotencyKeyReused", err)
	}
	if n := v.count("SELECT count(*) FROM booking_events WHERE kind = 'cancelled'"); n != 1 {
		t.Fatalf("%d cancelled events", n)
	}
}

// TestBookingKeyRetriesRace: many retries of one keyed partial cancellation at
// once make one: one event, every caller the same answer.
func TestBookingKeyRetriesRace(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "A3")
	b, err := v.e.Confirm(ctx, v.hold("s1", time.Minute, "alice", "A1", "A2", "A3"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	answers := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := v.e.CancelSeats(keyed(ctx, "race"), b.ID, []string{"A1"}, nil)
			got.Replayed = false
			answers <- fmt.Sprintf("%+v %v", got, err)
		}()
	}
	wg.Wait()
	close(answers)
	seen := map[string]int{}
	for a := range answers {
		seen[a]++
	}
	if len(seen) != 1 || v.count("SELECT count(*) FROM booking_events WHERE kind = $1", EventSeatsCancelled) != 1 {
		t.Fatalf("answers %v; %d events", seen, v.count("SELECT count(*) FROM booking_events WHERE kind = $1", EventSeatsCancelled))
	}
}

// TestKeyedRetriesRaceOnHolds: concurrent retries of keyed best, extend and
// transfer: one effect each, one answer each.
func TestKeyedRetriesRaceOnHolds(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	if err := v.e.CreateShowLayout(ctx, "b", venueLayout(1, 2, 6)); err != nil {
		t.Fatal(err)
	}
	race := func(what string, write func() (Hold, error)) Hold {
		const n = 16
		var wg sync.WaitGroup
		hs := make([]Hold, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); hs[i], errs[i] = write() }()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || hs[i].Token != hs[0].Token || hs[i].Generation != hs[0].Generation || !slices.Equal(hs[i].SeatIDs, hs[0].SeatIDs) {
				t.Fatalf("%s: retry %d: %+v %v; the first: %+v", what, i, hs[i], errs[i], hs[0])
			}
		}
		return hs[0]
	}
	h := race("best", func() (Hold, error) {
		return v.e.HoldBest(ctx, BestRequest{ShowID: "b", Count: 2, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k"})
	})
	feed := v.rdb.Get(ctx, newKeys(v.cfg.KeyPrefix, "b").base+"feed:n").Val()
	if v.counter("b") != 1 || feed != "1" {
		t.Fatalf("counter %d, feed:n %s after one keyed best raced", v.counter("b"), feed)
	}
	race("extend", func() (Hold, error) { return v.e.Extend(keyed(ctx, "k2"), h, 2*time.Minute) })
	race("transfer", func() (Hold, error) { return v.e.Transfer(keyed(ctx, "k3"), h, "bob") })
	if v.counter("b") != 2 {
		t.Fatalf("counter %d after a transfer raced", v.counter("b"))
	}
}

// TestKeyedBestRetryAfterReclaim: the holder reclaims its holds (fresh tokens, the same
// seats, the holder's own); a retry of the keyed best request then makes no second hold
// for the same holder: it is ErrHoldLost (the key's hold lives under other tokens).
func TestKeyedBestRetryAfterReclaim(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	if err := v.e.CreateShowLayout(ctx, "b", venueLayout(1, 2, 6)); err != nil {
		t.Fatal(err)
	}
	req := BestRequest{ShowID: "b", Count: 2, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}
	first, err := v.e.HoldBest(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Reclaim(ctx, "b", "alice"); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.HoldBest(ctx, req)
	if !errors.Is(err, ErrHoldLost) {
		t.Fatalf("the retry after a reclaim: %+v, %v; want ErrHoldLost, not a second hold besides %v", again, err, first.SeatIDs)
	}
}

// TestKeyedHoldReplayAfterShrinkKeepingTheFirstSeat: the replay's hold must be
// one the holder can present (Extend).
func TestKeyedHoldReplayAfterShrinkKeepingTheFirstSeat(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "A3")
	req := HoldRequest{ShowID: "s1", SeatIDs: []string{"A1", "A2"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Shrink(ctx, first, []string{"A1"}, nil); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Extend(ctx, again, 2*time.Minute); err != nil {
		t.Fatalf("the replayed hold %v (the hold has A1 only) extended: %v", again.SeatIDs, err)
	}
}

// TestKeyedHoldReplayKeepsItsExpiry: a retry under the key answers the first
// call's expiry (nothing extended the hold in between), to the millisecond.
func TestKeyedHoldReplayKeepsItsExpiry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	seats := make([]string, 200)
	for i := range seats {
		seats[i] = fmt.Sprintf("S%d", i)
	}
	v.show("s1", seats...)
	off := 0
	for i, s := range seats {
		req := HoldRequest{ShowID: "s1", SeatIDs: []string{s}, TTL: time.Minute, HolderID: fmt.Sprint("h", i), IdempotencyKey: fmt.Sprint("k", i)}
		first, err := v.e.Hold(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := v.e.Hold(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !again.ExpiresAt.Equal(first.ExpiresAt) {
			off++
			if off == 1 {
				t.Errorf("hold %d: the retry answers expiry %v, the first call %v", i, again.ExpiresAt, first.ExpiresAt)
			}
		}
	}
	if off > 0 {
		t.Errorf("%d of %d retries answered another expiry", off, len(seats))
	}
}

// TestKeyedHoldAfterRedisLostTheShow: Redis lost the show (hold and record
// together): the retry rebuilds and makes one hold, the seats' only one.
func TestKeyedHoldAfterRedisLostTheShow(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2")
	req := HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k"}
	if _, err := v.e.Hold(ctx, req); err != nil {
		t.Fatal(err)
	}
	v.loseShow("s1")
	h, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil || again.Token != h.Token {
		t.Fatalf("after the rebuild: %+v then %+v, %v", h, again, err)
	}
}
