// Package httpapi serves a holdfast engine as JSON over HTTP: the routes of the README's
// HTTP API, RFC 9457 problem responses, per-holder rate limiting, request logs without
// secrets, and metrics. holdfast serve uses it; a booking backend can mount a [Server]
// (an [http.Handler]) in its own mux, behind its own authentication, setting the
// Holder-Id header from its session.
package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/holdfast/holdfast/engine"
)

// OpenAPI is the OpenAPI 3.1 document of the API (also docs/openapi.yaml), served at
// /openapi.yaml. The tests validate every response they see against it.
//
//go:embed openapi.yaml
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
}

// HolderHeader carries the caller's identity, set by the booking backend in front.
const HolderHeader = "Holder-Id"

// IdempotencyHeader carries a confirmation's idempotency key.
const IdempotencyHeader = "Idempotency-Key"

// Options tune a Server. Zero values mean the defaults.
type Options struct {
	// Logger receives one line per request. Defaults to discarding.
	Logger *slog.Logger
	// Registry receives the HTTP metrics and serves /metrics (the engine's metrics
	// should be registered on it too). Defaults to a new registry.
	Registry *prometheus.Registry
	// RateLimit is each holder's sustained rate of holds and confirmations per second.
	// Defaults to 20.
	RateLimit float64
	// RateBurst is each holder's burst. Defaults to 40.
	RateBurst int
	// MaxBodyBytes bounds request bodies, except show creation. Defaults to 16 KiB.
	MaxBodyBytes int64
	// MaxShowBodyBytes bounds a show creation body. Defaults to 4 MiB.
	MaxShowBodyBytes int64
	// ReadRateLimit is the sustained rate of reads (seat maps, bookings) per second
	// per holder, or per client address for requests without a holder. A load test
	// from one address raises it. Defaults to 50.
	ReadRateLimit float64
	// ReadRateBurst is the burst of reads. Defaults to 100.
	ReadRateBurst int
	// OperatorToken is the bearer token of the operator routes (show creation,
	// resync, readiness details). Empty turns those routes off (403).
	OperatorToken string
	// RequestLogLevel is the level of the one line logged per request. Defaults to
	// info (the zero slog.Level).
	RequestLogLevel slog.Level
	// MaxStreams bounds the seat-map event streams open at once; past it a new one is
	// refused with 503 and Retry-After. Defaults to 10,000.
	MaxStreams int
	// Heartbeat is how often an idle event stream gets a comment line, so that
	// proxies keep it open and a client notices a dead one. Defaults to 15 seconds.
	Heartbeat time.Duration
	// StreamWriteTimeout bounds each write to an event stream: a client that does not
	// read for that long is disconnected (it resumes with Last-Event-ID). Defaults to
	// 10 seconds.
	StreamWriteTimeout time.Duration
	// LogKey keys the hash that logs show of a holder (HMAC-SHA-256), so that a list
	// of guessed holder ids cannot be matched against logs. Defaults to 32 random
	// bytes per process.
	LogKey []byte
}

// Server is the HTTP face of one engine.
type Server struct {
	e        *engine.Engine
	log      *slog.Logger
	reg      *prometheus.Registry
	opts     Options
	limiters *limiters // holds and confirmations, per holder
	reads    *limiters // reads, per holder or client address
	operator [32]byte  // SHA-256 of the operator token
	draining atomic.Bool
	epoch    string       // names this process's seat-map versions (ETags, event ids)
	maps     mapCache     // compact seat maps, encoded once per version
	streams  atomic.Int64 // open event streams
	events   eventCache   // SSE events formatted once for every stream

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	handler  http.Handler // the routes, with logging and metrics
}

// New returns a Server over e.
func New(e *engine.Engine, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.RateLimit == 0 {
		opts.RateLimit = 20
	}
	if opts.RateBurst == 0 {
		opts.RateBurst = 40
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 16 << 10
	}
	if opts.MaxShowBodyBytes == 0 {
		opts.MaxShowBodyBytes = 4 << 20
	}
	if opts.ReadRateLimit == 0 {
		opts.ReadRateLimit = 50
	}
	if opts.ReadRateBurst == 0 {
		opts.ReadRateBurst = 100
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = 10_000
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.StreamWriteTimeout == 0 {
		opts.StreamWriteTimeout = 10 * time.Second
	}
	if opts.MaxStreams < 0 || opts.Heartbeat < 0 || opts.StreamWriteTimeout < 0 {
		return nil, errors.New("httpapi: MaxStreams, Heartbeat and StreamWriteTimeout must be positive")
	}
	if opts.RateLimit < 0 || opts.RateBurst < 0 || opts.ReadRateLimit < 0 || opts.ReadRateBurst < 0 {
		return nil, errors.New("httpapi: rate limits and bursts must be positive")
	}
	if len(opts.LogKey) == 0 {
		opts.LogKey = make([]byte, 32)
		_, _ = rand.Read(opts.LogKey)
	}
	epoch := make([]byte, 4)
	_, _ = rand.Read(epoch)
	s := &Server{e: e, log: opts.Logger, reg: opts.Registry, opts: opts, epoch: hex.EncodeToString(epoch),
		limiters: newLimiters(rate.Limit(opts.RateLimit), opts.RateBurst),
		reads:    newLimiters(rate.Limit(opts.ReadRateLimit), opts.ReadRateBurst),
		operator: sha256.Sum256([]byte(opts.OperatorToken)),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "holdfast_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{s.requests, s.latency} {
		if err := s.reg.Register(c); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the API's routes (paths start with /v1/, plus /livez, /readyz and
// /metrics).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// SetDraining makes /readyz answer 503, so load balancers stop sending traffic before
// shutdown.
func (s *Server) SetDraining() { s.draining.Store(true) }

// routes returns the routes, all listed here.
func (s *Server) routes() http.Handler {
	routes := []struct {
		method, path string
		h            http.Handler
	}{
		{"PUT", "/v1/shows/{show}", s.operatorOnly(s.putShow)},
		{"POST", "/v1/shows/{show}/resync", s.operatorOnly(s.postResync)},
		{"GET", "/v1/shows/{show}/layout", s.reading(s.getLayout)},
		{"GET", "/v1/shows/{show}/seats", s.reading(s.getSeats)},
		{"GET", "/v1/shows/{show}/events", s.reading(s.getEvents)},
		{"POST", "/v1/shows/{show}/holds", s.limited(s.postHold)},
		{"POST", "/v1/holds/extend", s.limited(s.postExtend)},
		{"POST", "/v1/holds/release", s.limited(s.postRelease)},
		{"POST", "/v1/bookings", s.limited(s.postBooking)},
		{"GET", "/v1/bookings/{id}", s.reading(s.getBooking)},
		{"DELETE", "/v1/bookings/{id}", s.limited(s.deleteBooking)},
		{"GET", "/livez", http.HandlerFunc(s.livez)},
		{"GET", "/readyz", http.HandlerFunc(s.readyz)},
		{"GET", "/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})},
		{"GET", "/openapi.yaml", http.HandlerFunc(serveOpenAPI)},
		{"GET", "/{$}", s.reading(s.getIndex)},
		{"GET", "/shows/{show}", s.reading(s.getShowPage)},
		{"GET", "/static/{file}", http.HandlerFunc(getStatic)},
	}
	mux := http.NewServeMux()
	allowed := map[string][]string{} // path -> methods, for 405 answers
	var paths []string
	for _, r := range routes {
		mux.Handle(r.method+" "+r.path, r.h)
		if allowed[r.path] == nil {
			paths = append(paths, r.path)
		}
		allowed[r.path] = append(allowed[r.path], r.method)
	}
	// A path with another method is a 405 problem naming the allowed ones (the
	// method-less pattern is less specific, so it only catches the rest); any other
	// path is a 404 problem.
	for _, p := range paths {
		methods := allowed[p]
		if slices.Contains(methods, "GET") {
			methods = append(methods, "HEAD")
		}
		allow := strings.Join(methods, ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
				r.Method+" is not allowed here; use "+allow)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, "no-such-route", "No such route", "no route matches "+r.URL.Path)
	})
	return s.observe(mux)
}

// holdJSON is a hold on the wire.
type holdJSON struct {
	Show       string    `json:"show"`
	Seats      []string  `json:"seats"`
	Token      string    `json:"token"`
	Generation int64     `json:"generation"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// bookingJSON is a booking on the wire.
type bookingJSON struct {
	ID          uuid.UUID  `json:"id"`
	Show        string     `json:"show"`
	Seats       []string   `json:"seats"`
	Generation  int64      `json:"generation"`
	Status      string     `json:"status"`
	ConfirmedAt time.Time  `json:"confirmed_at"`
	CancelledAt *time.Time `json:"cancelled_at"`
}

type seatJSON struct {
	Seat      string     `json:"seat"`
	Status    string     `json:"status"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func toHoldJSON(h engine.Hold) holdJSON {
	return holdJSON{Show: h.ShowID, Seats: h.SeatIDs, Token: h.Token, Generation: h.Generation, ExpiresAt: h.ExpiresAt.UTC()}
}

func toBookingJSON(b engine.Booking) bookingJSON {
	return bookingJSON{ID: b.ID, Show: b.ShowID, Seats: b.SeatIDs, Generation: b.Generation,
		Status: string(b.Status), ConfirmedAt: b.ConfirmedAt.UTC(), CancelledAt: b.CancelledAt}
}

// holdFromJSON turns a presented hold back into an engine Hold of this holder.
func holdFromJSON(j holdJSON, holder string) engine.Hold {
	return engine.Hold{ShowID: j.Show, SeatIDs: j.Seats, Token: j.Token, Generation: j.Generation, HolderID: holder}
}

// layoutSeatJSON is one seat of a layout on the wire.
type layoutSeatJSON struct {
	ID       string  `json:"id"`
	Section  string  `json:"section"`
	Row      string  `json:"row"`
	Position int     `json:"position"`
	Rank     int     `json:"rank"`
	X        float64 `json:"x"`
	Y        float64 `json:"y"`
}

func (s *Server) putShow(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Seats  []string         `json:"seats"`
		Layout []layoutSeatJSON `json:"layout"`
	}
	if !s.decode(w, r, s.opts.MaxShowBodyBytes, &body) {
		return
	}
	var created bool
	var err error
	switch {
	case (body.Seats == nil) == (body.Layout == nil):
		err = &engine.InvalidArgumentError{Field: "seats", Rule: `give exactly one of "seats" (seat ids) and "layout" (seats with their places)`}
	case body.Layout != nil:
		layout := make([]engine.Seat, len(body.Layout))
		for i, l := range body.Layout {
			layout[i] = engine.Seat{ID: l.ID, Section: l.Section, Row: l.Row, Position: l.Position, Rank: l.Rank, X: l.X, Y: l.Y}
		}
		created, err = s.e.EnsureShowLayout(r.Context(), r.PathValue("show"), layout)
	default:
		created, err = s.e.EnsureShow(r.Context(), r.PathValue("show"), body.Seats)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, map[string]any{"show": r.PathValue("show"), "seats": len(body.Seats) + len(body.Layout)})
}

// getLayout serves a show's venue layout. A layout never changes, so it is cacheable
// for good, and revalidation by ETag answers 304.
func (s *Server) getLayout(w http.ResponseWriter, r *http.Request) {
	seats, err := s.e.Layout(r.Context(), r.PathValue("show"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]layoutSeatJSON, len(seats))
	for i, st := range seats {
		out[i] = layoutSeatJSON{ID: st.ID, Section: st.Section, Row: st.Row, Position: st.Position, Rank: st.Rank, X: st.X, Y: st.Y}
	}
	body, err := json.Marshal(map[string]any{"show": r.PathValue("show"), "seats": out})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:12]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	if etagMatches(r.Header.Values("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}

func (s *Server) postResync(w http.ResponseWriter, r *http.Request) {
	if err := s.e.Resync(r.Context(), r.PathValue("show")); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"show": r.PathValue("show"), "resynced": true})
}

// postHold holds named seats ({"seats": [...]}) or the best available ones
// ({"count": 4, "section": "B", "adjacent": true}): exactly one of seats and count.
func (s *Server) postHold(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		Seats    []string `json:"seats"`
		TTLms    *int64   `json:"ttl_ms"`
		Count    *int     `json:"count"`
		Section  *string  `json:"section"`
		Adjacent *bool    `json:"adjacent"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	var ttl time.Duration
	if body.TTLms != nil {
		d, err := ttlFromMillis(*body.TTLms)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ttl = d
	}
	best := body.Count != nil || body.Section != nil || body.Adjacent != nil
	if best == (body.Seats != nil) {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "seats", Rule: `send exactly one of "seats" (named seats) and "count" (the best available, with "section" and "adjacent")`})
		return
	}
	var h engine.Hold
	var err error
	if best {
		if body.Count == nil {
			s.fail(w, r, &engine.InvalidArgumentError{Field: "count", Rule: "missing: how many seats"})
			return
		}
		req := engine.BestRequest{ShowID: r.PathValue("show"), Count: *body.Count, TTL: ttl, HolderID: holder}
		if body.Section != nil {
			req.Section = *body.Section
		}
		if body.Adjacent != nil {
			req.Adjacent = *body.Adjacent
		}
		h, err = s.e.HoldBest(r.Context(), req)
	} else {
		h, err = s.e.Hold(r.Context(), engine.HoldRequest{ShowID: r.PathValue("show"), SeatIDs: body.Seats, HolderID: holder, TTL: ttl})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toHoldJSON(h))
}

func (s *Server) postExtend(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		holdJSON `json:",inline"`
		TTLms    int64 `json:"ttl_ms"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	ttl, err := ttlFromMillis(body.TTLms)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h, err := s.e.Extend(r.Context(), holdFromJSON(body.holdJSON, holder), ttl)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toHoldJSON(h))
}

func (s *Server) postRelease(w http.ResponseWriter, r *http.Request, holder string) {
	var body holdJSON
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	if err := s.e.Release(r.Context(), holdFromJSON(body, holder)); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) postBooking(w http.ResponseWriter, r *http.Request, holder string) {
	var body holdJSON
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	key, ok := s.singleHeader(w, r, IdempotencyHeader)
	if !ok {
		return
	}
	b, err := s.e.Confirm(r.Context(), holdFromJSON(body, holder), engine.ConfirmOptions{IdempotencyKey: key})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if b.Replayed {
		status = http.StatusOK
	}
	writeJSON(w, status, toBookingJSON(b))
}

// ownBooking reads the booking named in the path if it belongs to the caller; another
// holder's booking is reported as not found.
func (s *Server) ownBooking(w http.ResponseWriter, r *http.Request) (engine.Booking, bool) {
	holder, ok := s.holder(w, r)
	if !ok {
		return engine.Booking{}, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, &engine.InvalidArgumentError{Field: "id", Rule: "must be a UUID"})
		return engine.Booking{}, false
	}
	b, err := s.e.Booking(r.Context(), id)
	if err == nil && b.HolderID != holder {
		err = engine.ErrNotFound
	}
	if err != nil {
		s.fail(w, r, err)
		return engine.Booking{}, false
	}
	return b, true
}

func (s *Server) getBooking(w http.ResponseWriter, r *http.Request) {
	if b, ok := s.ownBooking(w, r); ok {
		writeJSON(w, http.StatusOK, toBookingJSON(b))
	}
}

func (s *Server) deleteBooking(w http.ResponseWriter, r *http.Request, _ string) {
	b, ok := s.ownBooking(w, r)
	if !ok {
		return
	}
	if err := s.e.Cancel(r.Context(), b.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	b, err := s.e.Booking(r.Context(), b.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBookingJSON(b))
}

func (s *Server) livez(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeProblem(w, http.StatusServiceUnavailable, "draining", "Draining", "the server is shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.e.Ready(ctx); err != nil {
		s.log.WarnContext(ctx, "not ready", "error", err)
		detail := "not ready"
		if s.isOperator(r) { // the cause is for operators, not for anyone who asks
			detail = err.Error()
		}
		writeProblem(w, http.StatusServiceUnavailable, "backend-unavailable", "Backend unavailable", detail)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// singleHeader reads a header that may be sent at most once: a second one is refused
// rather than one of them silently chosen.
func (s *Server) singleHeader(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	vs := r.Header.Values(name)
	if len(vs) > 1 {
		writeProblem(w, http.StatusBadRequest, "invalid-argument", "Invalid argument",
			name+": sent "+strconv.Itoa(len(vs))+" times; send it once")
		return "", false
	}
	if len(vs) == 0 {
		return "", true
	}
	return vs[0], true
}

// holder reads the caller's identity; a request without one is refused.
func (s *Server) holder(w http.ResponseWriter, r *http.Request) (string, bool) {
	h, ok := s.singleHeader(w, r, HolderHeader)
	if !ok {
		return "", false
	}
	if h == "" {
		writeProblem(w, http.StatusBadRequest, "missing-holder", "Missing holder", "the "+HolderHeader+" header is required")
		return "", false
	}
	if len(h) > 128 { // also bounds the rate limiter's keys
		writeProblem(w, http.StatusBadRequest, "invalid-argument", "Invalid argument", HolderHeader+": at most 128 bytes")
		return "", false
	}
	return h, true
}

// limited wraps a holder's operation with its rate limit.
func (s *Server) limited(fn func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		holder, ok := s.holder(w, r)
		if !ok {
			return
		}
		if !s.limiters.get(holder).Allow() {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusTooManyRequests, "rate-limited", "Rate limited", "too many requests from this holder")
			return
		}
		fn(w, r, holder)
	}
}

// reading applies a read route's rate limit: per holder when the request names one, else per
// client address.
func (s *Server) reading(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := s.singleHeader(w, r, HolderHeader)
		if !ok {
			return
		}
		if key == "" || len(key) > 128 {
			key = "addr " + clientAddr(r)
		}
		if !s.reads.get(key).Allow() {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusTooManyRequests, "rate-limited", "Rate limited", "too many reads from this client")
			return
		}
		fn(w, r)
	}
}

// clientAddr is the request's peer address without its port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// operatorOnly guards an operator route: off (403) without a configured token, 401
// without the right bearer token. Attempts count against the caller's read limit.
func (s *Server) operatorOnly(fn http.HandlerFunc) http.HandlerFunc {
	return s.reading(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.OperatorToken == "" {
			writeProblem(w, http.StatusForbidden, "operator-routes-off", "Operator routes are off",
				"start holdfast serve with --operator-token (or HOLDFAST_OPERATOR_TOKEN) to create shows and resync over HTTP")
			return
		}
		if !s.isOperator(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast-operator"`)
			writeProblem(w, http.StatusUnauthorized, "unauthorized", "Unauthorized",
				"this route needs the operator token: Authorization: Bearer <token>")
			return
		}
		fn(w, r)
	})
}

// isOperator reports whether the request carries the operator token (compared in
// constant time, as hashes).
func (s *Server) isOperator(r *http.Request) bool {
	if s.opts.OperatorToken == "" {
		return false
	}
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 || !strings.HasPrefix(vs[0], "Bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimPrefix(vs[0], "Bearer ")))
	return subtle.ConstantTimeCompare(got[:], s.operator[:]) == 1
}

// etagMatches reports whether an If-None-Match header names etag (weakly, as RFC 9110
// asks for If-None-Match), or is "*".
func etagMatches(headers []string, etag string) bool {
	for _, h := range headers {
		for _, t := range strings.Split(h, ",") {
			t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
			if t == etag || t == "*" {
				return true
			}
		}
	}
	return false
}

// ttlFromMillis turns a request's ttl_ms into a duration, refusing what is not
// positive or would overflow one.
func ttlFromMillis(ms int64) (time.Duration, error) {
	if ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, &engine.InvalidArgumentError{Field: "ttl_ms", Rule: strconv.FormatInt(ms, 10) + " is not a positive number of milliseconds that fits a duration"}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// decode reads one JSON object of at most limit bytes. Strict means strict: unknown
// fields, field names in another case, duplicate names and trailing data are refused,
// and the refusal says where.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "request-too-large", "Request too large",
				"the body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
			return false
		}
		writeProblem(w, http.StatusBadRequest, "malformed-request", "Malformed request", "the body could not be read")
		return false
	}
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		writeProblem(w, http.StatusBadRequest, "malformed-request", "Malformed request",
			"the body is not the expected JSON object: "+strings.TrimPrefix(err.Error(), "json: "))
		return false
	}
	return true
}

// problem maps an engine error to its status and stable type.
func problem(err error) (status int, typ, title string) {
	switch {
	case errors.Is(err, engine.ErrInvalidArgument):
		return http.StatusBadRequest, "invalid-argument", "Invalid argument"
	case errors.Is(err, engine.ErrNotFound):
		return http.StatusNotFound, "not-found", "Not found"
	case errors.Is(err, engine.ErrSeatsUnavailable):
		return http.StatusConflict, "seats-unavailable", "Seats unavailable"
	case errors.Is(err, engine.ErrStaleGeneration):
		return http.StatusConflict, "stale-generation", "Stale generation"
	case errors.Is(err, engine.ErrHolderLimit):
		return http.StatusConflict, "holder-limit", "Holder seat limit reached"
	case errors.Is(err, engine.ErrHoldLost):
		return http.StatusGone, "hold-lost", "Hold lost"
	case errors.Is(err, engine.ErrIdempotencyKeyReused):
		return http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency key reused"
	case errors.Is(err, engine.ErrExtendLimit):
		return http.StatusUnprocessableEntity, "extend-limit", "Hold extend limit reached"
	case errors.Is(err, engine.ErrUnavailable):
		return http.StatusServiceUnavailable, "backend-unavailable", "Backend unavailable"
	case errors.Is(err, engine.ErrOverloaded):
		return http.StatusServiceUnavailable, "overloaded", "Overloaded"
	default:
		return http.StatusInternalServerError, "internal", "Internal error"
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, title := problem(err)
	detail := err.Error()
	switch {
	case typ == "overloaded": // shed on purpose: say why, log quietly
		w.Header().Set("Retry-After", "1")
		s.log.InfoContext(r.Context(), "request shed", "route", r.Pattern, "error", err)
	case status >= 500:
		s.log.ErrorContext(r.Context(), "request failed", "route", r.Pattern, "error", err)
		w.Header().Set("Retry-After", "1")
		detail = "a backend failed; retry later"
		if status == http.StatusInternalServerError {
			detail = "internal error"
		}
	}
	p := problemJSON{Type: problemPrefix + typ, Title: title, Status: status, Detail: detail}
	var iae *engine.InvalidArgumentError
	if errors.As(err, &iae) {
		// Name what the client sent, not the Go field it became.
		p.Field = iae.Field
		if name, ok := wireNames[iae.Field]; ok {
			p.Field = name
		}
		p.Detail = p.Field + ": " + iae.Rule
	}
	var spent *engine.HoldSpentError
	if errors.As(err, &spent) && spent.BookingID != uuid.Nil {
		p.Booking = "/v1/bookings/" + spent.BookingID.String() // the caller's own booking
	}
	var sue *engine.SeatsUnavailableError
	if errors.As(err, &sue) {
		p.Seats = sue.SeatIDs
		if len(sue.SeatIDs) == 0 {
			p.Available = &sue.Available
		}
	}
	writeJSONType(w, status, "application/problem+json", p)
}

// wireNames maps the engine's field names in an InvalidArgumentError to what an HTTP
// client sends: a JSON member, a path segment or a header.
var wireNames = map[string]string{
	"HoldRequest.ShowID": "show", "Hold.ShowID": "show", "showID": "show",
	"HoldRequest.SeatIDs": "seats", "Hold.SeatIDs": "seats", "seatIDs": "seats",
	"HoldRequest.TTL": "ttl_ms", "ttl": "ttl_ms",
	"BestRequest.ShowID": "show", "BestRequest.Count": "count", "BestRequest.TTL": "ttl_ms", "BestRequest.Section": "section",
	"Hold.Token": "token", "Hold.Generation": "generation",
	"HolderID": HolderHeader, "ConfirmOptions.IdempotencyKey": IdempotencyHeader,
}

// problemPrefix starts every problem type; the rest is stable per error.
const problemPrefix = "urn:holdfast:problem:"

// problemJSON is an RFC 9457 problem.
type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Field  string `json:"field,omitempty"` // the member, path segment or header at fault
	// Booking points at the booking a presented hold made already (to its holder).
	Booking string   `json:"booking,omitempty"`
	Seats   []string `json:"seats,omitempty"`
	// Available is, when a best-available hold found nothing, how many seats the best
	// section still had free.
	Available *int `json:"available,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	writeJSONType(w, status, "application/problem+json", problemJSON{Type: problemPrefix + typ, Title: title, Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONType(w, status, "application/json", v)
}

func writeJSONType(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (flushes and write
// deadlines of event streams).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// observe logs one line per request (route, status, duration, holder hashed; never a
// token, key or body) and counts it by route and status.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		d := time.Since(start)
		s.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		s.latency.WithLabelValues(route).Observe(d.Seconds())
		attrs := []any{"route", route, "status", rec.status, "duration_ms", float64(d.Microseconds()) / 1000}
		if h := r.Header.Get(HolderHeader); h != "" {
			attrs = append(attrs, "holder", s.hashHolder(h))
		}
		s.log.Log(r.Context(), s.opts.RequestLogLevel, "http request", attrs...)
	})
}

// hashHolder is what logs show of a holder: enough to correlate, not to identify. It
// is keyed (HMAC with Options.LogKey), so a list of guessed ids cannot be matched.
func (s *Server) hashHolder(h string) string {
	m := hmac.New(sha256.New, s.opts.LogKey)
	m.Write([]byte(h))
	return hex.EncodeToString(m.Sum(nil)[:6])
}

// limiters keeps one token bucket per holder, dropping those idle for a while.
type limiters struct {
	mu    sync.Mutex
	limit rate.Limit
	burst int
	m     map[string]*limiterEntry
	swept time.Time
}

type limiterEntry struct {
	l    *rate.Limiter
	seen time.Time
}

func newLimiters(limit rate.Limit, burst int) *limiters {
	return &limiters{limit: limit, burst: burst, m: map[string]*limiterEntry{}, swept: time.Now()}
}

const limiterIdle = 10 * time.Minute

func (l *limiters) get(holder string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.swept) > limiterIdle {
		for k, e := range l.m {
			if now.Sub(e.seen) > limiterIdle {
				delete(l.m, k)
			}
		}
		l.swept = now
	}
	e, ok := l.m[holder]
	if !ok {
		e = &limiterEntry{l: rate.NewLimiter(l.limit, l.burst)}
		l.m[holder] = e
	}
	e.seen = now
	return e.l
}
