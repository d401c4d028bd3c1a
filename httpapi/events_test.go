package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestEventFeedOverHTTP: GET /v1/events on the admin listener (operator) reads a
// booking's confirmed and cancelled events from the start, then nothing after its
// next cursor; a bad limit or cursor is a 400, no token a 401, and the public listener
// has no such route.
func TestEventFeedOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": []string{"A1", "A2"}}), 201, "")
	h := a.do("POST", "/v1/shows/s1/holds", "dave", "", map[string]any{"seats": []string{"A1", "A2"}})
	a.want(h, 201, "")
	b := a.do("POST", "/v1/bookings", "dave", "", h.body)
	a.want(b, 201, "")
	a.want(a.do("DELETE", "/v1/bookings/"+b.body["id"].(string), "dave", "", nil), 200, "")

	// Another test's transaction left open on the server holds the feed back a while.
	var r reply
	var events []any
	for deadline := time.Now().Add(30 * time.Second); len(events) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r = a.do("GET", "/v1/events?limit=10", "", "", nil)
		a.want(r, 200, "")
		events, _ = r.body["events"].([]any)
	}
	if len(events) != 2 {
		t.Fatalf("events: %s", r.raw)
	}
	for i, kind := range []string{"confirmed", "cancelled"} {
		ev := events[i].(map[string]any)
		booking := ev["booking"].(map[string]any)
		if ev["kind"] != kind || booking["id"] != b.body["id"] || booking["holder"] != "dave" || booking["status"] != kind {
			t.Fatalf("event %d: %v", i, ev)
		}
	}
	next := r.body["next"].(string)
	if next != events[1].(map[string]any)["id"] {
		t.Fatalf("next %q is not the last event's id", next)
	}
	r = a.do("GET", "/v1/events?after="+next, "", "", nil)
	a.want(r, 200, "")
	if events, _ := r.body["events"].([]any); len(events) != 0 || r.body["next"] != next {
		t.Fatalf("after the last event: %s", r.raw)
	}
	a.want(a.do("GET", "/v1/events?limit=0", "", "", nil), 400, "invalid-argument")
	a.want(a.do("GET", "/v1/events?limit=1001", "", "", nil), 400, "invalid-argument")
	a.want(a.do("GET", "/v1/events?after=nope", "", "", nil), 400, "invalid-argument")
	a.want(a.doHeaders("GET", "/v1/events", http.Header{}, nil), 401, "unauthorized")
	a.want(a.doOn(a.srv, "GET", "/v1/events", http.Header{}, nil), 404, "no-such-route")
}
