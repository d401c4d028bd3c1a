package httpapi

import (
	"fmt"
	"testing"

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
	if fresh["token"] == old.body["token"] || fmt.Sprint(fresh["seats"]) != "[A1 A2]" || fresh["expires_at"] != old.body["expires_at"] {
		t.Fatalf("reclaimed %v for %s", fresh, old.raw)
	}
	a.want(a.do("POST", "/v1/bookings", "alice", "", old.body), 410, "hold-lost")
	a.want(a.do("POST", "/v1/bookings", "alice", "", fresh), 201, "")
}
