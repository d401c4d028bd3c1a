package engine

import (
	"testing"
	"time"
)

// TestWaitingRoomCountsPlaces: the waiting room's supply is a show's seats and its
// standing areas' places. A show of areas alone admits holders (before: none, ever: it
// had 0 seats to sell), and a venue whose places sold out is not sold out while its seats
// remain (before: its places sold counted against its seats).
func TestWaitingRoomCountsPlaces(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if err := v.e.CreateShowVenue(t.Context(), "standing", Venue{Areas: []Area{{ID: "FLOOR", Capacity: 50}}}); err != nil {
		t.Fatal(err)
	}
	v.setRules("standing", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("standing", "ann")
	if _, err := v.holdPlaces("standing", time.Minute, "ann", 4); err != nil {
		t.Fatalf("ann, admitted, holds 4 places: %v", err)
	}

	v.areaVenue("mixed", 10) // seats A1, A2 and FLOOR of 10
	v.setRules("mixed", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("mixed", "cat")
	for range 2 {
		h, err := v.holdPlaces("mixed", time.Minute, "cat", 5)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if q, err := v.e.Queue(t.Context(), "mixed"); err != nil || q.SoldOut {
		t.Fatalf("the room with its places sold and both seats left: %+v, %v; want not sold out", q, err)
	}
	v.admitted("mixed", "dan")
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "mixed", SeatIDs: []string{"A1", "A2"}, HolderID: "dan"}); err != nil {
		t.Fatalf("dan, admitted, holds the seats left: %v", err)
	}
}

// TestWaitingRoomCountsPlacesHeld: the waiting room counts a hold of places by its
// places, not as one seat: on a standing area of 10, with 8 places held, it admits the
// next two holders, not the next nine.
func TestWaitingRoomCountsPlacesHeld(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if err := v.e.CreateShowVenue(t.Context(), "held", Venue{Areas: []Area{{ID: "FLOOR", Capacity: 10}}}); err != nil {
		t.Fatal(err)
	}
	v.setRules("held", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("held", "ann")
	if _, err := v.holdPlaces("held", time.Minute, "ann", 8); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"bob", "cat", "dan", "eve"} {
		if _, err := v.e.Join(t.Context(), "held", h); err != nil {
			t.Fatal(err)
		}
	}
	count := func() (admitted int) {
		for _, h := range []string{"bob", "cat", "dan", "eve"} {
			tk, err := v.e.Ticket(t.Context(), "held", h)
			if err != nil {
				t.Fatal(err)
			}
			if tk.Admitted {
				admitted++
			}
		}
		return admitted
	}
	waitFor(t, "two admitted", 15*time.Second, func() bool { return count() >= 2 })
	q, _ := v.e.Queue(t.Context(), "held")
	if n := count(); n != 2 {
		t.Fatalf("%d of 4 holders admitted with 2 of 10 places free, want 2 (%+v)", n, q)
	}
}
