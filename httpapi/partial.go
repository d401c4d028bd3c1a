package httpapi

import (
	"net/http"
)

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
