package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestIdentityHeadersOnce: two Holder-Id (or Idempotency-Key) headers are refused, not
// resolved by picking one.
func TestIdentityHeadersOnce(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(2)}), 201, "")
	two := http.Header{HolderHeader: {"alice", "mallory"}}
	a.want(a.doHeaders("POST", "/v1/shows/s1/holds", two, map[string]any{"seats": []string{"A1"}}), 400, "invalid-argument")
	a.want(a.doHeaders("GET", "/v1/shows/s1/seats", two, nil), 400, "invalid-argument")
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	keys := http.Header{HolderHeader: {"alice"}, IdempotencyHeader: {"k1", "k2"}}
	r := a.doHeaders("POST", "/v1/bookings", keys, h.body)
	a.want(r, 400, "invalid-argument")
	if !strings.Contains(r.body["detail"].(string), IdempotencyHeader) {
		t.Fatalf("the refusal does not name the header: %s", r.raw)
	}
	if a.do("GET", "/v1/shows/s1/seats", "", "", nil).raw == "" {
		t.Fatal("no seat map")
	}
	a.want(a.do("POST", "/v1/bookings", "alice", "k1", h.body), 201, "")
}

// TestTTLOverflow: a ttl_ms that overflows a duration is bad input, on hold and extend.
func TestTTLOverflow(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(2)}), 201, "")
	huge := `{"seats":["A1"],"ttl_ms":288230376151771696}`
	r := a.do("POST", "/v1/shows/s1/holds", "alice", "", huge)
	a.want(r, 400, "invalid-argument")
	if !strings.Contains(r.raw, "ttl_ms") {
		t.Fatalf("the refusal does not name ttl_ms: %s", r.raw)
	}
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	h.body["ttl_ms"] = int64(288230376151771696)
	a.want(a.do("POST", "/v1/holds/extend", "alice", "", h.body), 400, "invalid-argument")
	h.body["ttl_ms"] = 0
	a.want(a.do("POST", "/v1/holds/extend", "alice", "", h.body), 400, "invalid-argument")
}

// TestOperatorRoutes: show creation and resync need the operator token; without a
// configured token they are off.
func TestOperatorRoutes(t *testing.T) {
	t.Parallel()
	rdb := testsvc.Redis(t)
	a := newAPI(t, rdb, engine.Config{}, Options{OperatorFailures: 100})
	body := map[string]any{"seats": seats(2)}
	for _, h := range []http.Header{{}, {"Authorization": {"Bearer wrong-token-wrong-token"}}, {"Authorization": {"Basic " + testOperatorToken}},
		{"Authorization": {"Bearer " + testOperatorToken, "Bearer " + testOperatorToken}}} {
		r := a.doHeaders("PUT", "/v1/shows/s1", h, body)
		a.want(r, 401, "unauthorized")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
		a.want(a.doHeaders("POST", "/v1/shows/s1/resync", h, nil), 401, "unauthorized")
	}
	a.want(a.do("GET", "/v1/shows/s1/seats", "", "", nil), 404, "not-found") // nothing was created
	a.want(a.do("PUT", "/v1/shows/s1", "", "", body), 201, "")
	a.want(a.do("POST", "/v1/shows/s1/resync", "", "", nil), 200, "")
	a.want(a.do("POST", "/v1/shows/nope/resync", "", "", nil), 404, "not-found")
	if strings.Contains(a.logs.String(), testOperatorToken) {
		t.Fatal("the operator token reached the log")
	}

	off := newAPI(t, rdb, engine.Config{}, Options{OperatorToken: "-"})
	off.s.opts.OperatorToken = "" // as a server started without one
	off.want(off.doHeaders("PUT", "/v1/shows/s2", http.Header{"Authorization": {"Bearer -"}}, body), 403, "operator-routes-off")
	off.want(off.doHeaders("POST", "/v1/shows/s2/resync", http.Header{}, nil), 403, "operator-routes-off")
}

// TestReadRateLimit: reads are limited per client address, whatever holder they name:
// a holder's bucket is a second one, never the only one.
func TestReadRateLimit(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{ReadRateLimit: 0.001, ReadRateBurst: 3})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(2)}), 201, "") // the right operator token: never limited
	for range 3 {
		a.want(a.do("GET", "/v1/shows/s1/seats", "", "", nil), 200, "")
	}
	r := a.do("GET", "/v1/shows/s1/seats", "", "", nil)
	a.want(r, 429, "rate-limited")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// Naming a holder (a fresh one each time) does not get past the address's bucket.
	for i := range 5 {
		a.want(a.do("GET", "/v1/shows/s1/seats", fmt.Sprintf("fresh-%d", i), "", nil), 429, "rate-limited")
	}
	a.want(a.do("GET", "/v1/bookings/00000000-0000-4000-8000-000000000000", "carol", "", nil), 429, "rate-limited")
}

// TestStrictJSON: duplicate names, names in another case, unknown names and trailing
// data are refused, and the refusal names the field.
func TestStrictJSON(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(2)}), 201, "")
	for body, names := range map[string]string{
		`{"seats":["A1"],"seats":["A2"]}`: "seats",
		`{"Seats":["A1"]}`:                "Seats",
		`{"seats":["A1"],"TTL_MS":1000}`:  "TTL_MS",
		`{"seat":["A1"]}`:                 "seat",
		`{"seats":["A1"]} {}`:             "",
		`{"seats":"A1"}`:                  "seats",
	} {
		r := a.do("POST", "/v1/shows/s1/holds", "alice", "", body)
		a.want(r, 400, "malformed-request")
		if d, _ := r.body["detail"].(string); !strings.Contains(d, names) {
			t.Errorf("%s: detail %q does not name %q", body, d, names)
		}
	}
	if a.do("GET", "/v1/shows/s1/seats", "", "", nil).raw == "" || strings.Contains(a.do("GET", "/v1/shows/s1/seats", "", "", nil).raw, "held") {
		t.Fatal("a refused request held a seat")
	}
}

// TestHolderHashIsKeyed: logs show a holder as an HMAC under the deployment's key, so a
// list of guessed holder ids cannot be matched against them.
func TestHolderHashIsKeyed(t *testing.T) {
	t.Parallel()
	key := []byte("deployment-secret")
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{LogKey: key})
	a.want(a.do("GET", "/v1/shows/nope/seats", "alice@example.com", "", nil), 404, "not-found")
	m := hmac.New(sha256.New, key)
	m.Write([]byte("alice@example.com"))
	keyed := hex.EncodeToString(m.Sum(nil)[:6])
	plain := sha256.Sum256([]byte("holdfast-log\x00alice@example.com"))
	logs := a.logs.String()
	if !strings.Contains(logs, `"holder":"`+keyed+`"`) || strings.Contains(logs, hex.EncodeToString(plain[:6])) ||
		strings.Contains(logs, "alice@example.com") {
		t.Fatalf("holder not logged as its keyed hash:\n%s", logs)
	}
}

// TestUnmatchedRoutesAreProblems: an unknown path is a 404 problem; a known path with
// another method is a 405 problem with Allow.
func TestUnmatchedRoutesAreProblems(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("GET", "/v2/nothing", "", "", nil), 404, "no-such-route")
	r := a.do("DELETE", "/v1/shows/s1/seats", "", "", nil)
	a.want(r, 405, "method-not-allowed")
	if got := r.header.Get("Allow"); got != "GET, HEAD" {
		t.Fatalf("Allow %q", got)
	}
	r = a.do("PATCH", "/v1/bookings/00000000-0000-4000-8000-000000000000", "alice", "", nil)
	a.want(r, 405, "method-not-allowed")
	if got := r.header.Get("Allow"); got != "GET, DELETE, HEAD" {
		t.Fatalf("Allow %q", got)
	}
	a.want(a.do("GET", "/livez", "", "", nil), 200, "")
}

// TestErrorsNameWhatWasSent: a refusal names the JSON member, path segment or header the
// client sent, not the Go field it became.
func TestErrorsNameWhatWasSent(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(3)}), 201, "")
	for _, c := range []struct {
		method, path, holder, key string
		body                      any
		field                     string
	}{
		{"POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "ttl_ms": 999999999}, "ttl_ms"},
		{"POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1", "A1"}}, "seats"},
		{"POST", "/v1/shows/-bad/holds", "alice", "", map[string]any{"seats": []string{"A1"}}, "show"},
		{"POST", "/v1/bookings", "alice", "", map[string]any{"show": "s1", "seats": []string{"A1"}, "token": "nope", "generation": 1}, "token"},
		{"POST", "/v1/bookings", "alice", "key with spaces", map[string]any{"show": "s1", "seats": []string{"A1"}, "token": strings.Repeat("a", 32), "generation": 1}, IdempotencyHeader},
	} {
		r := a.do(c.method, c.path, c.holder, c.key, c.body)
		a.want(r, 400, "invalid-argument")
		if r.body["field"] != c.field || !strings.HasPrefix(r.body["detail"].(string), c.field+": ") {
			t.Errorf("%s %s: field %v, detail %v; want %s", c.method, c.path, r.body["field"], r.body["detail"], c.field)
		}
		if strings.Contains(r.raw, "HoldRequest") || strings.Contains(r.raw, "ConfirmOptions") {
			t.Errorf("%s %s: a Go name in %s", c.method, c.path, r.raw)
		}
	}
}

// TestRequestLogLevel: the one line per request is logged at the configured level.
func TestRequestLogLevel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		level slog.Level
		want  string
	}{{slog.LevelInfo, `"level":"INFO","msg":"http request"`}, {slog.LevelDebug, `"level":"DEBUG","msg":"http request"`}} {
		a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{RequestLogLevel: c.level})
		a.want(a.do("GET", "/livez", "", "", nil), 200, "")
		if !strings.Contains(a.logs.String(), c.want) {
			t.Errorf("level %v: logs %s", c.level, a.logs.String())
		}
	}
}

// TestSpentHoldPointsAtItsBooking: confirming again a hold that made a booking says so
// and, to its holder, points at the booking.
func TestSpentHoldPointsAtItsBooking(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(3)}), 201, "")
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "", h.body)
	a.want(b, 201, "")
	r := a.do("POST", "/v1/bookings", "alice", "", h.body)
	a.want(r, 410, "hold-lost")
	if want := "/v1/bookings/" + b.body["id"].(string); r.body["booking"] != want {
		t.Fatalf("the refusal does not point at %s: %s", want, r.raw)
	}
	a.want(a.do("GET", r.body["booking"].(string), "alice", "", nil), 200, "")
	other := a.do("POST", "/v1/bookings", "mallory", "", h.body)
	a.want(other, 410, "hold-lost")
	if _, ok := other.body["booking"]; ok || strings.Contains(other.raw, b.body["id"].(string)) {
		t.Fatalf("another holder learned the booking: %s", other.raw)
	}
	// A hold of two seats books one; the other seat of the same hold cannot book too.
	two := a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A2", "A3"}})
	a.want(two, 201, "")
	first := maps.Clone(two.body)
	first["seats"] = []string{"A2"}
	booked := a.do("POST", "/v1/bookings", "bob", "", first)
	a.want(booked, 201, "")
	rest := maps.Clone(two.body)
	rest["seats"] = []string{"A3"}
	r = a.do("POST", "/v1/bookings", "bob", "", rest)
	a.want(r, 409, "stale-generation")
	if r.body["booking"] != "/v1/bookings/"+booked.body["id"].(string) {
		t.Fatalf("the refusal does not point at the booking: %s", r.raw)
	}
}

// TestOverloadIs503: with the database's connections all taken, a confirmation that
// would wait with the queue full is shed: 503 "overloaded" with Retry-After, never a
// success or "taken"; the ones waiting get their turn once a connection is free.
func TestOverloadIs503(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{MaxConfirmQueue: 1, ConfirmConns: 1}, Options{})
	a.want(a.do("PUT", "/v1/shows/busy", "", "", map[string]any{"seats": seats(3)}), 201, "")
	var conns []*pgxpool.Conn // every connection taken
	for range a.pool.Config().MaxConns {
		c, err := a.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	var holds []reply
	for i, who := range []string{"alice", "bob", "carol"} {
		h := a.do("POST", "/v1/shows/busy/holds", who, "", map[string]any{"seats": []string{fmt.Sprintf("A%d", i+1)}, "ttl_ms": 60000})
		a.want(h, 201, "")
		holds = append(holds, h)
	}
	waiting := make(chan reply, 2)
	waitFor := func(metric string) {
		for !strings.Contains(a.do("GET", "/metrics", "", "", nil).raw, metric) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Alice's confirmation is taken by the one committer, which waits for a connection;
	// Bob's waits in the queue; Carol's finds the queue full.
	go func() { waiting <- a.do("POST", "/v1/bookings", "alice", "", holds[0].body) }()
	waitFor("holdfast_confirm_queue_wait_seconds_count 1")
	go func() { waiting <- a.do("POST", "/v1/bookings", "bob", "", holds[1].body) }()
	waitFor("holdfast_confirm_queue_length 1")
	r := a.do("POST", "/v1/bookings", "carol", "", holds[2].body)
	for _, c := range conns {
		c.Release()
	}
	a.want(r, 503, "overloaded")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	a.want(<-waiting, 201, "")
	a.want(<-waiting, 201, "")
	a.want(a.do("POST", "/v1/bookings", "carol", "", holds[2].body), 201, "") // shed, not lost
}
