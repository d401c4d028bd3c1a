package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestRedisDownAnswersEveryRouteQuickly: with Redis stopped, every route that needs it
// answers within 2 s with a 503 problem+json and Retry-After — for a show this server
// has never loaded (another replica created it) as much as for one it has — and routes
// that do not need Redis still answer as usual.
func TestRedisDownAnswersEveryRouteQuickly(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	a := newAPI(t, srv.Client(), engine.Config{}, Options{})
	b := a.replica()
	a.want(a.do("PUT", "/v1/shows/known", "", "", map[string]any{"seats": seats(4)}), 201, "")
	a.want(a.do("GET", "/v1/shows/known/seats", "", "", nil), 200, "")
	hold := a.do("POST", "/v1/shows/known/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(hold, 201, "")
	confirmed := a.do("POST", "/v1/shows/known/holds", "alice", "", map[string]any{"seats": []string{"A2"}})
	a.want(confirmed, 201, "")
	booking := a.do("POST", "/v1/bookings", "alice", "k1", confirmed.body)
	a.want(booking, 201, "")
	// "unseen" exists, but server a has never read it.
	b.want(b.do("PUT", "/v1/shows/unseen", "", "", map[string]any{"seats": seats(4)}), 201, "")
	srv.Stop()

	holdBody, _ := json.Marshal(hold.body)
	extend := map[string]any{"ttl_ms": 1000}
	for k, v := range hold.body {
		extend[k] = v
	}
	extendBody, _ := json.Marshal(extend)
	type call struct {
		method, path, holder, body string
	}
	var calls []call
	for _, show := range []string{"unseen", "known"} {
		p := "/v1/shows/" + show
		calls = append(calls,
			call{"GET", p + "/seats", "", ""},
			call{"GET", p + "/seats", "bob", ""},
			call{"GET", p + "/events", "", ""},
			call{"POST", p + "/holds", "bob", `{"seats":["A3"]}`},
			call{"POST", p + "/holds", "bob", `{"count":2}`},
			call{"POST", p + "/queue", "bob", ""},
			call{"GET", p + "/queue", "bob", ""},
			call{"GET", p + "/queue/events", "", ""},
		)
	}
	calls = append(calls,
		call{"POST", "/v1/holds/extend", "alice", string(extendBody)},
		call{"POST", "/v1/holds/release", "alice", string(holdBody)},
		call{"POST", "/v1/bookings", "alice", string(holdBody)},
		call{"DELETE", "/v1/bookings/" + booking.body["id"].(string), "alice", ""},
		call{"GET", "/v1/holders/me/holds?show=unseen", "alice", ""},
		call{"GET", "/v1/holders/me/holds?show=known", "alice", ""},
	)
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, c.method, a.srv.URL+c.path, strings.NewReader(c.body))
		if c.holder != "" {
			req.Header.Set(HolderHeader, c.holder)
		}
		if c.method == "POST" && c.path == "/v1/bookings" {
			req.Header.Set(IdempotencyHeader, "k2")
		}
		start := time.Now()
		resp, err := a.srv.Client().Do(req)
		took := time.Since(start)
		if err != nil {
			cancel()
			t.Fatalf("%s %s with Redis down: %v after %v", c.method, c.path, err, took)
		}
		var p map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		cancel()
		if c.path == "/v1/shows/known/seats" || c.path == "/v1/shows/known/events" {
			// A map this server follows is served as it last was, marked stale.
			if resp.StatusCode != 200 || (strings.HasSuffix(c.path, "/seats") && p["stale"] != true) {
				t.Errorf("%s %s with Redis down: %d %v, want 200 and the last map, stale", c.method, c.path, resp.StatusCode, p)
			}
			continue
		}
		t.Logf("%s %s: %d in %v", c.method, c.path, resp.StatusCode, took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("%s %s with Redis down answered after %v, want ≤ 2 s", c.method, c.path, took.Round(time.Millisecond))
		}
		if resp.StatusCode != http.StatusServiceUnavailable || p["type"] != problemPrefix+"backend-unavailable" ||
			resp.Header.Get("Retry-After") == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s %s with Redis down: %d %v (Retry-After %q), want 503 backend-unavailable with Retry-After",
				c.method, c.path, resp.StatusCode, p, resp.Header.Get("Retry-After"))
		}
	}
	// What needs only PostgreSQL (or nothing) still works.
	a.want(a.do("GET", "/v1/bookings/"+booking.body["id"].(string), "alice", "", nil), 200, "")
	a.want(a.do("GET", "/v1/shows/unseen/layout", "", "", nil), 200, "")
	a.want(a.do("GET", "/v1/holders/me/bookings", "alice", "", nil), 200, "")
	a.want(a.do("GET", "/v1/shows", "", "", nil), 200, "")
	a.want(a.do("GET", "/livez", "", "", nil), 200, "")
}
