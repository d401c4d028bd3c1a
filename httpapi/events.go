package httpapi

import (
	"net/http"
	"strconv"

	"github.com/holdfast/holdfast/engine"
)

// defaultEventsPage is the page of GET /v1/events without a limit.
const defaultEventsPage = 100

// getFeed reads the event feed after the cursor ?after= (operator, admin listener):
// {"events": [...], "next": cursor}. Pass next as after to read on; it is after itself
// when nothing is new.
func (s *Server) getFeed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultEventsPage
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > engine.MaxEventsPage {
			s.fail(w, r, &engine.InvalidArgumentError{Field: "limit", Rule: "an integer from 1 to " + strconv.Itoa(engine.MaxEventsPage)})
			return
		}
		limit = n
	}
	events, next, err := s.e.Events(r.Context(), q.Get("after"), limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, struct {
		Events []engine.Event `json:"events"`
		Next   string         `json:"next"`
	}{events, next})
}
