package httpapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestReclaimOverHTTP: POST /v1/shows/{show}/holds/reclaim hands the caller's live holds
// back with fresh tokens; the old token is 410 hold-lost at once and the new one books;
// another holder gets none of them, and a request without a holder is refused.
func TestReclaimOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(3)}), 201, "")
	old := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1", "A2"}})
	a.want(old, 201, "")

	none := a.do("POST", "/v1/shows/s1/holds/reclaim", "bob", "", nil)
	a.want(none, 200, "")
	if fmt.Sprint(none.body["holds"]) != "[]" {
		t.Fatalf("bob reclaimed %s", none.raw)
	}
	a.want(a.do("POST", "/v1/shows/s1/holds/reclaim", "", "", nil), 400, "missing-holder")
	a.want(a.do("POST", "/v1/shows/nope/holds/reclaim", "alice", "", nil), 404, "not-found")

	r := a.do("POST", "/v1/shows/s1/holds/reclaim", "alice", "", nil)
	a.want(r, 200, "")
	holds, _ := r.body["holds"].([]any)
	if len(holds) != 1 {
		t.Fatalf("reclaimed %s, want one hold", r.raw)
	}
	fresh, _ := holds[0].(map[string]any)
	// The same expiry (the key's, KEEPTTL); a hold's reply computes its own from
	// Redis's clock, which may read a millisecond apart from the key's.
	was, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(old.body["expires_at"]))
	now, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(fresh["expires_at"]))
	if fresh["token"] == old.body["token"] || fmt.Sprint(fresh["seats"]) != "[A1 A2]" || now.Sub(was).Abs() > time.Millisecond {
		t.Fatalf("reclaimed %v for %s", fresh, old.raw)
	}
	a.want(a.do("POST", "/v1/bookings", "alice", "", old.body), 410, "hold-lost")
	a.want(a.do("POST", "/v1/bookings", "alice", "", fresh), 201, "")
}
