package httpapi

import (
	"strings"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestListingsOverHTTP: shows listed newest first with a next page; a show deleted by
// the operator (only on the admin listener, only without bookings or holds); a
// holder's own bookings and holds, never another's.
func TestListingsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	for _, id := range []string{"s1", "s2", "s3"} {
		a.want(a.do("PUT", "/v1/shows/"+id, "", "", map[string]any{"seats": seats(3)}), 201, "")
	}
	first := a.do("GET", "/v1/shows?limit=2", "", "", nil)
	a.want(first, 200, "")
	list := first.body["shows"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["id"] != "s3" || list[0].(map[string]any)["page"] != "/shows/s3" {
		t.Fatalf("first page: %s", first.raw)
	}
	nextURL, _ := first.body["next"].(string)
	if nextURL != "/v1/shows?after=s2&limit=2" {
		t.Fatalf("next: %q", nextURL)
	}
	second := a.do("GET", nextURL, "", "", nil)
	a.want(second, 200, "")
	if l := second.body["shows"].([]any); len(l) != 1 || l[0].(map[string]any)["id"] != "s1" || second.body["next"] != nil {
		t.Fatalf("second page: %s", second.raw)
	}
	a.want(a.do("GET", "/v1/shows?limit=0", "", "", nil), 400, "invalid-argument")
	a.want(a.do("GET", "/v1/shows?limit=x", "", "", nil), 400, "invalid-argument")

	// Bookings and holds of the caller.
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "k1", h.body)
	a.want(b, 201, "")
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A2"}}), 201, "")
	a.want(a.do("POST", "/v1/shows/s2/holds", "bob", "", map[string]any{"seats": []string{"A1"}}), 201, "")
	mine := a.do("GET", "/v1/holders/me/bookings", "alice", "", nil)
	a.want(mine, 200, "")
	if l := mine.body["bookings"].([]any); len(l) != 1 || l[0].(map[string]any)["id"] != b.body["id"] || mine.body["next"] != nil {
		t.Fatalf("alice's bookings: %s", mine.raw)
	}
	if r := a.do("GET", "/v1/holders/me/bookings", "bob", "", nil); len(r.body["bookings"].([]any)) != 0 {
		t.Fatalf("bob sees bookings: %s", r.raw)
	}
	a.want(a.do("GET", "/v1/holders/me/bookings", "", "", nil), 400, "missing-holder")
	a.want(a.do("GET", "/v1/holders/me/bookings?after=nope", "alice", "", nil), 400, "invalid-argument")
	held := a.do("GET", "/v1/holders/me/holds?show=s1", "alice", "", nil)
	a.want(held, 200, "")
	if l := held.body["seats"].([]any); len(l) != 1 || l[0].(map[string]any)["seat"] != "A2" || strings.Contains(held.raw, "token") {
		t.Fatalf("alice's holds: %s", held.raw)
	}
	a.want(a.do("GET", "/v1/holders/me/holds", "alice", "", nil), 400, "invalid-argument")
	a.want(a.do("GET", "/v1/holders/me/holds?show=nope", "alice", "", nil), 404, "not-found")

	// Deletion: operator only, admin listener only, refused while in use.
	r := a.doOn(a.srv, "DELETE", "/v1/shows/s3", nil, nil)
	if r.status != 405 && r.status != 404 {
		t.Fatalf("DELETE a show on the public listener: %d", r.status)
	}
	a.want(a.doOn(a.admin, "DELETE", "/v1/shows/s3", nil, nil), 401, "unauthorized")
	a.want(a.do("DELETE", "/v1/shows/s1", "", "", nil), 409, "show-in-use")
	inUse := a.do("DELETE", "/v1/shows/s2", "", "", nil)
	a.want(inUse, 409, "show-in-use")
	if d, _ := inUse.body["detail"].(string); strings.HasPrefix(d, "engine:") || !strings.Contains(d, "live holds") {
		t.Fatalf("detail %q", d)
	}
	a.want(a.do("DELETE", "/v1/shows/s3", "", "", nil), 204, "")
	a.want(a.do("DELETE", "/v1/shows/s3", "", "", nil), 404, "not-found")
	a.want(a.do("GET", "/v1/shows/s3/seats", "", "", nil), 404, "not-found")
	all := a.do("GET", "/v1/shows", "", "", nil)
	if strings.Contains(all.raw, `"s3"`) {
		t.Fatalf("a deleted show is listed: %s", all.raw)
	}
	if !strings.Contains(a.logs.String(), "show deleted") {
		t.Fatal("the deletion is not logged")
	}
}

// TestErrorsSpeakHTTP: details name what the client sent, never the engine package; a
// missing ttl_ms is "required"; an unknown section lists the show's sections.
func TestErrorsSpeakHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	layout := []map[string]any{
		{"id": "A1", "section": "Stalls", "row": "A", "position": 1, "rank": 1, "x": 0, "y": 0},
		{"id": "B1", "section": "Circle", "row": "B", "position": 1, "rank": 2, "x": 0, "y": 1},
	}
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"layout": layout}), 201, "")
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	ext := a.do("POST", "/v1/holds/extend", "alice", "", h.body)
	a.want(ext, 400, "invalid-argument")
	if d := ext.body["detail"].(string); !strings.HasPrefix(d, "ttl_ms: required") {
		t.Fatalf("extend without ttl_ms: %q", d)
	}
	sec := a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"count": 1, "section": "Balcony"})
	a.want(sec, 404, "not-found")
	if d := sec.body["detail"].(string); !strings.Contains(d, `"Circle", "Stalls"`) {
		t.Fatalf("an unknown section: %q, want the show's sections listed", d)
	}
	for _, r := range []reply{ext, sec, a.do("GET", "/v1/shows/nope/seats", "", "", nil), a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A1"}})} {
		if strings.Contains(r.raw, "engine:") {
			t.Fatalf("a detail names the engine package: %s", r.raw)
		}
	}
}

// TestListingCountsPlaces: a show with standing areas is listed with its places and
// places sold beside its seats (a show without areas with neither).
func TestListingCountsPlaces(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/lp", "", "", venueBody(10)), 201, "")
	h := a.do("POST", "/v1/shows/lp/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "places": places("FLOOR", 4)})
	a.want(h, 201, "")
	a.want(a.do("POST", "/v1/bookings", "alice", "", h.body), 201, "")
	list := a.do("GET", "/v1/shows", "", "", nil)
	a.want(list, 200, "")
	for _, s := range list.body["shows"].([]any) {
		sh := s.(map[string]any)
		if sh["id"] != "lp" {
			continue
		}
		if sh["sold"] != 1.0 || sh["places"] != 10.0 || sh["places_sold"] != 4.0 {
			t.Fatalf("the venue listed as %v: want 1 seat sold, 10 places, 4 sold", sh)
		}
		return
	}
	t.Fatalf("lp not listed: %s", list.raw)
}
