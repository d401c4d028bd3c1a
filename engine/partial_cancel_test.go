package engine

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestCancelSeatsFreesPartKeepsRest: a booking of two seats and 6 places cancelled in
// part (a seat and 4 places) keeps the rest booked under its id and generation; what was
// cancelled is another buyer's at once; PostgreSQL and Redis agree on the area; the event
// log has the seats_cancelled event with the booking as it left it.
func TestCancelSeatsFreesPartKeepsRest(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 6, "A1", "A2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := v.e.CancelSeats(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 4}})
	if err != nil {
		t.Fatalf("CancelSeats: %v", err)
	}
	if after.ID != b.ID || after.Status != BookingConfirmed || after.Generation != b.Generation ||
		!slices.Equal(after.SeatIDs, []string{"A2"}) || !slices.Equal(after.Places, []Places{{AreaID: "FLOOR", Count: 2}}) {
		t.Fatalf("booking after: %+v", after)
	}
	if got, err := v.e.Booking(t.Context(), b.ID); err != nil || !slices.Equal(got.SeatIDs, after.SeatIDs) || !slices.Equal(got.Places, after.Places) {
		t.Fatalf("Booking: %+v, %v", got, err)
	}
	if c := v.claims("s1"); len(c) != 1 || c["A2"] != b.ID.String() {
		t.Fatalf("claims %v, want A2 alone", c)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 2 {
		t.Fatalf("FLOOR sold %d in PostgreSQL, want 2", sold)
	}
	if _, held, sold := v.areaState("s1", "FLOOR"); held != 0 || sold != 2 {
		t.Fatalf("Redis: FLOOR held %d sold %d, want 0 and 2", held, sold)
	}
	if n := v.count("SELECT count(*)::int FROM booking_events WHERE kind = 'seats_cancelled' AND booking_id = $1", b.ID); n != 1 {
		t.Fatalf("%d seats_cancelled events", n)
	}
	// The feed shows a transaction once every older one has ended (other tests' too).
	evs, _ := waitEvents(t, v.e, "", 2)
	if len(evs) != 2 || evs[1].Kind != EventSeatsCancelled || evs[1].Booking.Status != BookingConfirmed || !slices.Equal(evs[1].Booking.SeatIDs[:1], []string{"A2"}) {
		t.Fatalf("events %+v", evs)
	}
	other, err := v.holdPlaces("s1", time.Minute, "bob", 8, "A1")
	if err != nil {
		t.Fatalf("another buyer after the partial cancellation: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), other, ConfirmOptions{}); err != nil {
		t.Fatalf("confirming the other buyer: %v", err)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 10 || v.doubleBookings() != 0 {
		t.Fatalf("FLOOR sold %d, %d seats booked twice", sold, v.doubleBookings())
	}
	// The rest, cancelled: the booking is cancelled, everything free.
	last, err := v.e.CancelSeats(t.Context(), b.ID, []string{"A2"}, []Places{{AreaID: "FLOOR", Count: 2}})
	if err != nil || last.Status != BookingCancelled {
		t.Fatalf("cancelling the rest: %+v, %v; want a cancelled booking", last, err)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 8 {
		t.Fatalf("FLOOR sold %d after the whole cancellation, want 8", sold)
	}
	if _, held, sold := v.areaState("s1", "FLOOR"); held != 0 || sold != 8 {
		t.Fatalf("Redis: FLOOR held %d sold %d, want 0 and 8", held, sold)
	}
	if _, err := v.holdPlaces("s1", time.Minute, "carol", 2, "A2"); err != nil {
		t.Fatalf("the rest after the booking's cancellation: %v", err)
	}
}

// TestCancelSeatsRefusalsChangeNothing: a seat or area the booking does not have, more
// places than it has, nothing named, an unknown or cancelled booking: each refused with
// its typed error, and Redis and PostgreSQL are as they were.
func TestCancelSeatsRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		id     uuid.UUID
		seats  []string
		places []Places
		want   error
	}{
		{"a seat not in the booking", b.ID, []string{"A2"}, nil, ErrInvalidArgument},
		{"a seat in it and one not", b.ID, []string{"A1", "A2"}, nil, ErrInvalidArgument},
		{"an area not in it", b.ID, nil, []Places{{AreaID: "BALCONY", Count: 1}}, ErrInvalidArgument},
		{"more places than booked", b.ID, nil, []Places{{AreaID: "FLOOR", Count: 4}}, ErrInvalidArgument},
		{"a seat twice", b.ID, []string{"A1", "A1"}, nil, ErrInvalidArgument},
		{"no count", b.ID, nil, []Places{{AreaID: "FLOOR", Count: 0}}, ErrInvalidArgument},
		{"nothing", b.ID, nil, nil, ErrInvalidArgument},
		{"an unknown booking", uuid.New(), []string{"A1"}, nil, ErrNotFound},
	}
	check := func(name string, id uuid.UUID, seats []string, places []Places, want error) {
		beforeR, beforeD := v.redisSnapshot(), v.dbSnapshot()
		if _, err := v.e.CancelSeats(t.Context(), id, seats, places); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
		if after := v.redisSnapshot(); after != beforeR {
			t.Errorf("%s changed Redis:\n%s\nthen\n%s", name, beforeR, after)
		}
		if after := v.dbSnapshot(); after != beforeD {
			t.Errorf("%s changed PostgreSQL:\n%s\nthen\n%s", name, beforeD, after)
		}
	}
	for _, c := range cases {
		check(c.name, c.id, c.seats, c.places, c.want)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 3 {
		t.Fatalf("FLOOR sold %d, want 3", sold)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	check("a cancelled booking", b.ID, []string{"A1"}, nil, ErrInvalidArgument)
}

// TestCancelSeatsRacesBuyers: bookings cancelled in part while other buyers hold and
// confirm the area's places and the seats at once: the area is never oversold, sold
// always equals the places the bookings keep, and no seat is booked twice.
func TestCancelSeatsRacesBuyers(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 16)
	var bookings []Booking
	for i, seat := range []string{"A1", "A2"} {
		h, err := v.holdPlaces("s1", time.Minute, "owner"+seat, 8, seat)
		if err != nil {
			t.Fatalf("booking %d: %v", i, err)
		}
		b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bookings = append(bookings, b)
	}
	var wg sync.WaitGroup
	for _, b := range bookings {
		wg.Go(func() {
			for range 4 { // 8 places, 2 at a time, then the seat with the last ones
				var seats []string
				if left, _ := v.e.Booking(t.Context(), b.ID); left.Places[0].Count == 2 {
					seats = b.SeatIDs
				}
				if _, err := v.e.CancelSeats(t.Context(), b.ID, seats, []Places{{AreaID: "FLOOR", Count: 2}}); err != nil && !busy(err) {
					t.Errorf("CancelSeats: %v", err)
				}
			}
		})
	}
	for buyer := range 20 {
		wg.Go(func() {
			seat := []string{"A1", "A2"}[buyer%2]
			for range 10 {
				h, err := v.holdPlaces("s1", time.Minute, "buyer"+string(rune('a'+buyer)), 1)
				if err != nil {
					continue // none free yet
				}
				if buyer < 4 {
					if h2, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{seat}, HolderID: "seat" + seat, TTL: time.Minute}); err == nil {
						if _, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{}); err != nil && !errors.Is(err, ErrSeatsUnavailable) && !busy(err) {
							t.Errorf("confirm seat: %v", err)
						}
					}
				}
				if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil && !busy(err) {
					t.Errorf("confirm places: %v", err)
				}
				// areas.sold alone: its sum over the claims, read in another statement
				// while others commit, is checked once they have ended.
				if sold := v.count("SELECT sold FROM areas WHERE show_id = 's1' AND area_id = 'FLOOR'"); sold > 16 {
					t.Errorf("FLOOR sold %d of 16", sold)
				}
			}
		})
	}
	wg.Wait()
	kept := v.count("SELECT COALESCE(sum(places), 0)::int FROM booking_places bp JOIN bookings b USING (show_id, booking_id) WHERE bp.show_id = 's1' AND bp.claimed AND b.status = 'confirmed'")
	if sold := v.areaSold("s1", "FLOOR"); sold > 16 || sold != kept {
		t.Fatalf("FLOOR sold %d (capacity 16), the confirmed bookings keep %d", sold, kept)
	}
	if _, _, sold := v.areaState("s1", "FLOOR"); sold != kept {
		t.Fatalf("Redis: FLOOR sold %d, PostgreSQL %d", sold, kept)
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
}

// TestCancelSeatsGivesTheHolderTheirSeatsBack: seats cancelled in part leave their
// holder's count (PostgreSQL's holder_seats, and Redis's through it) as places do, so a
// holder at the show's limit may buy as many again; the count after the rest is
// cancelled is zero.
func TestCancelSeatsGivesTheHolderTheirSeatsBack(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	if err := v.e.SetSaleRules(t.Context(), "s1", SaleRules{HolderLimit: 4}); err != nil {
		t.Fatal(err)
	}
	h, err := v.holdPlaces("s1", time.Minute, "alice", 2, "A1", "A2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counted := func() int {
		return v.count("SELECT coalesce((SELECT seats FROM holder_seats WHERE show_id = 's1' AND holder_id = 'alice'), 0)")
	}
	if n := counted(); n != 4 {
		t.Fatalf("alice counts %d seats and places, want 4", n)
	}
	if _, err := v.e.CancelSeats(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}); err != nil {
		t.Fatalf("CancelSeats: %v", err)
	}
	if n := counted(); n != 2 {
		t.Fatalf("after cancelling a seat and a place alice counts %d, want 2", n)
	}
	again, err := v.holdPlaces("s1", time.Minute, "alice", 1, "A1")
	if err != nil {
		t.Fatalf("alice holding a seat and a place again, at 2 of 4: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), again, ConfirmOptions{}); err != nil {
		t.Fatalf("alice confirming them, at 4 of 4: %v", err)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if n := counted(); n != 2 {
		t.Fatalf("after cancelling the first booking's rest alice counts %d, want 2", n)
	}
}

// TestCancelSeatsEverySeatKeepsThePlaces: a booking's seats all cancelled while it keeps
// places of an area is a partial cancellation that commits: the booking stays confirmed
// with its places alone, and the seats are another buyer's.
func TestCancelSeatsEverySeatKeepsThePlaces(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("s1", 10)
	h, err := v.holdPlaces("s1", time.Minute, "alice", 3, "A1", "A2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := v.e.CancelSeats(t.Context(), b.ID, []string{"A1", "A2"}, nil)
	if err != nil {
		t.Fatalf("CancelSeats of every seat: %v", err)
	}
	if after.Status != BookingConfirmed || len(after.SeatIDs) != 0 || !slices.Equal(after.Places, []Places{{AreaID: "FLOOR", Count: 3}}) {
		t.Fatalf("booking after: %+v", after)
	}
	if c := v.claims("s1"); len(c) != 0 {
		t.Fatalf("claims %v, want none", c)
	}
	if sold := v.areaSold("s1", "FLOOR"); sold != 3 {
		t.Fatalf("FLOOR sold %d, want 3", sold)
	}
	if _, err := v.holdPlaces("s1", time.Minute, "bob", 1, "A1", "A2"); err != nil {
		t.Fatalf("another buyer holding the cancelled seats: %v", err)
	}
}
