package httpapi

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// waitEntryJSON is a waitlist entry on the wire: the caller's place in line (1 for the
// first waiting, 0 once offered) and, once made, the hold offered (present it as any
// hold to confirm it).
type waitEntryJSON struct {
	Show     string    `json:"show"`
	Category string    `json:"category"`
	Count    int       `json:"count"`
	Position int64     `json:"position"`
	Offer    *holdJSON `json:"offer,omitempty"`
}

func toWaitEntryJSON(w engine.WaitEntry) waitEntryJSON {
	j := waitEntryJSON{Show: w.ShowID, Category: w.Category, Count: w.Count, Position: w.Position}
	if w.Offer != nil {
		h := toHoldJSON(*w.Offer)
		j.Offer = &h
	}
	return j
}

// postWaitlist puts the caller on a show's waitlist ({"category": "A", "count": 2,
// "offer_ttl_ms": 600000}; category "" or left out: the seats and areas without one) and
// answers 201 with the entry — the one they had when they were on it already.
func (s *Server) postWaitlist(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		Category   string `json:"category"`
		Count      *int   `json:"count"`
		OfferTTLms *int64 `json:"offer_ttl_ms"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if body.Count == nil {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "count", Rule: "required: how many seats, or places of one area, to be offered"})
		return
	}
	var ttl time.Duration
	if body.OfferTTLms != nil {
		d, err := ttlFromMillis(*body.OfferTTLms)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ttl = d
	}
	// The count is the address's as a hold's seats are (MaxSeatsPerAddress): held by its
	// offer when made at once, else for the offer's TTL from the join.
	done, ok := s.addrHolds.reserve(r.PathValue("show"), clientAddrOf(r), max(*body.Count, 0))
	if !ok {
		s.addressSeatsRefused(w)
		return
	}
	e, err := s.e.JoinWaitlist(r.Context(), engine.WaitRequest{ShowID: r.PathValue("show"), HolderID: holder,
		Category: body.Category, Count: *body.Count, OfferTTL: ttl})
	switch {
	case err != nil:
		done(0, time.Time{}, false)
		s.fail(w, r, err)
		return
	case e.Offer != nil:
		done(e.Offer.Generation, e.Offer.ExpiresAt, true)
	default:
		done(0, time.Now().Add(cmp.Or(ttl, waitCounted)), true)
	}
	writeJSON(w, http.StatusCreated, toWaitEntryJSON(e))
}

// getWaitlist serves the caller's entry on a show's waitlist for ?category= (none: the
// seats and areas without one): 404 when they have none (never joined, or their offer
// was booked or released), 410 offer-expired when their offer was not confirmed in time.
func (s *Server) getWaitlist(w http.ResponseWriter, r *http.Request, holder string) {
	e, err := s.e.WaitEntry(r.Context(), r.PathValue("show"), holder, r.URL.Query().Get("category"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, toWaitEntryJSON(e))
}

// waitCounted is how long a waiting entry's count stays its address's without an
// offer_ttl_ms: the engine's default hold TTL.
const waitCounted = 5 * time.Minute

// waitEventEvery is how often a waitlist entry's event stream reads the entry.
const waitEventEvery = 500 * time.Millisecond

// waitEndJSON is the last event of a waitlist entry's stream: why it has no entry now.
type waitEndJSON struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
}

// getWaitlistEvents streams the caller's entry on a show's waitlist for ?category=: an
// event "entry" (as GET waitlist answers) whenever it changed — its position, then its
// offer — and, once it has none, an event "ended" ({"status": 404, "type":
// "not-found"}: booked, released or moved on; 410 "offer-expired") that ends the stream.
func (s *Server) getWaitlistEvents(w http.ResponseWriter, r *http.Request, holder string) {
	show, category := r.PathValue("show"), r.URL.Query().Get("category")
	e, err := s.e.WaitEntry(r.Context(), show, holder, category)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.pollStream(w, r, waitEventEvery, func(ctx context.Context, first bool) (string, any, bool) {
		if !first {
			e, err = s.e.WaitEntry(ctx, show, holder, category)
		}
		switch {
		case errors.Is(err, engine.ErrNotFound), errors.Is(err, engine.ErrOfferExpired):
			status, typ, _ := problem(err)
			return "ended", waitEndJSON{Status: status, Type: problemPrefix + typ}, false
		case err != nil:
			return "", nil, true // Redis is away for a moment: keep the stream, send the next change
		}
		return "entry", toWaitEntryJSON(e), true
	})
}
