package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTransferRefusesTheOldToken: a hold transferred keeps its seats and expiry under
// the new holder, a new token and a larger generation; every call with the old hold is
// ErrHoldLost and changes nothing; the new holder's reclaim finds it and the old
// holder's does not; the new hold books, as the new holder's.
func TestTransferRefusesTheOldToken(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "B1")
	old := v.hold("s1", time.Minute, "alice", "A1", "A2")
	bobs := v.hold("s1", time.Minute, "bob", "B1")

	h, err := v.e.Transfer(ctx, old, "bob")
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if fmt.Sprint(h.SeatIDs) != "[A1 A2]" || h.Token == old.Token || h.Generation <= bobs.Generation || h.HolderID != "bob" ||
		h.ExpiresAt.Sub(old.ExpiresAt).Abs() > 5*time.Millisecond {
		t.Fatalf("transferred %+v from %+v", h, old)
	}
	before := v.redisSnapshot()
	if _, err := v.e.Extend(ctx, old, 2*time.Minute); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("extend with the old hold: %v, want ErrHoldLost", err)
	}
	if err := v.e.Release(ctx, old); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("release with the old hold: %v, want ErrHoldLost", err)
	}
	if _, err := v.e.Transfer(ctx, old, "carol"); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("transfer with the old hold: %v, want ErrHoldLost", err)
	}
	if _, err := v.e.Confirm(ctx, old, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm with the old hold: %v, want ErrHoldLost", err)
	}
	if after := v.redisSnapshot(); after != before {
		t.Fatalf("the old hold's calls changed Redis:\n%s\n%s", before, after)
	}
	if hs, err := v.e.Reclaim(ctx, "s1", "alice"); err != nil || len(hs) != 0 {
		t.Fatalf("alice reclaims %+v, %v; want nothing", hs, err)
	}
	hs, err := v.e.Reclaim(ctx, "s1", "bob")
	if err != nil || len(hs) != 2 || fmt.Sprint(hs[0].SeatIDs) != "[A1 A2]" {
		t.Fatalf("bob reclaims %+v, %v; want A1 A2 and B1", hs, err)
	}
	b, err := v.e.Confirm(ctx, hs[0], ConfirmOptions{})
	if err != nil || b.HolderID != "bob" {
		t.Fatalf("confirm the transferred hold: %+v, %v", b, err)
	}
	for _, to := range []string{"", "bob", "x\x00y"} {
		if _, err := v.e.Transfer(ctx, hs[1], to); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("transfer to %q: %v, want ErrInvalidArgument", to, err)
		}
	}
}

// TestTransferFencesTheOldHolder: the old holder's confirmation pauses after its first
// Redis check; meanwhile the hold is transferred and the new holder books it. The old
// confirmation is refused — by Redis when Redis kept the transfer, and by the fence
// when Redis lost the transfer and the sale (the old hold is back in Redis as it was):
// one booking, the new holder's.
func TestTransferFencesTheOldHolder(t *testing.T) {
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
				h, err := other.Transfer(ctx, old, "bob")
				if err != nil {
					t.Errorf("transfer: %v", err)
					return
				}
				if newer, err = other.Confirm(ctx, h, ConfirmOptions{}); err != nil {
					t.Errorf("new holder's confirm: %v", err)
				}
				if redisLost {
					v.rdb.Set(ctx, newKeys(v.cfg.KeyPrefix, "s1").hold("A1"), oldValue, time.Minute)
					v.rdb.HDel(ctx, v.soldKey("s1", "A1"), "A1")
				}
			}
			_, err := v.e.Confirm(t.Context(), old, ConfirmOptions{})
			if want := map[bool]error{false: ErrHoldLost, true: ErrSeatsUnavailable}[redisLost]; !errors.Is(err, want) {
				t.Fatalf("old holder: %v, want %v", err, want)
			}
			if n := v.bookings("s1"); n != 1 {
				t.Fatalf("%d bookings, want 1", n)
			}
			if c := v.claims("s1"); c["A1"] != newer.ID.String() || newer.HolderID != "bob" {
				t.Fatalf("claim %v, want bob's booking %+v", c, newer)
			}
			if fenced := testutil.ToFloat64(v.e.m.fenceRefusals); redisLost && fenced < 1 {
				t.Fatalf("the fence refused %v times, want it to refuse the old generation", fenced)
			}
		})
	}
}

// TestTransferOverTheLimitChangesNothing: a transfer the new holder's cap, the sale's
// holder limit (held and booked) or the waiting room refuses is a typed error and
// changes nothing in Redis; the hold still works for its owner.
func TestTransferOverTheLimitChangesNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 3 })
	ctx := t.Context()
	v.show("cap", seatNames(6)...)
	v.hold("cap", time.Minute, "bob", "S000", "S001")
	pair := v.hold("cap", time.Minute, "alice", "S002", "S003")
	// The waiting room's clock (q:st's "at") moves by itself: the engine ticks the room
	// while a refused holder waits.
	roomClock := regexp.MustCompile(`([\[ ])at:\d+`)
	snapshot := func() string { return roomClock.ReplaceAllString(v.redisSnapshot(), "${1}at:-") }
	refused := func(h Hold, to string, want error) {
		t.Helper()
		before := snapshot()
		if _, err := v.e.Transfer(ctx, h, to); !errors.Is(err, want) {
			t.Fatalf("transfer to %s: %v, want %v", to, err, want)
		}
		if after := snapshot(); after != before {
			t.Fatalf("a refused transfer changed Redis:\n%s\n%s", before, after)
		}
	}
	refused(pair, "bob", ErrHolderLimit)

	v.show("lim", seatNames(6)...)
	v.setRules("lim", SaleRules{HolderLimit: 3})
	mine := v.hold("lim", time.Minute, "bob", "S000", "S001")
	if _, err := v.e.Confirm(ctx, mine, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	one := v.hold("lim", time.Minute, "alice", "S002")
	two := v.hold("lim", time.Minute, "alice", "S003", "S004")
	refused(two, "bob", ErrHolderLimit) // 2 booked + 2 > 3
	if _, err := v.e.Transfer(ctx, one, "bob"); err != nil {
		t.Fatalf("a transfer within the limit: %v", err)
	}

	v.show("wr", seatNames(4)...)
	v.setRules("wr", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("wr", "ann")
	anns := v.hold("wr", time.Minute, "ann", "S000")
	refused(anns, "bot", ErrNotAdmitted)
	v.admitted("wr", "eve")
	if _, err := v.e.Transfer(ctx, anns, "eve"); err != nil {
		t.Fatalf("a transfer to an admitted holder: %v", err)
	}

	if _, err := v.e.Extend(ctx, pair, 2*time.Minute); err != nil {
		t.Fatalf("the hold after the refused transfer: %v", err)
	}
}

// TestTransferPlaces: a hold of a seat and places moves with its places: the area
// holds as many as before, the new hold's place keys are its own (the old ones are
// gone), the new holder's cap counts them, and the new hold books them.
func TestTransferPlaces(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 4 })
	ctx := t.Context()
	v.areaVenue("v1", 10)
	old, err := v.holdPlaces("v1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "bob", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Transfer(ctx, old, "bob"); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("4 more for bob, who holds 1 of 4: %v, want ErrHolderLimit", err)
	}
	h, err := v.e.Transfer(ctx, old, "carol")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(h.SeatIDs, h.Places) != "[A1] [{FLOOR 3}]" {
		t.Fatalf("transferred %+v", h)
	}
	if _, held, _ := v.areaState("v1", "FLOOR"); held != 4 {
		t.Fatalf("FLOOR holds %d, want 4", held)
	}
	if v.holdValue("v1", placeKey("FLOOR", 3, old.Token)) != "" || v.holdValue("v1", placeKey("FLOOR", 3, h.Token)) == "" {
		t.Fatalf("the place key did not move to the new token's")
	}
	b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
	if err != nil || b.HolderID != "carol" || fmt.Sprint(b.Places) != "[{FLOOR 3}]" {
		t.Fatalf("confirm: %+v, %v", b, err)
	}
	if sold := v.areaSold("v1", "FLOOR"); sold != 3 {
		t.Fatalf("FLOOR sold %d, want 3", sold)
	}
}

// TestConcurrentTransferConfirmReclaimBookOnce: holds pass from holder to holder while
// their holders confirm, reclaim and transfer them with whatever hold they last saw,
// and some expire meanwhile. No seat is booked twice, and every hold ends booked once,
// live under exactly one token, or expired.
func TestConcurrentTransferConfirmReclaimBookOnce(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 64 })
	ctx := t.Context()
	seats := seatNames(24)
	v.show("s1", seats...)
	holders := []string{"ann", "bob", "cat", "dan"}
	var holds []Hold
	for i := 0; i < len(seats); i += 2 {
		ttl := time.Minute
		if i%6 == 0 {
			ttl = time.Second // these may expire while the others race
		}
		holds = append(holds, v.hold("s1", ttl, holders[i/2%len(holders)], seats[i], seats[i+1]))
	}
	refusal := func(err error) bool {
		return err == nil || errors.Is(err, ErrHoldLost) || errors.Is(err, ErrStaleGeneration) || errors.Is(err, ErrSeatsUnavailable)
	}
	var wg sync.WaitGroup
	for i, h := range holds {
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				cur := h
				for round := 0; round < 4; round++ {
					switch (g + round) % 4 {
					case 0, 1:
						next, err := v.e.Transfer(ctx, cur, holders[(i+g+round+1)%len(holders)])
						if !refusal(err) {
							t.Errorf("transfer: %v", err)
						}
						if err == nil {
							cur = next
						}
					case 2:
						if hs, err := v.e.Reclaim(ctx, "s1", cur.HolderID); err != nil {
							t.Errorf("reclaim: %v", err)
						} else {
							for _, r := range hs {
								if r.SeatIDs[0] == cur.SeatIDs[0] {
									cur = r
								}
							}
						}
					case 3:
						if _, err := v.e.Confirm(ctx, cur, ConfirmOptions{}); !refusal(err) {
							t.Errorf("confirm: %v", err)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
	live := 0
	for _, who := range holders {
		hs, err := v.e.Reclaim(ctx, "s1", who)
		if err != nil {
			t.Fatal(err)
		}
		live += len(hs)
	}
	if booked := v.bookings("s1"); booked+live > len(holds) {
		t.Fatalf("%d bookings and %d live holds, more than the %d holds", booked, live, len(holds))
	}
	// Every hold is in one state: booked whole by one booking, live under one token, or
	// gone from both seats.
	claims := v.claims("s1")
	for _, h := range holds {
		a, b := h.SeatIDs[0], h.SeatIDs[1]
		if claims[a] != claims[b] {
			t.Fatalf("%s booked by %q, %s by %q", a, claims[a], b, claims[b])
		}
		if claims[a] == "" && v.holdValue("s1", a) != v.holdValue("s1", b) {
			t.Fatalf("%s held as %q, %s as %q", a, v.holdValue("s1", a), b, v.holdValue("s1", b))
		}
	}
}

// TestTransferBookingMovesCountsAndLeavesAnEvent: an operator moves a confirmed booking
// to another holder: the booking and the feed's transferred event name the new holder,
// both holders' booked seats move in PostgreSQL and in Redis (their next holds count
// them), and a move past the new holder's limit is ErrHolderLimit with nothing changed.
// A cancelled or unknown booking, or no new holder, is refused.
func TestTransferBookingMovesCountsAndLeavesAnEvent(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", seatNames(10)...)
	v.setRules("s1", SaleRules{HolderLimit: 3})
	book := func(holder string, seats ...string) Booking {
		t.Helper()
		b, err := v.e.Confirm(ctx, v.hold("s1", time.Minute, holder, seats...), ConfirmOptions{IdempotencyKey: "k1"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	alices := book("alice", "S000", "S001")
	book("bob", "S002", "S003")
	_, cursor := waitEvents(t, v.e, "", 2)

	redisBefore, dbBefore := v.redisSnapshot(), v.dbSnapshot()
	if _, err := v.e.TransferBooking(ctx, alices.ID, "bob"); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("2 more for bob, who booked 2 of 3: %v, want ErrHolderLimit", err)
	}
	if v.redisSnapshot() != redisBefore || v.dbSnapshot() != dbBefore {
		t.Fatalf("a refused transfer changed something")
	}

	b, err := v.e.TransferBooking(ctx, alices.ID, "carol")
	if err != nil {
		t.Fatal(err)
	}
	if b.HolderID != "carol" || b.ID != alices.ID || b.Status != BookingConfirmed || fmt.Sprint(b.SeatIDs) != "[S000 S001]" {
		t.Fatalf("transferred %+v", b)
	}
	if got, err := v.e.Booking(ctx, alices.ID); err != nil || got.HolderID != "carol" {
		t.Fatalf("the booking reads %+v, %v", got, err)
	}
	events, _ := waitEvents(t, v.e, cursor, 1)
	if len(events) != 1 || events[0].Kind != EventTransferred || events[0].Booking.HolderID != "carol" ||
		events[0].Booking.ID != alices.ID || events[0].Booking.Status != BookingConfirmed {
		t.Fatalf("feed after the transfer: %+v", events)
	}
	inRedis, inDB := v.holderCounts("s1")
	for _, h := range []string{"alice", "carol"} {
		if inRedis[holderTag(h)] != inDB[holderTag(h)] {
			t.Fatalf("%s's booked seats: Redis %q, the database %q", h, inRedis[holderTag(h)], inDB[holderTag(h)])
		}
	}
	if v.count("SELECT seats FROM holder_seats WHERE show_id = 's1' AND holder_id = 'carol'") != 2 ||
		v.count("SELECT seats FROM holder_seats WHERE show_id = 's1' AND holder_id = 'alice'") != 0 {
		t.Fatalf("holder_seats did not follow the booking")
	}
	// alice has her 3 again, carol 1 left: the holds count Redis's counts. The key of
	// alice's first booking went with it: her next booking may use it.
	again := v.hold("s1", time.Minute, "alice", "S004", "S005", "S006")
	if _, err := v.e.Confirm(ctx, again, ConfirmOptions{IdempotencyKey: "k1"}); err != nil {
		t.Fatalf("alice's booking under her first one's key: %v", err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"S007", "S008"}, HolderID: "carol"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("carol's third and fourth: %v, want ErrHolderLimit", err)
	}
	v.hold("s1", time.Minute, "carol", "S007")

	if err := v.e.Cancel(ctx, alices.ID); err != nil {
		t.Fatal(err)
	}
	if v.count("SELECT seats FROM holder_seats WHERE show_id = 's1' AND holder_id = 'carol'") != 0 {
		t.Fatalf("carol's seats did not come back with the cancellation")
	}
	for _, c := range []struct {
		id   uuid.UUID
		to   string
		want error
	}{{alices.ID, "dave", ErrInvalidArgument}, {uuid.New(), "dave", ErrNotFound}, {alices.ID, "", ErrInvalidArgument}} {
		if _, err := v.e.TransferBooking(ctx, c.id, c.to); !errors.Is(err, c.want) {
			t.Fatalf("transfer %s to %q: %v, want %v", c.id, c.to, err, c.want)
		}
	}
}

// TestCancelAsTheOldHolderAfterATransfer: a cancellation made on behalf of a holder
// (AsHolder) of a booking transferred away from them since they last read it, whole or in
// part, is ErrNotFound and changes nothing; made on behalf of the new holder, it cancels.
func TestCancelAsTheOldHolderAfterATransfer(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", seatNames(4)...)
	b := v.book("s1", "alice", "S000", "S001")
	if _, err := v.e.TransferBooking(ctx, b.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	alice, bob := AsHolder(ctx, "alice"), AsHolder(ctx, "bob")
	redisBefore, dbBefore := v.redisSnapshot(), v.dbSnapshot()
	if err := v.e.Cancel(alice, b.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("alice cancels bob's booking: %v, want ErrNotFound", err)
	}
	for _, seats := range [][]string{{"S000"}, {"S000", "S001"}} {
		if _, err := v.e.CancelSeats(alice, b.ID, seats, nil); !errors.Is(err, ErrNotFound) {
			t.Fatalf("alice cancels %v of bob's booking: %v, want ErrNotFound", seats, err)
		}
	}
	if v.redisSnapshot() != redisBefore || v.dbSnapshot() != dbBefore {
		t.Fatalf("a refused cancellation changed something")
	}
	after, err := v.e.CancelSeats(bob, b.ID, []string{"S000"}, nil)
	if err != nil || fmt.Sprint(after.SeatIDs) != "[S001]" || after.HolderID != "bob" {
		t.Fatalf("bob cancels S000: %+v, %v", after, err)
	}
	if err := v.e.Cancel(bob, b.ID); err != nil {
		t.Fatalf("bob cancels the rest: %v", err)
	}
}

// TestKeyedCancelSeatsRetriedAfterATransfer: alice cancels a seat of her booking on her
// own behalf (AsHolder) under an idempotency key, the answer is lost, an operator moves
// the booking to bob, and alice retries under the key: she gets the first answer, not
// ErrNotFound, and nothing more is cancelled.
func TestKeyedCancelSeatsRetriedAfterATransfer(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", seatNames(4)...)
	b := v.book("s1", "alice", "S000", "S001")
	alice := WithIdempotencyKey(AsHolder(ctx, "alice"), "k-cancel-1")
	first, err := v.e.CancelSeats(alice, b.ID, []string{"S000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.TransferBooking(ctx, b.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	again, err := v.e.CancelSeats(alice, b.ID, []string{"S000"}, nil)
	if err != nil || !again.Replayed || again.ID != first.ID || fmt.Sprint(again.SeatIDs) != "[S001]" {
		t.Fatalf("alice's retry under her key: %+v, %v; want the first answer replayed", again, err)
	}
	if now, err := v.e.Booking(ctx, b.ID); err != nil || now.HolderID != "bob" || fmt.Sprint(now.SeatIDs) != "[S001]" {
		t.Fatalf("bob's booking after alice's retry: %+v, %v", now, err)
	}
}

// TestConcurrentTransferBookingKeepsTheLimit: bookings are moved to one holder while
// that holder confirms holds of its own, from many goroutines: the holder's booked
// seats never pass the show's holder limit, and PostgreSQL's count is its bookings'.
func TestConcurrentTransferBookingKeepsTheLimit(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 64 })
	ctx := t.Context()
	seats := seatNames(40)
	v.show("s1", seats...)
	var given []Booking
	for i := 0; i < 20; i++ {
		b, err := v.e.Confirm(ctx, v.hold("s1", time.Minute, fmt.Sprintf("h%d", i), seats[i]), ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		given = append(given, b)
	}
	v.setRules("s1", SaleRules{HolderLimit: 6})
	var wg sync.WaitGroup
	for _, b := range given {
		wg.Go(func() {
			if _, err := v.e.TransferBooking(ctx, b.ID, "zoe"); err != nil && !errors.Is(err, ErrHolderLimit) {
				t.Errorf("transfer: %v", err)
			}
		})
	}
	for _, s := range seats[20:] {
		wg.Go(func() {
			h, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{s}, HolderID: "zoe", TTL: time.Minute})
			if errors.Is(err, ErrHolderLimit) {
				return
			}
			if err != nil {
				t.Errorf("hold: %v", err)
				return
			}
			if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil && !errors.Is(err, ErrHolderLimit) {
				t.Errorf("confirm: %v", err)
			}
		})
	}
	wg.Wait()
	booked := v.count(`SELECT count(*) FROM bookings b JOIN booking_seats s USING (show_id, booking_id)
		WHERE b.show_id = 's1' AND b.holder_id = 'zoe' AND b.status = 'confirmed'`)
	counted := v.count("SELECT seats FROM holder_seats WHERE show_id = 's1' AND holder_id = 'zoe'")
	if booked > 6 || booked != counted || booked == 0 {
		t.Fatalf("zoe booked %d seats, holder_seats says %d, the limit is 6", booked, counted)
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
}

// book confirms a hold of these seats for holder: one booking.
func (v *env) book(show, holder string, seats ...string) Booking {
	v.t.Helper()
	b, err := v.e.Confirm(v.t.Context(), v.hold(show, time.Minute, holder, seats...), ConfirmOptions{})
	if err != nil {
		v.t.Fatalf("confirm %v for %s: %v", seats, holder, err)
	}
	return b
}
