// Package httpapi serves the engine as JSON over HTTP: the routes of DESIGN.md, RFC 9457
// problem responses, per-holder rate limiting, request logs without secrets, metrics.
package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/holdfast/holdfast/engine"
)

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
}

// Server is the HTTP face of one engine.
type Server struct {
	e        *engine.Engine
	log      *slog.Logger
	reg      *prometheus.Registry
	opts     Options
	limiters *limiters
	draining atomic.Bool

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
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
	s := &Server{e: e, log: opts.Logger, reg: opts.Registry, opts: opts,
		limiters: newLimiters(rate.Limit(opts.RateLimit), opts.RateBurst),
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
	return s, nil
}

// SetDraining makes /readyz answer 503, so load balancers stop sending traffic before
// shutdown.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Handler returns the routes, all listed here.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/shows/{show}", s.putShow)
	mux.HandleFunc("GET /v1/shows/{show}/seats", s.getSeats)
	mux.HandleFunc("POST /v1/shows/{show}/holds", s.limited(s.postHold))
	mux.HandleFunc("POST /v1/holds/extend", s.limited(s.postExtend))
	mux.HandleFunc("POST /v1/holds/release", s.limited(s.postRelease))
	mux.HandleFunc("POST /v1/bookings", s.limited(s.postBooking))
	mux.HandleFunc("GET /v1/bookings/{id}", s.getBooking)
	mux.HandleFunc("DELETE /v1/bookings/{id}", s.deleteBooking)
	mux.HandleFunc("GET /livez", s.livez)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
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

func (s *Server) putShow(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Seats []string `json:"seats"`
	}
	if !s.decode(w, r, s.opts.MaxShowBodyBytes, &body) {
		return
	}
	created, err := s.e.EnsureShow(r.Context(), r.PathValue("show"), body.Seats)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, map[string]any{"show": r.PathValue("show"), "seats": len(body.Seats)})
}

func (s *Server) getSeats(w http.ResponseWriter, r *http.Request) {
	states, err := s.e.Seats(r.Context(), r.PathValue("show"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]seatJSON, len(states))
	for i, st := range states {
		out[i] = seatJSON{Seat: st.SeatID, Status: string(st.Status), ExpiresAt: st.ExpiresAt}
	}
	writeJSON(w, http.StatusOK, map[string]any{"seats": out})
}

func (s *Server) postHold(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		Seats []string `json:"seats"`
		TTLms *int64   `json:"ttl_ms"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	req := engine.HoldRequest{ShowID: r.PathValue("show"), SeatIDs: body.Seats, HolderID: holder}
	if body.TTLms != nil {
		if *body.TTLms <= 0 {
			s.fail(w, r, &engine.InvalidArgumentError{Field: "ttl_ms", Rule: "must be positive"})
			return
		}
		req.TTL = time.Duration(*body.TTLms) * time.Millisecond
	}
	h, err := s.e.Hold(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toHoldJSON(h))
}

func (s *Server) postExtend(w http.ResponseWriter, r *http.Request, holder string) {
	var body struct {
		holdJSON
		TTLms int64 `json:"ttl_ms"`
	}
	if !s.decode(w, r, s.opts.MaxBodyBytes, &body) {
		return
	}
	h, err := s.e.Extend(r.Context(), holdFromJSON(body.holdJSON, holder), time.Duration(body.TTLms)*time.Millisecond)
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
	b, err := s.e.Confirm(r.Context(), holdFromJSON(body, holder), engine.ConfirmOptions{IdempotencyKey: r.Header.Get(IdempotencyHeader)})
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

func (s *Server) deleteBooking(w http.ResponseWriter, r *http.Request) {
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
		writeProblem(w, http.StatusServiceUnavailable, "backend-unavailable", "Backend unavailable", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// holder reads the caller's identity; a request without one is refused.
func (s *Server) holder(w http.ResponseWriter, r *http.Request) (string, bool) {
	h := r.Header.Get(HolderHeader)
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

// decode reads one JSON object of at most limit bytes, refusing unknown fields and
// trailing data.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "request-too-large", "Request too large",
				"the body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
			return false
		}
		writeProblem(w, http.StatusBadRequest, "malformed-request", "Malformed request", "the body is not the expected JSON object")
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
	default:
		return http.StatusInternalServerError, "internal", "Internal error"
	}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, title := problem(err)
	detail := err.Error()
	if status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed", "route", r.Pattern, "error", err)
		w.Header().Set("Retry-After", "1")
		detail = "a backend failed; retry later"
		if status == http.StatusInternalServerError {
			detail = "internal error"
		}
	}
	p := problemJSON{Type: problemPrefix + typ, Title: title, Status: status, Detail: detail}
	var sue *engine.SeatsUnavailableError
	if errors.As(err, &sue) {
		p.Seats = sue.SeatIDs
	}
	writeJSONType(w, status, "application/problem+json", p)
}

// problemPrefix starts every problem type; the rest is stable per error.
const problemPrefix = "urn:holdfast:problem:"

// problemJSON is an RFC 9457 problem.
type problemJSON struct {
	Type   string   `json:"type"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail,omitempty"`
	Seats  []string `json:"seats,omitempty"`
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
			attrs = append(attrs, "holder", hashHolder(h))
		}
		s.log.InfoContext(r.Context(), "http request", attrs...)
	})
}

// hashHolder is what logs show of a holder: enough to correlate, not to identify.
func hashHolder(h string) string {
	sum := sha256.Sum256([]byte("holdfast-log\x00" + h))
	return hex.EncodeToString(sum[:6])
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
