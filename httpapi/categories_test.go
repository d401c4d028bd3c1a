package httpapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestCategoriesOverHTTP: a show's seats and areas take a category; the layout, by seat
// and by column, carries each seat's; a best-available hold asks for one ("category",
// with or without "section"); an unknown category is 404, and a malformed one or two in
// a section 400 naming the seats or the areas, with nothing created.
func TestCategoriesOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	layout := []map[string]any{
		{"id": "S1", "section": "Stalls", "row": "A", "position": 1, "rank": 1, "x": 0, "y": 0, "category": "A"},
		{"id": "S2", "section": "Stalls", "row": "A", "position": 2, "rank": 2, "x": 0, "y": 0, "category": "A"},
		{"id": "C1", "section": "Circle", "row": "A", "position": 1, "rank": 3, "x": 0, "y": 0, "category": "B"},
		{"id": "C2", "section": "Circle", "row": "A", "position": 2, "rank": 4, "x": 0, "y": 0, "category": "B"},
		{"id": "B1", "section": "Balcony", "row": "A", "position": 1, "rank": 5, "x": 0, "y": 0},
	}
	areas := []map[string]any{{"id": "FLOOR", "section": "Floor", "capacity": 50, "category": "GA"}}
	a.want(a.do("PUT", "/v1/shows/gala", "", "", map[string]any{"layout": layout, "areas": areas}), 201, "")
	a.want(a.do("PUT", "/v1/shows/gala", "", "", map[string]any{"layout": layout, "areas": areas}), 200, "")

	r := a.do("GET", "/v1/shows/gala/layout", "", "", nil)
	a.want(r, 200, "")
	got := map[string]any{}
	for _, s := range r.body["seats"].([]any) {
		m := s.(map[string]any)
		got[m["id"].(string)] = m["category"]
	}
	if fmt.Sprint(got) != "map[B1:<nil> C1:B C2:B S1:A S2:A]" {
		t.Fatalf("the layout's categories: %v (%s)", got, r.raw)
	}
	c := a.do("GET", "/v1/shows/gala/layout?format=compact", "", "", nil)
	a.want(c, 200, "")
	names, _ := c.body["categories"].([]any)
	ids, _ := c.body["ids"].([]any)
	idx, _ := c.body["category"].([]any)
	compact := map[string]any{}
	for i, id := range ids {
		compact[id.(string)] = names[int(idx[i].(float64))]
	}
	if fmt.Sprint(compact) != "map[B1: C1:B C2:B S1:A S2:A]" {
		t.Fatalf("the compact layout's categories: %v (%s)", compact, c.raw)
	}

	h := a.do("POST", "/v1/shows/gala/holds", "alice", "", map[string]any{"count": 2, "category": "B"})
	a.want(h, 201, "")
	if fmt.Sprint(h.body["seats"]) != "[C1 C2]" {
		t.Fatalf("the 2 best of B: %s", h.raw)
	}
	h = a.do("POST", "/v1/shows/gala/holds", "bob", "", map[string]any{"count": 1, "category": "A", "section": "Stalls"})
	a.want(h, 201, "")
	if fmt.Sprint(h.body["seats"]) != "[S1]" {
		t.Fatalf("the best of A in the stalls: %s", h.raw)
	}
	a.want(a.do("POST", "/v1/shows/gala/holds", "carol", "", map[string]any{"count": 1, "category": "B"}), 409, "seats-unavailable")
	a.want(a.do("POST", "/v1/shows/gala/holds", "carol", "", map[string]any{"count": 1, "category": "Z"}), 404, "not-found")
	a.want(a.do("POST", "/v1/shows/gala/holds", "carol", "", map[string]any{"count": 1, "category": "A", "section": "Balcony"}), 404, "not-found")
	mixed := a.do("PUT", "/v1/shows/bad", "", "", map[string]any{"layout": []map[string]any{
		{"id": "S1", "section": "Stalls", "row": "A", "position": 1, "rank": 1, "category": "A"},
		{"id": "S2", "section": "Stalls", "row": "A", "position": 2, "rank": 2, "category": "B"}}})
	a.want(mixed, 400, "invalid-argument")
	if !strings.Contains(mixed.raw, "a category is a whole section's") {
		t.Fatalf("two categories in a section: %s", mixed.raw)
	}

	bad := a.do("PUT", "/v1/shows/bad", "", "", map[string]any{"layout": []map[string]any{
		{"id": "S1", "section": "Stalls", "row": "A", "position": 1, "rank": 1, "category": "-A"}}})
	a.want(bad, 400, "invalid-argument")
	if bad.body["field"] != "seats" || !strings.Contains(bad.raw, "category") {
		t.Fatalf("a malformed category: %s", bad.raw)
	}
	badArea := a.do("PUT", "/v1/shows/bad", "", "", map[string]any{"layout": layout,
		"areas": []map[string]any{{"id": "FLOOR", "section": "Floor", "capacity": 5, "category": strings.Repeat("x", 33)}}})
	a.want(badArea, 400, "invalid-argument")
	if badArea.body["field"] != "areas" || !strings.Contains(badArea.raw, "category") {
		t.Fatalf("a malformed area category: %s", badArea.raw)
	}
	a.want(a.do("GET", "/v1/shows/bad/layout", "", "", nil), 404, "not-found")
}
