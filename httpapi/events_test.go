package httpapi

import (
	"fmt"
	"net/http"
	"strings"
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

// TestHoldMovesInTheFeedOverHTTP: GET /v1/events shows a hold's transfer (seats and
// places) and another's reclaim, each with a null booking and the hold as the call
// answered it (never its token), then the booking made with the reclaimed hold.
func TestHoldMovesInTheFeedOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/v1", "", "", venueBody(10)), 201, "")
	old := a.do("POST", "/v1/shows/v1/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 2)})
	a.want(old, 201, "")
	body := map[string]any{"to": "bob"}
	for k, v := range old.body {
		body[k] = v
	}
	moved := a.do("POST", "/v1/holds/transfer", "alice", "", body)
	a.want(moved, 200, "")
	other := a.do("POST", "/v1/shows/v1/holds", "carol", "", map[string]any{"seats": []string{"A2"}})
	a.want(other, 201, "")
	r := a.do("POST", "/v1/shows/v1/holds/reclaim", "carol", "", nil)
	a.want(r, 200, "")
	reclaimed := r.body["holds"].([]any)[0].(map[string]any)
	a.want(a.do("POST", "/v1/bookings", "carol", "", reclaimed), 201, "")

	var f reply
	var events []any
	for deadline := time.Now().Add(30 * time.Second); len(events) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		f = a.do("GET", "/v1/events?limit=10", "", "", nil)
		a.want(f, 200, "")
		events, _ = f.body["events"].([]any)
	}
	if len(events) != 3 {
		t.Fatalf("events: %s", f.raw)
	}
	for _, tok := range []any{old.body["token"], moved.body["token"], other.body["token"], reclaimed["token"]} {
		if strings.Contains(string(f.raw), tok.(string)) {
			t.Fatalf("the feed names a token: %s", f.raw)
		}
	}
	for i, want := range []struct {
		kind, holder, from string
		hold               map[string]any
	}{{"hold_transferred", "bob", "alice", moved.body}, {"hold_reclaimed", "carol", "", reclaimed}} {
		ev := events[i].(map[string]any)
		hold, _ := ev["hold"].(map[string]any)
		if ev["kind"] != want.kind || ev["booking"] != nil || hold == nil || hold["holder"] != want.holder || hold["from_holder"] != want.from ||
			hold["generation"] != want.hold["generation"] || fmt.Sprint(hold["seats"], hold["places"]) != fmt.Sprint(want.hold["seats"], want.hold["places"]) {
			t.Fatalf("event %d: %v, want the %s of %v", i, ev, want.kind, want.hold)
		}
	}
	if ev := events[2].(map[string]any); ev["kind"] != "confirmed" || ev["hold"] != nil {
		t.Fatalf("the booking's event: %v", ev)
	}
}
