package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// createdOf is the creation ms in a seat's hold value.
func (v *env) createdOf(show, seat string) string {
	v.t.Helper()
	parts := strings.Split(v.holdValue(show, seat), ":")
	if len(parts) < 3 {
		v.t.Fatalf("hold value of %s: %q", seat, v.holdValue(show, seat))
	}
	return parts[2]
}

// TestKeyedHoldRetryAfterReleaseBesideASameMsHold: once the key's hold is gone
// (released) the key is free and the same request makes a new hold, even when another
// live hold of the holder was created in the same ms (two tabs at once): only a hold on
// the key's own seats under fresh tokens is the key's hold moved by Reclaim.
func TestKeyedHoldRetryAfterReleaseBesideASameMsHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "K1", "O1")
	keyedReq := HoldRequest{ShowID: "s1", SeatIDs: []string{"K1"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k1"}
	kh, err := v.e.Hold(ctx, keyedReq)
	if err != nil {
		t.Fatal(err)
	}
	v.hold("s1", time.Minute, "alice", "O1")
	// The other hold as if made in the same ms: its value's creation time set to the
	// keyed hold's (the value is "<token>:<gen>:<created>:<tag>"), its expiry kept.
	parts := strings.Split(v.holdValue("s1", "O1"), ":")
	parts[2] = v.createdOf("s1", "K1")
	if err := v.rdb.SetArgs(ctx, newKeys(v.cfg.KeyPrefix, "s1").hold("O1"), strings.Join(parts, ":"), redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Release(ctx, kh); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, keyedReq)
	if err != nil {
		t.Fatalf("the keyed hold released beside a same-ms hold, its retry: %v; want a new hold (the key is free)", err)
	}
	if again.Token == kh.Token {
		t.Fatal("the retry answered the released hold")
	}
}

// TestKeyedPlaceHoldReplayIsTheFirstAnswer: a retry under the key while the hold
// lives, nothing changed in between, answers the first call's hold — its Places in area
// order too, for areas whose ids sort otherwise than their place keys ("A" < "A-1", but
// "A-1~" < "A~").
func TestKeyedPlaceHoldReplayIsTheFirstAnswer(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	err := v.e.CreateShowVenue(ctx, "v1", Venue{
		Seats: []Seat{{ID: "S1", Position: 1}},
		Areas: []Area{{ID: "A", Capacity: 10}, {ID: "A-1", Capacity: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	req := HoldRequest{ShowID: "v1", TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k",
		Places: []Places{{AreaID: "A", Count: 2}, {AreaID: "A-1", Count: 3}}}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first.Places, again.Places) || !slices.Equal(first.SeatIDs, again.SeatIDs) {
		t.Fatalf("first answer places %v seats %v, the replay places %v seats %v", first.Places, first.SeatIDs, again.Places, again.SeatIDs)
	}
}

// TestKeyedReplayOfShrunkHoldConfirms: a seats-and-places hold shrunk in both; the
// replay is a hold Confirm accepts, booking what the hold holds now.
func TestKeyedReplayOfShrunkHoldConfirms(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.areaVenue("v1", 10)
	req := HoldRequest{ShowID: "v1", SeatIDs: []string{"A1", "A2"}, TTL: time.Minute, HolderID: "alice",
		Places: []Places{{AreaID: "FLOOR", Count: 5}}, IdempotencyKey: "k1"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := v.e.Shrink(ctx, first, []string{"A2"}, []Places{{AreaID: "FLOOR", Count: 2}})
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.SeatIDs, kept.SeatIDs) || !slices.Equal(again.Places, kept.Places) || again.Generation != kept.Generation {
		t.Fatalf("replay %+v, the shrunk hold %+v", again, kept)
	}
	b, err := v.e.Confirm(ctx, again, ConfirmOptions{})
	if err != nil {
		t.Fatalf("confirming the replayed hold: %v", err)
	}
	if !slices.Equal(b.SeatIDs, []string{"A2"}) || v.areaSold("v1", "FLOOR") != 2 {
		t.Fatalf("booked %v, FLOOR sold %d", b.SeatIDs, v.areaSold("v1", "FLOOR"))
	}
	// The key's hold is gone (confirmed): the key is free.
	if _, err := v.e.Hold(ctx, req); err == nil || errors.Is(err, ErrHoldLost) {
		t.Logf("after the confirmation the retry: %v", err)
	}
}

// TestKeyedReplayWhileReservedAnswersTheHoldsExpiry: a batch has reserved the key's
// hold (its value carries "|commit"; reserve.lua lengthened its keys to the
// reservation's life). A retry under the key answers the hold with its own ExpiresAt
// (what it reverts to if the batch gives it back), not the reservation's end.
func TestKeyedReplayWhileReservedAnswersTheHoldsExpiry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1")
	req := HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, TTL: time.Second, HolderID: "alice", IdempotencyKey: "k"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	v.reserveAs(first, uuid.New())
	again, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatalf("retry while reserved: %v", err)
	}
	if again.Token != first.Token {
		t.Fatalf("retry while reserved made another hold %+v", again)
	}
	if !again.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("retry while reserved: ExpiresAt %v, the hold's own %v (reservation end %v)",
			again.ExpiresAt, first.ExpiresAt, time.UnixMilli(v.reserveEnd("s1", "A1")))
	}
}

// TestKeyedHoldRetryWhenTheHolderZsetLostItsEntry: the holder's zset (a secondary
// index) lost the hold's entry while the hold key lives: the retry finds the hold by its
// recorded seats, and is not refused by its own hold.
func TestKeyedHoldRetryWhenTheHolderZsetLostItsEntry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1")
	req := HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "alice", IdempotencyKey: "k"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.rdb.Del(ctx, newKeys(v.cfg.KeyPrefix, "s1").holder(holderTag("alice"))).Err(); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil || again.Token != first.Token {
		t.Fatalf("retry with the holder's zset gone, hold %s alive: %+v, %v", first.Token, again, err)
	}
}

// TestKeyedCancelSeatsRetriedAfterATransferGetsTheFirstAnswer: Alice's partial cancel,
// its reply lost, then an operator's TransferBooking to Bob; Alice's retry under her key
// gets her first answer (a holder's keys on a booking are the holder side's, whoever
// holds it; the operator's are apart).
func TestKeyedCancelSeatsRetriedAfterATransferGetsTheFirstAnswer(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "A3")
	b, err := v.e.Confirm(ctx, v.hold("s1", time.Minute, "alice", "A1", "A2", "A3"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := v.e.CancelSeats(keyed(ctx, "k"), b.ID, []string{"A1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.TransferBooking(ctx, b.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.CancelSeats(keyed(ctx, "k"), b.ID, []string{"A1"}, nil)
	if err != nil || again.HolderID != first.HolderID || !slices.Equal(again.SeatIDs, first.SeatIDs) {
		t.Fatalf("Alice's retry after the transfer: %+v, %v; the first answer %+v", again, err, first)
	}
}
