package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestShowLayoutRoutes: a show created with a layout serves it, by seat and by column
// (?format=compact), cacheable for good and revalidated by ETag; show creation takes
// exactly one of seats and layout.
func TestShowLayoutRoutes(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	layout := []map[string]any{
		{"id": "S2", "section": "Stalls", "row": "A", "position": 2, "rank": 2, "x": 20, "y": 10},
		{"id": "S1", "section": "Stalls", "row": "A", "position": 1, "rank": 1, "x": 10, "y": 10},
		{"id": "B1", "section": "Balcony", "row": "A", "position": 1, "rank": 50},
	}
	a.want(a.do("PUT", "/v1/shows/gala", "", "", map[string]any{"layout": layout}), 201, "")
	a.want(a.do("PUT", "/v1/shows/gala", "", "", map[string]any{"layout": layout}), 200, "")
	r := a.do("GET", "/v1/shows/gala/layout", "", "", nil)
	a.want(r, 200, "")
	seats, _ := r.body["seats"].([]any)
	if len(seats) != 3 || seats[0].(map[string]any)["id"] != "S1" || seats[2].(map[string]any)["section"] != "Balcony" {
		t.Fatalf("layout %s", r.raw)
	}
	etag := r.header.Get("ETag")
	if etag == "" || !strings.Contains(r.header.Get("Cache-Control"), "immutable") {
		t.Fatalf("layout not cacheable: %v", r.header)
	}
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag} {
		if got := a.doHeaders("GET", "/v1/shows/gala/layout", http.Header{"If-None-Match": {inm}}, nil); got.status != 304 || got.raw != "" {
			t.Fatalf("If-None-Match %s: %d %q", inm, got.status, got.raw)
		}
	}
	if got := a.doHeaders("GET", "/v1/shows/gala/layout", http.Header{"If-None-Match": {`"stale"`}}, nil); got.status != 200 {
		t.Fatalf("a stale ETag: %d", got.status)
	}
	// The compact form: the same seats by column, cacheable the same way.
	c := a.do("GET", "/v1/shows/gala/layout?format=compact", "", "", nil)
	a.want(c, 200, "")
	if !strings.Contains(c.header.Get("Cache-Control"), "immutable") || c.header.Get("ETag") == etag {
		t.Fatalf("compact layout headers %v (full form's ETag %s)", c.header, etag)
	}
	col := func(k string) []any { v, _ := c.body[k].([]any); return v }
	names, rowNames := col("sections"), col("rows")
	for i, seat := range seats {
		m := seat.(map[string]any)
		got := map[string]any{"id": col("ids")[i], "section": names[int(col("section")[i].(float64))], "row": rowNames[int(col("row")[i].(float64))],
			"position": col("position")[i], "rank": col("rank")[i], "x": col("x")[i], "y": col("y")[i]}
		if fmt.Sprint(got) != fmt.Sprint(m) {
			t.Fatalf("compact layout seat %d: %v, the full form says %v", i, got, m)
		}
	}
	if len(col("ids")) != 3 || c.body["format"] != "compact" {
		t.Fatalf("compact layout %s", c.raw)
	}
	a.want(a.do("GET", "/v1/shows/gala/layout?format=xml", "", "", nil), 400, "invalid-argument")
	a.want(a.do("GET", "/v1/shows/nope/layout?format=compact", "", "", nil), 404, "not-found")
	a.want(a.do("GET", "/v1/shows/nope/layout", "", "", nil), 404, "not-found")
	// Exactly one of seats and layout; a bad layout says what is wrong and writes nothing.
	a.want(a.do("PUT", "/v1/shows/x", "", "", map[string]any{"layout": layout, "seats": []string{"A1"}}), 400, "invalid-argument")
	a.want(a.do("PUT", "/v1/shows/x", "", "", map[string]any{}), 400, "invalid-argument")
	bad := a.do("PUT", "/v1/shows/x", "", "", map[string]any{"layout": []map[string]any{{"id": "A1", "position": 0}}})
	a.want(bad, 400, "invalid-argument")
	if !strings.Contains(bad.raw, "position") {
		t.Fatalf("the refusal does not say what is wrong: %s", bad.raw)
	}
	a.want(a.do("GET", "/v1/shows/x/layout", "", "", nil), 404, "not-found")
}
