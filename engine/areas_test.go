package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// areaVenue creates a show with seats A1..A2 and the area FLOOR of capacity places.
func (v *env) areaVenue(id string, capacity int) {
	v.t.Helper()
	err := v.e.CreateShowVenue(v.t.Context(), id, Venue{
		Seats: []Seat{{ID: "A1", Position: 1}, {ID: "A2", Position: 2}},
		Areas: []Area{{ID: "FLOOR", Capacity: capacity}}})
	if err != nil {
		v.t.Fatalf("CreateShowVenue(%s): %v", id, err)
	}
}

// areaSold is an area's places sold as PostgreSQL says, checked two ways: the column the
// trigger keeps and the sum of the claimed rows.
func (v *env) areaSold(show, area string) int {
	v.t.Helper()
	col := v.count("SELECT sold FROM areas WHERE show_id = $1 AND area_id = $2", show, area)
	sum := v.count("SELECT COALESCE(sum(places), 0)::int FROM booking_places WHERE show_id = $1 AND area_id = $2 AND claimed", show, area)
	if col != sum {
		v.t.Fatalf("areas.sold %d, claimed places %d", col, sum)
	}
	return col
}

// areaState is Redis's count of an area: capacity, held, sold.
func (v *env) areaState(show, area string) (c, h, s int) {
	v.t.Helper()
	vals, err := v.rdb.HMGet(context.Background(), newKeys(v.cfg.KeyPrefix, show).base+"ar:"+area, "c", "h", "s").Result()
	if err != nil {
		v.t.Fatal(err)
	}
	n := func(x any) int {
		var i int
		if str, ok := x.(string); ok {
			fmt.Sscan(str, &i)
		}
		return i
	}
	return n(vals[0]), n(vals[1]), n(vals[2])
}

func (v *env) holdPlaces(show string, ttl time.Duration, holder string, count int, seats ...string) (Hold, error) {
	return v.e.Hold(v.t.Context(), HoldRequest{ShowID: show, SeatIDs: seats, TTL: ttl, HolderID: holder,
		Places: []Places{{AreaID: "FLOOR", Count: count}}})
}

// bookPlaces holds count places of FLOOR (and seats) of show for holder and confirms
// the hold, failing the test on an error.
func (v *env) bookPlaces(show, holder string, count int, seats ...string) Booking {
	v.t.Helper()
	h, err := v.holdPlaces(show, time.Minute, holder, count, seats...)
	if err != nil {
		v.t.Fatal(err)
	}
	b, err := v.e.Confirm(v.t.Context(), h, ConfirmOptions{})
	if err != nil {
		v.t.Fatal(err)
	}
	return b
}

// TestAreaHoldConfirmRelease: places are taken from the area's count with the seats,
// all or nothing, under one generation; a release gives them back at once; a
// confirmation books them (Booking.Places) and PostgreSQL's sold is what was confirmed.
func TestAreaHoldConfirmRelease(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("v1", 10)
	h, err := v.holdPlaces("v1", time.Minute, "alice", 6, "A1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Places) != 1 || h.Places[0].Count != 6 || len(h.SeatIDs) != 1 {
		t.Fatalf("hold %+v", h)
	}
	// 5 more do not fit: nothing is held, not even the free seat A2.
	if _, err := v.holdPlaces("v1", time.Minute, "bob", 5, "A2"); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold past the capacity: %v, want ErrSeatsUnavailable", err)
	} else if pe := (*PlacesUnavailableError)(nil); !errors.As(err, &pe) || pe.AreaIDs[0] != "FLOOR" || len(pe.Left) != 1 || pe.Left[0] != 4 {
		t.Fatalf("refusal %v, want a PlacesUnavailableError naming FLOOR with 4 places left", err)
	}
	if got := v.holdValue("v1", "A2"); got != "" {
		t.Fatalf("A2 held after a refused hold: %q", got)
	}
	if _, hd, _ := v.areaState("v1", "FLOOR"); hd != 6 {
		t.Fatalf("held %d after a refused hold, want 6", hd)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Places) != 1 || b.Places[0] != (Places{"FLOOR", 6}) || len(b.SeatIDs) != 1 {
		t.Fatalf("booking %+v", b)
	}
	if got := v.areaSold("v1", "FLOOR"); got != 6 {
		t.Fatalf("sold %d, want 6", got)
	}
	c, hd, s := v.areaState("v1", "FLOOR")
	if c != 10 || hd != 0 || s != 6 {
		t.Fatalf("redis area c=%d h=%d s=%d, want 10 0 6", c, hd, s)
	}
	h2, err := v.holdPlaces("v1", time.Minute, "bob", 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "carol", 1); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold of a sold-out area: %v", err)
	}
	if err := v.e.Release(t.Context(), h2); err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "carol", 4); err != nil {
		t.Fatalf("hold after a release: %v", err)
	}
}

// TestAreaPlacesComeBackOnExpiry: places held and not confirmed come back when their hold
// expires, without a sweeper: the next hold of the area finds them free.
func TestAreaPlacesComeBackOnExpiry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("v1", 5)
	old, err := v.holdPlaces("v1", 200*time.Millisecond, "alice", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "bob", 1); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold while every place is held: %v", err)
	}
	var h Hold
	waitFor(t, "the expired hold's places free", 10*time.Second, func() bool {
		h, err = v.holdPlaces("v1", time.Minute, "bob", 5)
		return err == nil
	})
	if h.Generation <= old.Generation {
		t.Fatalf("generation %d after expiry, want > %d", h.Generation, old.Generation)
	}
	// The expired hold cannot book, and its refusal changed nothing.
	if _, err := v.e.Confirm(t.Context(), old, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm of the expired hold: %v, want ErrHoldLost", err)
	}
	if _, hd, s := v.areaState("v1", "FLOOR"); hd != 5 || s != 0 || v.areaSold("v1", "FLOOR") != 0 {
		t.Fatalf("after the refusal: held %d sold %d, want 5 0", hd, s)
	}
}

// TestAreaRefusalsChangeNothing: a hold presented with another count, another
// generation or an expired-and-resold hold is refused at confirmation, release and
// extension, and the area's counts stay as they were.
func TestAreaRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("v1", 4)
	v.hold("v1", time.Minute, "zoe", "A1") // so that the places' generation has an older one
	h, err := v.holdPlaces("v1", 300*time.Millisecond, "alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	state := func() [4]int {
		c, hd, s := v.areaState("v1", "FLOOR")
		return [4]int{c, hd, s, v.areaSold("v1", "FLOOR")}
	}
	before := state()
	more := h
	more.Places = []Places{{AreaID: "FLOOR", Count: 3}}
	older := h
	older.Generation--
	for name, bad := range map[string]Hold{"another count": more, "an older generation": older} {
		if _, err := v.e.Confirm(t.Context(), bad, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("confirm with %s: %v, want ErrHoldLost", name, err)
		}
		if err := v.e.Release(t.Context(), bad); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("release with %s: %v, want ErrHoldLost", name, err)
		}
		if _, err := v.e.Extend(t.Context(), bad, time.Minute); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("extend with %s: %v, want ErrHoldLost", name, err)
		}
		if got := state(); got != before {
			t.Fatalf("after %s: %v, want %v", name, got, before)
		}
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "v1", Places: []Places{{AreaID: "NOPE", Count: 1}}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("hold of an unknown area: %v, want ErrNotFound", err)
	}
	for _, n := range []int{0, -1, maxAreaCapacity + 1} {
		if _, err := v.holdPlaces("v1", time.Minute, "bob", n); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("hold of %d places: %v, want ErrInvalidArgument", n, err)
		}
	}
	if got := state(); got != before {
		t.Fatalf("after bad holds: %v, want %v", got, before)
	}
	// Expired and resold: the places went to another hold that booked them.
	v.waitExpired(Hold{ShowID: "v1", SeatIDs: withPlaces(nil, h.Places, h.Token)})
	var other Hold
	waitFor(t, "the places free again", 10*time.Second, func() bool {
		other, err = v.holdPlaces("v1", time.Minute, "bob", 4)
		return err == nil
	})
	if _, err := v.e.Confirm(t.Context(), other, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	before = state()
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm of the expired and resold hold: %v, want ErrHoldLost", err)
	}
	if got := state(); got != before || got[3] != 4 {
		t.Fatalf("after the refusal: %v, want %v (4 sold)", got, before)
	}
}

// TestAreaCapacityInDatabase: PostgreSQL refuses places past an area's capacity
// whatever Redis says (areas_sold_within_capacity), and a booking of places names a
// confirmed booking of its generation.
func TestAreaCapacityInDatabase(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("v1", 3)
	h, err := v.holdPlaces("v1", time.Minute, "alice", 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.pool.Exec(t.Context(), `INSERT INTO booking_places (show_id, booking_id, area_id, places, generation, hold_id)
		VALUES ('v1', $1, 'FLOOR', 1, $2, '0000000000000000')`, b.ID, b.Generation)
	if pgConstraint(err) != "booking_places_claimed_once" {
		t.Fatalf("a second claim of the booking: %v", err)
	}
	// Redis forgets the sale (its area count back to zero): the hold is granted, and the
	// database refuses it.
	if err := v.rdb.HSet(t.Context(), newKeys(v.cfg.KeyPrefix, "v1").base+"ar:FLOOR", "s", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h2, err := v.holdPlaces("v1", time.Minute, "bob", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("confirm past the capacity: %v, want ErrSeatsUnavailable", err)
	}
	if got := v.areaSold("v1", "FLOOR"); got != 3 {
		t.Fatalf("sold %d, want 3", got)
	}
}

// TestAreaConcurrentBuyers: 1,000 buyers on a 600-place area, each holding 1 to 3
// places, then letting the hold expire, releasing it, confirming it (some twice, with an
// idempotency key) or retrying after a refusal. Sold never exceeds 600 and is exactly
// the places of the confirmed bookings, in PostgreSQL and in Redis.
func TestAreaConcurrentBuyers(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	const capacity, buyers = 600, 1000
	v.areaVenue("v1", capacity)
	var confirmed atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			holder := fmt.Sprintf("buyer-%d", i)
			n := 1 + rand.IntN(3)
			for try := 0; try < 3; try++ {
				ttl := time.Minute
				if i%4 == 0 {
					ttl = 100 * time.Millisecond // left to expire
				}
				h, err := v.holdPlaces("v1", ttl, holder, n)
				if errors.Is(err, ErrSeatsUnavailable) {
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					continue // retried
				}
				if err != nil {
					t.Errorf("hold: %v", err)
					return
				}
				switch i % 4 {
				case 0:
					time.Sleep(150 * time.Millisecond)
					if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err == nil {
						confirmed.Add(int64(n)) // confirmed in time after all
					} else if !errors.Is(err, ErrHoldLost) {
						t.Errorf("late confirm: %v", err)
					}
				case 1:
					if err := v.e.Release(t.Context(), h); err != nil {
						t.Errorf("release: %v", err)
					}
				default:
					key := fmt.Sprintf("order-%d", i)
					b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: key})
					if err != nil {
						t.Errorf("confirm: %v", err)
						return
					}
					again, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: key})
					if err != nil || again.ID != b.ID {
						t.Errorf("retried confirm: %v (%v, %v)", err, again.ID, b.ID)
					}
					confirmed.Add(int64(n))
				}
				return
			}
		}()
	}
	wg.Wait()
	sold := v.areaSold("v1", "FLOOR")
	if sold > capacity {
		t.Fatalf("sold %d of %d places", sold, capacity)
	}
	if int64(sold) != confirmed.Load() {
		t.Fatalf("sold %d, confirmed %d", sold, confirmed.Load())
	}
	booked := v.count("SELECT COALESCE(sum(p.places), 0)::int FROM booking_places p JOIN bookings b USING (show_id, booking_id) WHERE b.status = 'confirmed' AND p.show_id = 'v1'")
	if booked != sold {
		t.Fatalf("places of confirmed bookings %d, sold %d", booked, sold)
	}
	if _, _, s := v.areaState("v1", "FLOOR"); s != sold {
		t.Fatalf("redis sold %d, database %d", s, sold)
	}
	t.Logf("%d of %d places sold", sold, capacity)
}

// forgetShow deletes every Redis key of a show, as a Redis that lost its data.
func (v *env) forgetShow(show string) {
	v.t.Helper()
	ctx := context.Background()
	keys, err := v.rdb.Keys(ctx, newKeys(v.cfg.KeyPrefix, show).base+"*").Result()
	if err != nil {
		v.t.Fatal(err)
	}
	for _, k := range keys {
		if err := v.rdb.Del(ctx, k).Err(); err != nil {
			v.t.Fatal(err)
		}
	}
}

// TestAreaRebuiltAfterRedisLoss: a Redis that lost the show gets its areas back from
// PostgreSQL before any hold is granted: the places sold stay sold (a cancelled
// booking's come back free), and the counter is above every booking's generation.
func TestAreaRebuiltAfterRedisLoss(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("v1", 10)
	var last Booking
	for _, n := range []int{3, 4} {
		h, err := v.holdPlaces("v1", time.Minute, "alice", n)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.e.Cancel(t.Context(), last.ID); err != nil {
		t.Fatal(err)
	}
	if _, hd, s := v.areaState("v1", "FLOOR"); hd != 0 || s != 3 {
		t.Fatalf("after the cancellation: held %d sold %d, want 0 3", hd, s)
	}
	v.forgetShow("v1")
	if _, err := v.holdPlaces("v1", time.Minute, "bob", 8); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold of 8 of the 7 free places after the rebuild: %v", err)
	}
	h, err := v.holdPlaces("v1", time.Minute, "bob", 7)
	if err != nil {
		t.Fatal(err)
	}
	if h.Generation <= last.Generation {
		t.Fatalf("generation %d after the rebuild, want > %d", h.Generation, last.Generation)
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := v.areaSold("v1", "FLOOR"); got != 10 {
		t.Fatalf("sold %d, want 10", got)
	}
}

// TestAreaHolderLimit: the sale's holder limit counts places as seats, held and booked.
func TestAreaHolderLimit(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("v1", 100)
	if err := v.e.SetSaleRules(t.Context(), "v1", SaleRules{HolderLimit: 4}); err != nil {
		t.Fatal(err)
	}
	h, err := v.holdPlaces("v1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "alice", 1); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("a fifth place: %v, want ErrHolderLimit", err)
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "alice", 1); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("a place past the limit, booked: %v, want ErrHolderLimit", err)
	}
	if got := v.count("SELECT seats FROM holder_seats WHERE show_id = 'v1' AND holder_id = 'alice'"); got != 4 {
		t.Fatalf("holder_seats %d, want 4 (a seat and 3 places)", got)
	}
}

// TestAreaPlacesCountAgainstHolderCapAndRoom: places count like seats for
// Config.MaxSeatsPerHolder, and a waiting room refuses a hold of places from a holder it
// has not admitted; neither refusal takes a place.
func TestAreaPlacesCountAgainstHolderCapAndRoom(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 5 })
	v.areaVenue("v1", 10)
	if _, err := v.holdPlaces("v1", time.Minute, "alice", 3, "A1"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "alice", 2); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("a sixth seat or place: %v, want ErrHolderLimit", err)
	}
	if _, err := v.holdPlaces("v1", time.Minute, "alice", 1); err != nil {
		t.Fatalf("a fifth: %v", err)
	}
	// 10 - 4 held by alice: bob's 5 fit only if the refusal took nothing.
	if _, err := v.holdPlaces("v1", time.Minute, "bob", 5); err != nil {
		t.Fatalf("the places left after the refusal: %v", err)
	}

	v.areaVenue("v2", 4)
	v.setRules("v2", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	if _, err := v.holdPlaces("v2", time.Minute, "bot", 1); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("places without an admission: %v, want ErrNotAdmitted", err)
	}
	v.admitted("v2", "ann")
	if _, err := v.holdPlaces("v2", time.Minute, "ann", 4); err != nil {
		t.Fatalf("all 4 places, admitted: %v", err)
	}
}
