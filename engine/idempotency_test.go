package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

// retried makes a write twice under one key, as a client does whose first reply was
// lost: it returns the second answer, and fails the test when the two answers differ
// or the second call changed Redis or PostgreSQL.
func retried[T any](v *env, what string, write func() (T, error)) T {
	v.t.Helper()
	first, err := write()
	if err != nil {
		v.t.Fatalf("%s: %v", what, err)
	}
	redisAfter, dbAfter := v.redisSnapshot(), v.dbSnapshot()
	again, err := write()
	if err != nil {
		v.t.Fatalf("%s retried under its key: %v", what, err)
	}
	if fmt.Sprintf("%+v", unreplayed(first)) != fmt.Sprintf("%+v", unreplayed(again)) {
		v.t.Fatalf("%s retried answers\n%+v\nthe first call answered\n%+v", what, again, first)
	}
	if r, d := v.redisSnapshot(), v.dbSnapshot(); r != redisAfter || d != dbAfter {
		v.t.Fatalf("%s retried under its key changed Redis (%v) or PostgreSQL (%v)", what, r != redisAfter, d != dbAfter)
	}
	return again
}

// unreplayed is an answer without the mark of a replay, for comparing.
func unreplayed(x any) any {
	if b, ok := x.(Booking); ok {
		b.Replayed = false
		return b
	}
	return x
}

// keyed is ctx carrying key as the idempotency key.
func keyed(ctx context.Context, key string) context.Context { return WithIdempotencyKey(ctx, key) }

// TestEveryWriteRetriedUnderItsKeyTakesEffectOnce: each write made again under its
// idempotency key, as after a lost reply, gets the first call's answer (the same hold and
// token, the same booking) and changes nothing more in Redis or PostgreSQL; the same
// key with another request is ErrIdempotencyKeyReused and changes nothing.
func TestEveryWriteRetriedUnderItsKeyTakesEffectOnce(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "A3", "A4", "B1", "B2")

	h := retried(v, "hold", func() (Hold, error) {
		return v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"A1", "A2", "A3"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k-hold"})
	})
	if v.counter("s1") != 1 {
		t.Fatalf("the show's counter is %d after one hold retried, want 1", v.counter("s1"))
	}
	h = retried(v, "extend", func() (Hold, error) { return v.e.Extend(keyed(ctx, "k-extend"), h, 2*time.Minute) })
	h = retried(v, "shrink", func() (Hold, error) { return v.e.Shrink(keyed(ctx, "k-shrink"), h, []string{"A1", "A2"}, nil) })
	h = retried(v, "transfer", func() (Hold, error) { return v.e.Transfer(keyed(ctx, "k-transfer"), h, "bob") })
	if h.HolderID != "bob" || v.counter("s1") != 2 {
		t.Fatalf("transferred %+v, counter %d: want bob's hold and one more generation", h, v.counter("s1"))
	}
	b := retried(v, "confirm", func() (Booking, error) { return v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k-confirm"}) })
	b = retried(v, "transfer booking", func() (Booking, error) { return v.e.TransferBooking(keyed(ctx, "k-move"), b.ID, "carol") })
	b = retried(v, "cancel seats", func() (Booking, error) { return v.e.CancelSeats(keyed(ctx, "k-part"), b.ID, []string{"A2"}, nil) })
	if b.HolderID != "carol" || !slices.Equal(b.SeatIDs, []string{"A1"}) {
		t.Fatalf("booking %+v, want carol's with A1 left", b)
	}
	retried(v, "cancel", func() (struct{}, error) { return struct{}{}, v.e.Cancel(keyed(ctx, "k-cancel"), b.ID) })
	for kind, want := range map[string]int{"confirmed": 1, "transferred": 1, EventSeatsCancelled: 1, "cancelled": 1} {
		if n := v.count("SELECT count(*) FROM booking_events WHERE kind = $1", kind); n != want {
			t.Errorf("%d %s events, want %d", n, kind, want)
		}
	}

	r := v.hold("s1", time.Minute, "dave", "B1")
	retried(v, "release", func() (struct{}, error) { return struct{}{}, v.e.Release(keyed(ctx, "k-release"), r) })
	if err := v.e.Release(ctx, r); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("a release retried without its key: %v, want ErrHoldLost", err)
	}

	// Another request under a key that answered one: refused, nothing changed.
	g, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"B1"}, TTL: time.Minute, HolderID: "dave", IdempotencyKey: "k-g"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Extend(keyed(ctx, "k-g"), g, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	before, beforeDB := v.redisSnapshot(), v.dbSnapshot()
	reused := map[string]error{}
	_, reused["hold"] = v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"B2"}, TTL: time.Minute, HolderID: "dave", IdempotencyKey: "k-g"})
	_, reused["extend"] = v.e.Extend(keyed(ctx, "k-g"), g, 3*time.Minute)
	reused["release"] = v.e.Release(keyed(ctx, "k-g"), g)
	reused["cancel"] = v.e.Cancel(keyed(ctx, "k-part"), b.ID)
	_, reused["cancel seats"] = v.e.CancelSeats(keyed(ctx, "k-cancel"), b.ID, []string{"A1"}, nil)
	_, reused["transfer booking"] = v.e.TransferBooking(keyed(ctx, "k-move"), b.ID, "erin")
	for what, err := range reused {
		if !errors.Is(err, ErrIdempotencyKeyReused) {
			t.Errorf("%s under a key of another request: %v, want ErrIdempotencyKeyReused", what, err)
		}
	}
	if r, d := v.redisSnapshot(), v.dbSnapshot(); r != before || d != beforeDB {
		t.Fatalf("refused requests changed Redis (%v) or PostgreSQL (%v)", r != before, d != beforeDB)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"A4"}, IdempotencyKey: "k"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a keyed hold without a holder: %v, want ErrInvalidArgument (the key is scoped to the holder)", err)
	}
}

// TestHoldKeyLivesWithItsHold: a hold's key answers with its hold while the hold lives
// (HoldBest: the seats the first call chose), is another holder's to use for their own
// requests, and is free again once the hold is gone.
func TestHoldKeyLivesWithItsHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	if err := v.e.CreateShowLayout(ctx, "b", venueLayout(1, 2, 6)); err != nil {
		t.Fatal(err)
	}
	req := BestRequest{ShowID: "b", Count: 2, Adjacent: true, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}
	first := retried(v, "best", func() (Hold, error) { return v.e.HoldBest(ctx, req) })
	if _, err := v.e.HoldBest(ctx, BestRequest{ShowID: "b", Count: 3, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("another best request under the key: %v, want ErrIdempotencyKeyReused", err)
	}
	bobs := req
	bobs.HolderID = "bob"
	other, err := v.e.HoldBest(ctx, bobs)
	if err != nil || other.Token == first.Token || slices.Equal(other.SeatIDs, first.SeatIDs) {
		t.Fatalf("bob under alice's key: %+v, %v; want bob's own hold", other, err)
	}
	if err := v.e.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.HoldBest(ctx, req)
	if err != nil || again.Token == first.Token || again.Generation <= other.Generation {
		t.Fatalf("the key's request once its hold was released: %+v, %v; want a new hold", again, err)
	}
	booking, err := v.e.Confirm(ctx, again, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := v.e.HoldBest(ctx, req); err != nil || h.Token == again.Token || booking.ID == uuid.Nil {
		t.Fatalf("the key's request once its hold was booked: %+v, %v; want a new hold", h, err)
	}
}

// TestKeyedHoldRetriesRaceToOneHold: many retries of one keyed hold at once (a client
// that retried too soon) make one hold: every caller gets its token, and the show's
// counter moved once.
func TestKeyedHoldRetriesRaceToOneHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	const n = 32
	tokens := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A1", "A2"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "race"})
			tokens <- h.Token
			errs <- err
		}()
	}
	seen := map[string]int{}
	for range n {
		seen[<-tokens]++
		if err := <-errs; err != nil {
			t.Errorf("a retry: %v", err)
		}
	}
	if len(seen) != 1 || v.counter("s1") != 1 {
		t.Fatalf("%d tokens among %d retries, counter %d: want one hold", len(seen), n, v.counter("s1"))
	}
}
