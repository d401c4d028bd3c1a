package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestIdempotencyHeaderEdges: a key sent twice and an oversize key are 400 naming the
// header (255 bytes is accepted), and a booking's keys are scoped to who writes: a key
// the operator used on it is the holder's own to use.
func TestIdempotencyHeaderEdges(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(6)}), 201, "")

	twice := a.doHeaders("POST", "/v1/shows/s1/holds", http.Header{HolderHeader: {"alice"}, IdempotencyHeader: {"a", "b"}},
		map[string]any{"seats": []string{"A1"}})
	a.want(twice, 400, "invalid-argument")
	big := a.do("POST", "/v1/shows/s1/holds", "alice", strings.Repeat("k", 256), map[string]any{"seats": []string{"A1"}})
	a.want(big, 400, "invalid-argument")
	if big.body["field"] != IdempotencyHeader {
		t.Errorf("an oversize key: %s", big.raw)
	}
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", strings.Repeat("k", 255), map[string]any{"seats": []string{"A1"}}), 201, "")

	// bob's booking, moved to carol by the operator under key "k"; carol's own cancel
	// under "k" (her first use of it).
	h := a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A2"}})
	a.want(h, 201, "")
	b := a.do("POST", "/v1/bookings", "bob", "", h.body)
	a.want(b, 201, "")
	path := "/v1/bookings/" + b.body["id"].(string)
	a.want(a.do("POST", path+"/transfer", "", "k", map[string]any{"to": "carol"}), 200, "")
	if c := a.do("DELETE", path, "carol", "k", nil); c.status != 200 {
		t.Errorf("carol's cancel under a key only the operator used: %d %s", c.status, c.raw)
	}
}
