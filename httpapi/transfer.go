package httpapi

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/engine"
)

// postTransfer moves the caller's hold to another holder: POST /v1/holds/transfer with
// the hold's fields and {"to": holder}. It answers the hold as the new holder has it
// (a new token and generation); the presented one stops working at once. The seats
// stay counted against this address until the hold's expiry, as if it still held them:
// a transfer does not make room for more holds from the same address.
func (s *Server) postTransfer(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		holdJSON
		To string `json:"to"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if body.To == "" {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "to", Rule: "required: the holder the hold moves to"})
		return
	}
	h, err := s.e.Transfer(r.Context(), holdFromJSON(body.holdJSON, holder), body.To)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, toHoldJSON(h))
}

// postBookingTransfer moves a confirmed booking to another holder, for an operator:
// POST /v1/bookings/{id}/transfer with {"to": holder}. It answers the booking.
func (s *Server) postBookingTransfer(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "id", Rule: "must be a UUID"})
		return
	}
	var body struct {
		To string `json:"to"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if body.To == "" {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "to", Rule: "required: the holder the booking moves to"})
		return
	}
	b, err := s.e.TransferBooking(r.Context(), id, body.To)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBookingJSON(b))
}
