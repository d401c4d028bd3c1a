package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// showInfoJSON is one show of GET /v1/shows.
type showInfoJSON struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Seats     int       `json:"seats"`
	Sold      int       `json:"sold"`
	// Its standing areas' places and places sold, when it has areas.
	Places     int    `json:"places,omitempty"`
	PlacesSold *int   `json:"places_sold,omitempty"`
	Page       string `json:"page"` // the show's seat-map page
}

// page reads ?after= and ?limit= of a list route.
func page(r *http.Request) (engine.Page, error) {
	q := r.URL.Query()
	p := engine.Page{After: q.Get("after")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > engine.MaxPage {
			return p, &engine.InvalidArgumentError{Field: "limit", Rule: "an integer from 1 to " + strconv.Itoa(engine.MaxPage)}
		}
		p.Limit = n
	}
	return p, nil
}

// next is the address of the page after one that ended at last, or nil when the page
// was not full (nothing follows).
func next(r *http.Request, p engine.Page, got int, last string) *string {
	limit := p.Limit
	if limit == 0 {
		limit = engine.DefaultPage
	}
	if got < limit {
		return nil
	}
	q := url.Values{"after": {last}, "limit": {strconv.Itoa(limit)}}
	n := r.URL.Path + "?" + q.Encode()
	return &n
}

// getShows lists shows newest first: GET /v1/shows?after=&limit=.
func (s *Server) getShows(w http.ResponseWriter, r *http.Request) {
	p, err := page(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	shows, err := s.e.ListShows(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Shows []showInfoJSON `json:"shows"`
		Next  *string        `json:"next"`
	}{Shows: make([]showInfoJSON, len(shows))}
	for i, sh := range shows {
		out.Shows[i] = showInfoJSON{ID: sh.ID, CreatedAt: sh.CreatedAt.UTC(), Seats: sh.Seats, Sold: sh.Sold, Page: "/shows/" + sh.ID}
		if sh.Places > 0 {
			out.Shows[i].Places, out.Shows[i].PlacesSold = sh.Places, &sh.PlacesSold
		}
	}
	if len(shows) > 0 {
		out.Next = next(r, p, len(shows), shows[len(shows)-1].ID)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// deleteShow removes a show with no bookings and no live holds (operator).
func (s *Server) deleteShow(w http.ResponseWriter, r *http.Request) {
	if err := s.e.DeleteShow(r.Context(), r.PathValue("show")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "show deleted", "show_id", r.PathValue("show"))
	w.WriteHeader(http.StatusNoContent)
}

// getMyBookings lists the calling holder's bookings in every show, newest first.
func (s *Server) getMyBookings(w http.ResponseWriter, r *http.Request, holder string) {
	p, err := page(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	bs, err := s.e.HolderBookings(r.Context(), holder, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Bookings []bookingJSON `json:"bookings"`
		Next     *string       `json:"next"`
	}{Bookings: make([]bookingJSON, len(bs))}
	for i, b := range bs {
		out.Bookings[i] = toBookingJSON(b)
	}
	if len(bs) > 0 {
		out.Next = next(r, p, len(bs), bs[len(bs)-1].ID.String())
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// getMyHolds lists the seats the calling holder holds now in ?show= (no tokens).
func (s *Server) getMyHolds(w http.ResponseWriter, r *http.Request, holder string) {
	show := r.URL.Query().Get("show")
	if show == "" {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "show", Rule: "required: the show whose holds to list (?show=)"})
		return
	}
	held, err := s.e.HolderHolds(r.Context(), show, holder)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	type heldJSON struct {
		Seat      string    `json:"seat"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	out := struct {
		Show  string     `json:"show"`
		Seats []heldJSON `json:"seats"`
	}{Show: show, Seats: make([]heldJSON, len(held))}
	for i, h := range held {
		out.Seats[i] = heldJSON{Seat: h.SeatID, ExpiresAt: h.ExpiresAt}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}
