// Package httpapi serves a holdfast engine as JSON over HTTP: the routes of the README's
// HTTP API, RFC 9457 problem responses, per-holder rate limiting, request logs without
// secrets, and metrics. holdfast serve uses it; a booking backend can mount a [Server]
// (an [http.Handler]) in its own mux, behind its own authentication, setting the
// Holder-Id header from its session.
package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
