package httpapi

import (
	"net/http"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// confirmJSON is a confirmation's body: the hold's fields and, to confirm part of it,
// the seats and places to book ({"only_seats": [...], "only_places": [...]}; the rest of
// the hold is released).
type confirmJSON struct {
	holdJSON
	OnlySeats  []string     `json:"only_seats"`
	OnlyPlaces []placesJSON `json:"only_places"`
}

// options are the confirmation's engine options, with its idempotency key.
func (c confirmJSON) options(key string) engine.ConfirmOptions {
	return engine.ConfirmOptions{IdempotencyKey: key, SeatIDs: c.OnlySeats, Places: fromPlacesJSON(c.OnlyPlaces)}
}

// postShrink gives back part of a hold ({"keep_seats": [...], "keep_places": [...]} with
// the hold's fields) and answers the hold as it is now: the one to present from now on.
func (s *Server) postShrink(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		holdJSON
		KeepSeats  []string     `json:"keep_seats"`
		KeepPlaces []placesJSON `json:"keep_places"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	h, err := s.e.Shrink(r.Context(), holdFromJSON(body.holdJSON, holder), body.KeepSeats, fromPlacesJSON(body.KeepPlaces))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	kept := len(h.SeatIDs)
	for _, p := range h.Places {
		kept += p.Count
	}
	s.addrHolds.shrink(h.ShowID, clientAddrOf(r), h.Generation, kept)
	writeJSON(w, http.StatusOK, toHoldJSON(h))
}

// postCancelSeats cancels part of a booking of the caller's ({"seats": [...], "places":
// [...]}) and answers the booking as it is now (cancelled when that was all of it).
func (s *Server) postCancelSeats(w http.ResponseWriter, r *http.Request, holder string) {
	id, ok := s.bookingID(w, r)
	if !ok {
		return
	}
	var body struct {
		Seats  []string     `json:"seats"`
		Places []placesJSON `json:"places"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	b, err := s.e.CancelSeats(asHolder(r, holder), id, body.Seats, fromPlacesJSON(body.Places))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBookingJSON(b))
}

// postExchange gives back part of a booking of the caller's for a new hold of theirs
// ({"give_seats": [...], "give_places": [...], "hold": {hold fields}}) in one step, and
// answers the booking as it is now: the same id, the hold's generation.
func (s *Server) postExchange(w http.ResponseWriter, r *http.Request, holder string) {
	id, ok := s.bookingID(w, r)
	if !ok {
		return
	}
	var body struct {
		GiveSeats  []string     `json:"give_seats"`
		GivePlaces []placesJSON `json:"give_places"`
		Hold       holdJSON     `json:"hold"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	h := holdFromJSON(body.Hold, holder)
	b, err := s.e.Exchange(asHolder(r, holder), id, body.GiveSeats, fromPlacesJSON(body.GivePlaces), h, engine.ConfirmOptions{})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.addrHolds.update(h.ShowID, clientAddrOf(r), h.Generation, time.Time{}) // booked, no longer held
	writeJSON(w, http.StatusOK, toBookingJSON(b))
}
