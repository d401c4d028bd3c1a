package httpapi

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestWaitlistOverHTTP: a holder joins a sold-out category's waitlist (201, position 1;
// joining again keeps the entry), reads it (200), is offered the seats a release gives
// back, and books the offer as any hold; their entry is then 404. Another holder's
// offer not confirmed in time is 410 offer-expired, on the entry and on the booking.
// Bad input is 400 and joins no one.
func TestWaitlistOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/wl", "", "", map[string]any{"layout": []map[string]any{
		{"id": "S1", "section": "Stalls", "row": "A", "position": 1, "rank": 1, "x": 0, "y": 0, "category": "A"},
		{"id": "S2", "section": "Stalls", "row": "A", "position": 2, "rank": 2, "x": 0, "y": 0, "category": "A"},
	}}), 201, "")
	h := a.do("POST", "/v1/shows/wl/holds", "xavier", "", map[string]any{"seats": []string{"S1", "S2"}})
	a.want(h, 201, "")
	for _, bad := range []any{map[string]any{"category": "A"}, map[string]any{"category": "A", "count": 0},
		map[string]any{"category": "A", "count": 1, "offer_ttl_ms": -5}, map[string]any{"category": "A", "count": 1, "x": 1}} {
		a.want(a.do("POST", "/v1/shows/wl/waitlist", "ann", "", bad), 400, "")
	}
	a.want(a.do("POST", "/v1/shows/wl/waitlist", "ann", "", map[string]any{"category": "Z", "count": 1}), 404, "not-found")
	a.want(a.do("GET", "/v1/shows/wl/waitlist?category=A", "ann", "", nil), 404, "not-found")

	j := a.do("POST", "/v1/shows/wl/waitlist", "ann", "", map[string]any{"category": "A", "count": 2, "offer_ttl_ms": 1500})
	a.want(j, 201, "")
	if j.body["position"] != float64(1) || j.body["offer"] != nil {
		t.Fatalf("ann joins: %s, want position 1 and no offer", j.raw)
	}
	a.want(a.do("POST", "/v1/shows/wl/waitlist", "bob", "", map[string]any{"category": "A", "count": 2}), 201, "")
	if g := a.do("GET", "/v1/shows/wl/waitlist?category=A", "bob", "", nil); g.status != 200 || g.body["position"] != float64(2) {
		t.Fatalf("bob's entry: %d %s, want position 2", g.status, g.raw)
	}
	a.want(a.do("POST", "/v1/holds/release", "xavier", "", h.body), 204, "")
	// ann is offered both seats by the release; her offer (1.5 s) expires unconfirmed,
	// and bob is offered them after her.
	annOffer := a.waitOffer("wl", "A", "ann")
	bob := a.waitOffer("wl", "A", "bob")
	a.want(a.do("GET", "/v1/shows/wl/waitlist?category=A", "ann", "", nil), 410, "offer-expired")
	a.want(a.do("POST", "/v1/bookings", "ann", "", annOffer), 410, "offer-expired")
	ann := a.do("POST", "/v1/shows/wl/waitlist", "ann", "", map[string]any{"category": "A", "count": 1})
	a.want(ann, 201, "") // ann joins again, at the end of the line
	b := a.do("POST", "/v1/bookings", "bob", "", bob)
	a.want(b, 201, "")
	a.want(a.do("GET", "/v1/shows/wl/waitlist?category=A", "bob", "", nil), 404, "not-found")
}

// waitOffer polls holder's waitlist entry for category until it has an offer (10 s at
// most), and returns the offer.
func (a *api) waitOffer(show, category, holder string) any {
	a.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r := a.do("GET", "/v1/shows/"+show+"/waitlist?category="+category, holder, "", nil)
		if r.status == 200 && r.body["offer"] != nil {
			return r.body["offer"]
		}
	}
	a.t.Fatalf("%s has no offer after 10 s", holder)
	return nil
}

// TestWaitlistEventsOverHTTP: the holder's waitlist stream says their entry (position
// 1), then their offer when a release makes it, and ends with "ended" 410 offer-expired
// once the offer expired unconfirmed. Without an entry the stream is 404. The offer
// lives 3 s, six of the stream's reads (waitEventEvery): 700 ms was missed on a busy
// machine, its one or two reads late.
func TestWaitlistEventsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/we", "", "", map[string]any{"seats": []string{"S1"}}), 201, "")
	h := a.do("POST", "/v1/shows/we/holds", "xavier", "", map[string]any{"seats": []string{"S1"}})
	a.want(h, 201, "")
	as := http.Header{HolderHeader: {"ann"}}
	if _, resp := a.openSSE("/v1/shows/we/waitlist/events", as); resp.StatusCode != 404 {
		t.Fatalf("the stream of no entry: %d, want 404", resp.StatusCode)
	}
	a.want(a.do("POST", "/v1/shows/we/waitlist", "ann", "", map[string]any{"count": 1, "offer_ttl_ms": 3000}), 201, "")
	s, resp := a.openSSE("/v1/shows/we/waitlist/events", as)
	if s == nil {
		t.Fatalf("the stream: %d", resp.StatusCode)
	}
	if ev := s.next(5 * time.Second); ev.event != "entry" || ev.data["position"] != 1.0 || ev.data["offer"] != nil {
		t.Fatalf("first event %+v, want the entry at position 1", ev)
	}
	a.want(a.do("POST", "/v1/holds/release", "xavier", "", h.body), 204, "")
	ev := s.next(5 * time.Second)
	offer, _ := ev.data["offer"].(map[string]any)
	if ev.event != "entry" || offer == nil || fmt.Sprint(offer["seats"]) != "[S1]" {
		t.Fatalf("second event %+v, want the offer of S1", ev)
	}
	if ev := s.next(10 * time.Second); ev.event != "ended" || ev.data["status"] != 410.0 || ev.data["type"] != "urn:holdfast:problem:offer-expired" {
		t.Fatalf("last event %+v, want ended 410 offer-expired", ev)
	}
}
