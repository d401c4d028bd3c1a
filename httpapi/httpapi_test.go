package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// api is a Server over a real engine behind a real listener, with its logs captured.
type api struct {
	t     *testing.T
	pool  *pgxpool.Pool    // the engine's
	srv   *httptest.Server // the public routes
	admin *httptest.Server // the admin routes (Server.Admin)
	s     *Server
	logs  *syncBuffer

	// What a replica (another server on the same database and Redis) is made from.
	rdb  redis.UniversalClient
	cfg  engine.Config
	opts Options
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newAPI(t *testing.T, rdb redis.UniversalClient, cfg engine.Config, opts Options) *api {
	t.Helper()
	cfg.KeyPrefix = testsvc.KeyPrefix(t)
	return newAPIOn(t, testsvc.Database(t), rdb, cfg, opts)
}

// replica is another server with an engine of its own on a's database and Redis, as a
// second `holdfast serve` behind a load balancer.
func (a *api) replica() *api {
	a.t.Helper()
	return newAPIOn(a.t, a.pool, a.rdb, a.cfg, a.opts)
}

func newAPIOn(t *testing.T, pool *pgxpool.Pool, rdb redis.UniversalClient, cfg engine.Config, opts Options) *api {
	t.Helper()
	base, baseOpts := cfg, opts
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	cfg.Logger, cfg.Registerer = log, reg
	e, err := engine.New(pool, rdb, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	opts.Logger, opts.Registry = log, reg
	if opts.RateLimit == 0 {
		opts.RateLimit = 1000
		opts.RateBurst = 1000
	}
	if opts.ReadRateLimit == 0 {
		opts.ReadRateLimit = 1000
		opts.ReadRateBurst = 1000
	}
	// Every test client is one address (loopback): the per-address limits are the
	// tests' own to set.
	if opts.AddrRateLimit == 0 {
		opts.AddrRateLimit, opts.AddrRateBurst = 1e6, 1e6
	}
	if opts.MaxStreamsPerAddress == 0 {
		opts.MaxStreamsPerAddress = 10_000
	}
	if opts.MaxSeatsPerAddress == 0 {
		opts.MaxSeatsPerAddress = 1_000_000
	}
	if opts.StreamConnectRate == 0 {
		opts.StreamConnectRate = 1e6
	}
	if opts.UnknownShowRate == 0 {
		opts.UnknownShowRate = 1000
	}
	if opts.OperatorToken == "" {
		opts.OperatorToken = testOperatorToken
	}
	s, err := New(e, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(recordExchanges(s))
	srv.Config.ConnContext = s.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	admin := httptest.NewServer(recordExchanges(s.Admin()))
	t.Cleanup(admin.Close)
	return &api{t: t, pool: pool, srv: srv, admin: admin, s: s, logs: logs, rdb: rdb, cfg: base, opts: baseOpts}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// testOperatorToken is the operator token of the test servers, unless a test sets one.
const testOperatorToken = "test-operator-token-0123456789"

// do sends a request; body is JSON-encoded unless it is a string. Operator routes (PUT
// a show, resync) carry the server's operator token.
func (a *api) do(method, path, holder, key string, body any) reply {
	a.t.Helper()
	h := http.Header{}
	if holder != "" {
		h.Set(HolderHeader, holder)
	}
	if key != "" {
		h.Set(IdempotencyHeader, key)
	}
	if adminRoute(method, path) {
		h.Set("Authorization", "Bearer "+a.s.opts.OperatorToken)
	}
	return a.doHeaders(method, path, h, body)
}

// doHeaders sends a request with exactly these headers, to the admin listener for
// the admin routes (show creation, resync, metrics), else to the public one.
func (a *api) doHeaders(method, path string, headers http.Header, body any) reply {
	a.t.Helper()
	base := a.srv
	if adminRoute(method, path) {
		base = a.admin
	}
	return a.doOn(base, method, path, headers, body)
}

// adminRoute reports whether method and path name a route of the admin listener only.
func adminRoute(method, path string) bool {
	showPath := strings.HasPrefix(path, "/v1/shows/") && strings.Count(path, "/") == 3
	return (method == "PUT" && strings.HasPrefix(path, "/v1/shows/")) || (method == "DELETE" && showPath) ||
		(method == "POST" && strings.HasSuffix(path, "/resync")) || path == "/metrics" || strings.HasPrefix(path, "/v1/events") ||
		(method == "POST" && strings.HasPrefix(path, "/v1/bookings/") && strings.HasSuffix(path, "/transfer"))
}

// doOn sends a request to one listener.
func (a *api) doOn(srv *httptest.Server, method, path string, headers http.Header, body any) reply {
	a.t.Helper()
	return a.doWith(srv.Client(), srv, method, path, headers, body)
}

// doWith sends a request to one listener with client c.
func (a *api) doWith(c *http.Client, srv *httptest.Server, method, path string, headers http.Header, body any) reply {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	for k, vs := range headers {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(data)}
	_ = json.Unmarshal(data, &r.body)
	return r
}

func (a *api) want(r reply, status int, problemType string) {
	a.t.Helper()
	if r.status != status {
		a.t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if problemType != "" {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			a.t.Fatalf("content type %q for a problem", ct)
		}
		if got := r.body["type"]; got != problemPrefix+problemType {
			a.t.Fatalf("problem type %v, want %s", got, problemType)
		}
	}
}

func seats(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("A%d", i+1)
	}
	return s
}

func TestEveryRoute(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{MaxSeatsPerHolder: 4, MaxHoldAge: time.Second, MaxHoldTTL: time.Second, DefaultHoldTTL: time.Second}, Options{})

	// Shows.
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(8)}), 201, "")
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(8)}), 200, "")
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(3)}), 400, "invalid-argument")
	a.want(a.do("PUT", "/v1/shows/bad:id", "", "", map[string]any{"seats": seats(1)}), 400, "invalid-argument")
	a.want(a.do("PUT", "/v1/shows/s2", "", "", `{"seats":["A1"]`), 400, "malformed-request")
	a.want(a.do("PUT", "/v1/shows/s2", "", "", `{"seats":["A1"],"price":3}`), 400, "malformed-request")
	a.want(a.do("PUT", "/v1/shows/s2", "", "", `{"seats":["A1"]} {}`), 400, "malformed-request")
	a.want(a.do("GET", "/v1/shows/s1/seats", "", "", nil), 200, "")
	a.want(a.do("GET", "/v1/shows/nope/seats", "", "", nil), 404, "not-found")

	// Holds.
	a.want(a.do("POST", "/v1/shows/s1/holds", "", "", map[string]any{"seats": []string{"A1"}}), 400, "missing-holder")
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1", "A2"}, "ttl_ms": 1000})
	a.want(h, 201, "")
	for _, f := range []string{"show", "seats", "token", "generation", "expires_at"} {
		if _, ok := h.body[f]; !ok {
			t.Fatalf("hold lacks %s: %s", f, h.raw)
		}
	}
	taken := a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A2", "A3"}})
	a.want(taken, 409, "seats-unavailable")
	if fmt.Sprint(taken.body["seats"]) != "[A2]" {
		t.Fatalf("refusal names %v, want [A2]", taken.body["seats"])
	}
	a.want(a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A3"}, "ttl_ms": 0}), 400, "invalid-argument")
	a.want(a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"Z9"}}), 404, "not-found")
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A3", "A4", "A5"}}), 409, "holder-limit")

	// Extend and release.
	ext := map[string]any{}
	for k, v := range h.body {
		ext[k] = v
	}
	ext["ttl_ms"] = 500
	a.want(a.do("POST", "/v1/holds/extend", "alice", "", ext), 200, "")
	a.want(a.do("POST", "/v1/holds/extend", "mallory", "", ext), 410, "hold-lost")
	ext["ttl_ms"] = 5000
	a.want(a.do("POST", "/v1/holds/extend", "alice", "", ext), 400, "invalid-argument")
	ext["ttl_ms"] = 1000
	var limited reply
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if limited = a.do("POST", "/v1/holds/extend", "alice", "", ext); limited.status != 200 {
			break
		}
	}
	a.want(limited, 422, "extend-limit")
	h2 := a.do("POST", "/v1/shows/s1/holds", "carol", "", map[string]any{"seats": []string{"A6"}})
	a.want(h2, 201, "")
	a.want(a.do("POST", "/v1/holds/release", "carol", "", h2.body), 204, "")
	a.want(a.do("POST", "/v1/holds/release", "carol", "", h2.body), 410, "hold-lost")

	// Bookings.
	h3 := a.do("POST", "/v1/shows/s1/holds", "dave", "", map[string]any{"seats": []string{"A7", "A8"}})
	a.want(h3, 201, "")
	b := a.do("POST", "/v1/bookings", "dave", "order-1", h3.body)
	a.want(b, 201, "")
	for _, f := range []string{"id", "show", "seats", "generation", "status", "confirmed_at", "cancelled_at"} {
		if _, ok := b.body[f]; !ok {
			t.Fatalf("booking lacks %s: %s", f, b.raw)
		}
	}
	replay := a.do("POST", "/v1/bookings", "dave", "order-1", h3.body)
	a.want(replay, 200, "")
	if replay.body["id"] != b.body["id"] {
		t.Fatalf("replay returned %v, first %v", replay.body["id"], b.body["id"])
	}
	h4 := a.do("POST", "/v1/shows/s1/holds", "dave", "", map[string]any{"seats": []string{"A6"}})
	a.want(a.do("POST", "/v1/bookings", "dave", "order-1", h4.body), 422, "idempotency-key-reused")
	a.want(a.do("POST", "/v1/bookings", "dave", "", h3.body), 410, "hold-lost")
	a.want(a.do("POST", "/v1/bookings", "dave", "", `{"show":"s1"`), 400, "malformed-request")
	id := b.body["id"].(string)
	a.want(a.do("GET", "/v1/bookings/"+id, "dave", "", nil), 200, "")
	a.want(a.do("GET", "/v1/bookings/"+id, "mallory", "", nil), 404, "not-found")
	a.want(a.do("GET", "/v1/bookings/not-a-uuid", "dave", "", nil), 400, "invalid-argument")
	a.want(a.do("DELETE", "/v1/bookings/"+id, "mallory", "", nil), 404, "not-found")
	c := a.do("DELETE", "/v1/bookings/"+id, "dave", "", nil)
	a.want(c, 200, "")
	if c.body["status"] != "cancelled" || c.body["cancelled_at"] == nil {
		t.Fatalf("cancelled booking %s", c.raw)
	}

	// Operations.
	a.want(a.do("GET", "/livez", "", "", nil), 200, "")
	a.want(a.do("GET", "/readyz", "", "", nil), 200, "")
	m := a.do("GET", "/metrics", "", "", nil)
	a.want(m, 200, "")
	for _, name := range []string{"holdfast_http_requests_total", "holdfast_operations_total", `route="POST /v1/bookings"`} {
		if !strings.Contains(m.raw, name) {
			t.Fatalf("/metrics lacks %s", name)
		}
	}
	if strings.Contains(m.raw, "alice") || strings.Contains(m.raw, h.body["token"].(string)) {
		t.Fatal("/metrics shows a holder or a token")
	}
	a.want(a.do("GET", "/v1/nothing", "", "", nil), 404, "")
}

func TestOversizedBodiesAreRefusedBeforeTheEngine(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{MaxBodyBytes: 1024, MaxShowBodyBytes: 2048})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(3)}), 201, "")
	big := map[string]any{"seats": []string{strings.Repeat("A", 2000)}}
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", big), 413, "request-too-large")
	a.want(a.do("PUT", "/v1/shows/s2", "", "", map[string]any{"seats": seats(500)}), 413, "request-too-large")
	a.want(a.do("POST", "/v1/bookings", "alice", "", `{"show":"`+strings.Repeat("x", 5000)+`"}`), 413, "request-too-large")
}

func TestRateLimitPerHolder(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{RateLimit: 0.5, RateBurst: 3})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(10)}), 201, "")
	for i := range 3 {
		a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{seats(10)[i]}}), 201, "")
	}
	r := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A9"}})
	a.want(r, 429, "rate-limited")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	a.want(a.do("POST", "/v1/bookings", "alice", "", map[string]any{"show": "s1"}), 429, "rate-limited")
	// Another holder has a bucket of its own.
	a.want(a.do("POST", "/v1/shows/s1/holds", "bob", "", map[string]any{"seats": []string{"A9"}}), 201, "")
}

func TestOneSeatManyClientsOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": []string{"A1"}}), 201, "")
	const n = 60
	statuses := make([]int, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest("POST", a.srv.URL+"/v1/shows/s1/holds", strings.NewReader(`{"seats":["A1"]}`))
			req.Header.Set(HolderHeader, fmt.Sprintf("c%d", i))
			resp, err := a.srv.Client().Do(req)
			if err != nil {
				t.Errorf("hold: %v", err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i], bodies[i] = resp.StatusCode, string(body)
		})
	}
	close(start)
	wg.Wait()
	won, refused := 0, 0
	for i, s := range statuses {
		switch s {
		case 201:
			won++
		case 409:
			refused++
		default:
			t.Errorf("status %d: %s", s, bodies[i])
		}
	}
	if won != 1 || refused != n-1 {
		t.Fatalf("%d won, %d refused, want 1 and %d (statuses %v)", won, refused, n-1, statuses)
	}
}

func TestLogsNeverCarrySecrets(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(4)}), 201, "")
	var secrets []string
	for i, holder := range []string{"alice@example.com", "bob@example.com"} {
		h := a.do("POST", "/v1/shows/s1/holds", holder, "", map[string]any{"seats": []string{seats(4)[i]}})
		a.want(h, 201, "")
		key := fmt.Sprintf("idem-secret-%d", i)
		secrets = append(secrets, h.body["token"].(string), key, holder)
		a.want(a.do("POST", "/v1/bookings", holder, key, h.body), 201, "")
		a.want(a.do("POST", "/v1/bookings", holder, key, h.body), 200, "")
		a.want(a.do("POST", "/v1/holds/release", holder, "", h.body), 410, "hold-lost")
		a.want(a.do("POST", "/v1/holds/extend", holder, "", h.body), 400, "invalid-argument")
	}
	logs := a.logs.String()
	if strings.Count(logs, `"msg":"http request"`) < 10 {
		t.Fatalf("expected one log line per request, got:\n%s", logs)
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Fatalf("the logs contain a secret (%d chars):\n%s", len(s), logs)
		}
	}
}

func TestReadyzFollowsRedisAndDraining(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	a := newAPI(t, srv.Client(), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(2)}), 201, "")
	a.want(a.do("GET", "/readyz", "", "", nil), 200, "")
	srv.Stop()
	// The public answer is at most a second old.
	deadline := time.Now().Add(5 * time.Second)
	r := a.do("GET", "/readyz", "", "", nil)
	for r.status == 200 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		r = a.do("GET", "/readyz", "", "", nil)
	}
	a.want(r, 503, "backend-unavailable")
	if r.body["detail"] != "not ready" {
		t.Fatalf("an anonymous /readyz tells the cause: %s", r.raw)
	}
	r = a.doHeaders("GET", "/readyz", http.Header{"Authorization": {"Bearer " + testOperatorToken}}, nil)
	if r.body["detail"] != "not ready" {
		t.Fatalf("the public /readyz tells the cause, even to the operator token: %s", r.raw)
	}
	r = a.doOn(a.admin, "GET", "/readyz", nil, nil)
	if d, _ := r.body["detail"].(string); r.status != 503 || !strings.Contains(d, "redis") {
		t.Fatalf("the admin /readyz does not tell the cause: %s", r.raw)
	}
	if !strings.Contains(a.logs.String(), "not ready") {
		t.Fatal("the cause is not logged")
	}
	r = a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(r, 503, "backend-unavailable")
	if strings.Contains(r.raw, "127.0.0.1") {
		t.Fatalf("a 503 leaks backend details: %s", r.raw)
	}
	a.want(a.do("GET", "/livez", "", "", nil), 200, "")
	srv.Restart()
	a.want(a.do("GET", "/readyz", "", "", nil), 200, "")
	a.s.SetDraining()
	a.want(a.do("GET", "/readyz", "", "", nil), 503, "draining")
}

func TestProblemMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err    error
		status int
		typ    string
	}{
		{&engine.InvalidArgumentError{Field: "x", Rule: "y"}, 400, "invalid-argument"},
		{fmt.Errorf("wrapped: %w", engine.ErrNotFound), 404, "not-found"},
		{&engine.SeatsUnavailableError{SeatIDs: []string{"A1"}}, 409, "seats-unavailable"},
		{engine.ErrStaleGeneration, 409, "stale-generation"},
		{engine.ErrHolderLimit, 409, "holder-limit"},
		{engine.ErrHoldLost, 410, "hold-lost"},
		{engine.ErrIdempotencyKeyReused, 422, "idempotency-key-reused"},
		{engine.ErrExtendLimit, 422, "extend-limit"},
		{fmt.Errorf("%w: redis: %w", engine.ErrUnavailable, context.DeadlineExceeded), 503, "backend-unavailable"},
		{errors.New("surprise"), 500, "internal"},
	}
	for _, c := range cases {
		if status, typ, _ := problem(c.err); status != c.status || typ != c.typ {
			t.Errorf("%v: %d %s, want %d %s", c.err, status, typ, c.status, c.typ)
		}
	}
}
