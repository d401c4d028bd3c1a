package httpapi

import (
	"fmt"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestShrinkOverHTTP: POST /v1/holds/shrink keeps part of a hold under the same token
// and generation and gives the rest back at once; a seat not in the hold is 400
// invalid-argument, another holder's or the old hold is 410 hold-lost, and the shrunk
// hold confirms what it kept.
func TestShrinkOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(4)}), 201, "")
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1", "A2", "A3"}, "ttl_ms": 60000})
	a.want(h, 201, "")
	shrink := func(holder string, hold map[string]any, keep ...string) reply {
		body := map[string]any{"keep_seats": keep}
		for k, v := range hold {
			body[k] = v
		}
		return a.do("POST", "/v1/holds/shrink", holder, "", body)
	}
	a.want(shrink("alice", h.body, "A1", "A4"), 400, "invalid-argument")
	a.want(shrink("alice", h.body), 400, "invalid-argument")
	a.want(shrink("mallory", h.body, "A1"), 410, "hold-lost")
	s := shrink("alice", h.body, "A1")
	a.want(s, 200, "")
	if fmt.Sprint(s.body["seats"]) != "[A1]" || s.body["token"] != h.body["token"] || s.body["generation"] != h.body["generation"] {
		t.Fatalf("shrunk hold %s, from %s", s.raw, h.raw)
	}
	a.want(shrink("alice", h.body, "A1"), 410, "hold-lost") // the hold as it was
	a.want(a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A2", "A3"}}), 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "", s.body)
	a.want(b, 201, "")
	if fmt.Sprint(b.body["seats"]) != "[A1]" {
		t.Fatalf("booking %s, want A1", b.raw)
	}
}

// TestShrinkPlacesOverHTTP: a hold of a seat and places shrunk to part of its places
// keeps its token and generation, frees the rest at once, and books what it kept.
func TestShrinkPlacesOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/sp", "", "", venueBody(10)), 201, "")
	h := a.do("POST", "/v1/shows/sp/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 6)})
	a.want(h, 201, "")
	a.want(a.do("POST", "/v1/holds/shrink", "alice", "", withBody(h, map[string]any{"keep_places": places("FLOOR", 7)})), 400, "invalid-argument")
	s := a.do("POST", "/v1/holds/shrink", "alice", "", withBody(h, map[string]any{"keep_places": places("FLOOR", 2)}))
	a.want(s, 200, "")
	if placesCount(s, "FLOOR") != 2 || fmt.Sprint(s.body["seats"]) != "[]" || s.body["token"] != h.body["token"] || s.body["generation"] != h.body["generation"] {
		t.Fatalf("shrunk hold %s, from %s: want 2 places of FLOOR and no seat under the same token and generation", s.raw, h.raw)
	}
	// The 4 places and A1 given back are free at once: 8 of the 10 places and A1.
	a.want(a.do("POST", "/v1/shows/sp/holds", "bob", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 8)}), 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "", s.body)
	a.want(b, 201, "")
	if placesCount(b, "FLOOR") != 2 {
		t.Fatalf("booking %s, want the 2 places kept", b.raw)
	}
}

// TestConfirmPartOverHTTP: POST /v1/bookings with only_seats and only_places books part
// of a hold and releases the rest at once; a seat or area not in the hold, or more places
// than it holds, is 400 invalid-argument and changes nothing (the hold still confirms).
func TestConfirmPartOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/sc", "", "", venueBody(10)), 201, "")
	h := a.do("POST", "/v1/shows/sc/holds", "alice", "", map[string]any{"seats": []string{"A1", "A2"}, "places": places("FLOOR", 6)})
	a.want(h, 201, "")
	a.want(a.do("POST", "/v1/bookings", "alice", "", withBody(h, map[string]any{"only_seats": []string{"A3"}})), 400, "invalid-argument")
	a.want(a.do("POST", "/v1/bookings", "alice", "", withBody(h, map[string]any{"only_places": places("FLOOR", 7)})), 400, "invalid-argument")
	a.want(a.do("POST", "/v1/bookings", "alice", "", withBody(h, map[string]any{"only_places": places("BALCONY", 1)})), 400, "invalid-argument")
	b := a.do("POST", "/v1/bookings", "alice", "", withBody(h, map[string]any{"only_seats": []string{"A1"}, "only_places": places("FLOOR", 2)}))
	a.want(b, 201, "")
	if fmt.Sprint(b.body["seats"]) != "[A1]" || placesCount(b, "FLOOR") != 2 {
		t.Fatalf("booking %s, want A1 and 2 places of FLOOR", b.raw)
	}
	// A2 and the 4 other places are free at once: A2 and 8 of the 10 places.
	a.want(a.do("POST", "/v1/shows/sc/holds", "bob", "", map[string]any{"seats": []string{"A2"}, "places": places("FLOOR", 8)}), 201, "")
}

// TestCancelSeatsOverHTTP: POST /v1/bookings/{id}/cancel-seats cancels part of the
// caller's booking and answers it as it is now; what was cancelled is free at once; a
// seat not in the booking is 400 invalid-argument, another holder's booking 404; the
// rest cancelled is the booking cancelled.
func TestCancelSeatsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/sx", "", "", venueBody(10)), 201, "")
	h := a.do("POST", "/v1/shows/sx/holds", "alice", "", map[string]any{"seats": []string{"A1", "A2"}, "places": places("FLOOR", 6)})
	a.want(h, 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "", h.body)
	a.want(b, 201, "")
	path := fmt.Sprintf("/v1/bookings/%s/cancel-seats", b.body["id"])
	a.want(a.do("POST", path, "alice", "", map[string]any{"seats": []string{"A3"}}), 400, "invalid-argument")
	a.want(a.do("POST", path, "alice", "", map[string]any{"places": places("FLOOR", 7)}), 400, "invalid-argument")
	a.want(a.do("POST", path, "mallory", "", map[string]any{"seats": []string{"A1"}}), 404, "not-found")
	c := a.do("POST", path, "alice", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 4)})
	a.want(c, 200, "")
	if fmt.Sprint(c.body["seats"]) != "[A2]" || placesCount(c, "FLOOR") != 2 || c.body["status"] != "confirmed" || c.body["id"] != b.body["id"] {
		t.Fatalf("booking after %s, want A2 and 2 places, confirmed", c.raw)
	}
	// A1 and the 4 places are free at once: A1 and 8 of the 10 places.
	a.want(a.do("POST", "/v1/shows/sx/holds", "bob", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 8)}), 201, "")
	last := a.do("POST", path, "alice", "", map[string]any{"seats": []string{"A2"}, "places": places("FLOOR", 2)})
	a.want(last, 200, "")
	if last.body["status"] != "cancelled" {
		t.Fatalf("the rest cancelled: %s, want the booking cancelled", last.raw)
	}
}

// TestExchangeOverHTTP: POST /v1/bookings/{id}/exchange gives back part of the caller's
// booking for a new hold of theirs and answers the booking under the same id at the
// hold's generation; what it gave back is free at once; a seat not in the booking is 400
// invalid-argument, another holder's booking 404, a hold no longer current 410, and none
// of them changes the booking.
func TestExchangeOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/se", "", "", venueBody(10)), 201, "")
	h := a.do("POST", "/v1/shows/se/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 2)})
	a.want(h, 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "", h.body)
	a.want(b, 201, "")
	x := a.do("POST", "/v1/shows/se/holds", "alice", "", map[string]any{"seats": []string{"A2"}, "places": places("FLOOR", 1)})
	a.want(x, 201, "")
	path := fmt.Sprintf("/v1/bookings/%s/exchange", b.body["id"])
	a.want(a.do("POST", path, "alice", "", map[string]any{"give_seats": []string{"A3"}, "hold": x.body}), 400, "invalid-argument")
	a.want(a.do("POST", path, "alice", "", map[string]any{"give_seats": []string{"A1"}}), 400, "invalid-argument")
	a.want(a.do("POST", path, "mallory", "", map[string]any{"give_seats": []string{"A1"}, "hold": x.body}), 404, "not-found")
	lost := a.do("POST", "/v1/shows/se/holds", "alice", "", map[string]any{"places": places("FLOOR", 1)})
	a.want(lost, 201, "")
	a.want(a.do("POST", "/v1/holds/release", "alice", "", lost.body), 204, "")
	a.want(a.do("POST", path, "alice", "", map[string]any{"give_seats": []string{"A1"}, "hold": lost.body}), 410, "hold-lost")
	got := a.do("GET", fmt.Sprintf("/v1/bookings/%s", b.body["id"]), "alice", "", nil)
	if fmt.Sprint(got.body["seats"]) != "[A1]" || placesCount(got, "FLOOR") != 2 || got.body["generation"] != b.body["generation"] {
		t.Fatalf("the booking after the refusals: %s, want it as it was: %s", got.raw, b.raw)
	}
	e := a.do("POST", path, "alice", "", map[string]any{"give_seats": []string{"A1"}, "hold": x.body})
	a.want(e, 200, "")
	if e.body["id"] != b.body["id"] || fmt.Sprint(e.body["seats"]) != "[A2]" || placesCount(e, "FLOOR") != 3 ||
		e.body["generation"] != x.body["generation"] || e.body["status"] != "confirmed" {
		t.Fatalf("booking after the exchange %s, want A2 and 3 places at the hold's generation %v", e.raw, x.body["generation"])
	}
	// A1 is free at once, and 7 of the 10 places.
	a.want(a.do("POST", "/v1/shows/se/holds", "bob", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 7)}), 201, "")
}
