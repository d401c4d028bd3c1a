package httpapi

import (
	"strings"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestOffersOverHTTP: a hold request's "offer" (named seats, places, best available) is
// on the hold, on a reclaimed one, and on the booking and its reads; the booking has
// the hold's offer whatever the presented hold says; a bad offer is 400 naming "offer"
// and holds nothing; the same Idempotency-Key with another offer is 422.
func TestOffersOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(4)}), 201, "")

	bad := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "offer": strings.Repeat("x", 257)})
	a.want(bad, 400, "invalid-argument")
	if bad.body["field"] != "offer" {
		t.Fatalf("a 257-byte offer: %s", bad.raw)
	}
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"count": 1, "offer": "tier\nB"}), 400, "invalid-argument")

	h := a.do("POST", "/v1/shows/s1/holds", "alice", "k1", map[string]any{"seats": []string{"A1"}, "offer": "tier-B"})
	a.want(h, 201, "")
	if h.body["offer"] != "tier-B" {
		t.Fatalf("the hold of a seat the refusals left free: %s", h.raw)
	}
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "k1", map[string]any{"seats": []string{"A1"}, "offer": "tier-A"}), 422, "idempotency-key-reused")
	plain := a.do("POST", "/v1/shows/s1/holds", "carol", "", map[string]any{"seats": []string{"A3"}})
	a.want(plain, 201, "")
	if _, ok := plain.body["offer"]; ok {
		t.Fatalf("a hold without an offer: %s", plain.raw)
	}

	ext := map[string]any{"ttl_ms": 60000}
	for k, val := range h.body {
		ext[k] = val
	}
	ext["offer"] = "tier-A"
	e := a.do("POST", "/v1/holds/extend", "alice", "", ext)
	a.want(e, 200, "")
	if e.body["offer"] != "tier-B" {
		t.Fatalf("extend of a tier-B hold presented as tier-A: %s", e.raw)
	}
	r := a.do("POST", "/v1/shows/s1/holds/reclaim", "alice", "", nil)
	a.want(r, 200, "")
	holds, _ := r.body["holds"].([]any)
	if len(holds) != 1 || holds[0].(map[string]any)["offer"] != "tier-B" {
		t.Fatalf("reclaimed %s, want the hold with its offer", r.raw)
	}
	fresh := holds[0].(map[string]any)
	fresh["offer"] = "tier-A" // presented with another tier
	b := a.do("POST", "/v1/bookings", "alice", "", fresh)
	a.want(b, 201, "")
	if b.body["offer"] != "tier-B" {
		t.Fatalf("the booking of a hold of tier-B presented as tier-A: %s", b.raw)
	}
	got := a.do("GET", "/v1/bookings/"+b.body["id"].(string), "alice", "", nil)
	a.want(got, 200, "")
	if got.body["offer"] != "tier-B" {
		t.Fatalf("the booking read back: %s", got.raw)
	}

	best := a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"count": 1, "offer": "best-tier"})
	a.want(best, 201, "")
	b = a.do("POST", "/v1/bookings", "bob", "", best.body)
	a.want(b, 201, "")
	if best.body["offer"] != "best-tier" || b.body["offer"] != "best-tier" {
		t.Fatalf("best available with an offer: hold %s, booking %s", best.raw, b.raw)
	}
}
