// Package httpapi serves a holdfast engine as JSON over HTTP: the routes of the README's
// HTTP API, RFC 9457 problem responses, limits per client address and per holder,
// signed holders (JWT), request logs without secrets, and metrics. holdfast serve uses
// it; a booking backend can mount a [Server] (an [http.Handler]) in its own mux,
// behind its own authentication, setting the Holder-Id header from its session.
// [Server.Admin] serves what is for operators only (metrics, show creation, the
// causes of unreadiness) on a listener of their own.
package httpapi

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/holdfast/holdfast/engine"
)

// OpenAPI is the OpenAPI 3.1 document of the API (httpapi/openapi.yaml, its one copy), served at
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

// IdempotencyHeader carries a write's idempotency key (engine/idempotency.go).
const IdempotencyHeader = "Idempotency-Key"

// Options tune a Server. Zero values mean the defaults.
type Options struct {
	// Logger receives one line per request. Defaults to discarding. Its lines carry
	// each request's id and peer (see LogHandler).
	Logger *slog.Logger
	// Registry receives the HTTP metrics and serves /metrics on the admin handler (the
	// engine's metrics should be registered on it too). Defaults to a new registry.
	Registry *prometheus.Registry
	// TracerProvider, when set, gets a server span per request (the engine's spans
	// nest in it), with the request id as attribute holdfast.request_id.
	TracerProvider trace.TracerProvider

	// HolderAuth, when set, makes every holder-scoped request carry a signed holder
	// (Authorization: Bearer <JWT>, the holder its sub); see HolderSecretFile and
	// HolderPublicKeyFile. Without it the Holder-Id header is believed, and the server
	// belongs behind a backend that sets it.
	HolderAuth *HolderAuth
	// DemoIdentity serves POST /v1/demo/identity, which gives anyone a fresh signed
	// demo holder (a few per address): for holdfast serve --demo-show with an HS256
	// secret, so that the seat-map page works with signing on. Never in production.
	DemoIdentity bool

	// TrustedProxies are the peers whose X-Forwarded-For is believed: a request from
	// one is limited by the address that header names (the rightmost not trusted).
	TrustedProxies []netip.Prefix
	// RateLimit is each holder's sustained rate of holds and confirmations per second.
	// Defaults to 20.
	RateLimit float64
	// RateBurst is each holder's burst. Defaults to 40.
	RateBurst int
	// AddrRateLimit is each client address's sustained rate of holds and confirmations
	// (all its holders together). Defaults to 100.
	AddrRateLimit float64
	// AddrRateBurst is each client address's burst of writes. Defaults to 200.
	AddrRateBurst int
	// ReadRateLimit is the sustained rate of reads (seat maps, bookings) per second
	// per client address, and per holder when a request names one. A load test from
	// one address raises it. Defaults to 50.
	ReadRateLimit float64
	// ReadRateBurst is the burst of reads. Defaults to 100.
	ReadRateBurst int
	// MaxSeatsPerAddress bounds the seats held at once through this server from one
	// client address in one show, whatever holder ids it uses (409 address-limit past
	// it). Defaults to 100.
	MaxSeatsPerAddress int
	// UnknownShowRate is how many requests per second for shows that do not exist one
	// address may make (each is a database query); past it, 429. Defaults to 5 (burst
	// 20).
	UnknownShowRate float64
	// LimiterSize bounds each table of limits (buckets per address, per holder, …): the
	// least recently seen go first. Defaults to 65,536.
	LimiterSize int
	// MaxBodyBytes bounds request bodies, except show creation. Defaults to 16 KiB.
	MaxBodyBytes int64
	// MaxShowBodyBytes bounds a show creation body. Defaults to 4 MiB.
	MaxShowBodyBytes int64

	// OperatorToken is the bearer token of the operator routes (show creation,
	// resync). Empty, with no OperatorTokenFile, turns those routes off (403).
	OperatorToken string
	// OperatorTokenFile holds the operator token instead, read again when it changes
	// (rotation without a restart).
	OperatorTokenFile string
	// OperatorFailures is how many wrong operator tokens an address may send in a
	// burst before it is refused (429) for a while (one more per 10 s). Defaults to 5.
	OperatorFailures int

	// RequestLogLevel is the level of the one line logged per request. Defaults to
	// info (the zero slog.Level). Refusals (429, the stream caps' 503), unknown paths
	// (404, 405) and probes (/livez, /readyz) are each logged at most 5 a second (a
	// line says how many of its kind were skipped before it); all are counted in
	// holdfast_http_requests_total, refusals in holdfast_http_refused_total too.
	RequestLogLevel slog.Level
	// MaxConns bounds the connections Server.Listener has open at once; past it a new
	// one waits to be accepted, and from 7/8 of it on idle keep-alive connections are
	// closed. Defaults to 4,096.
	MaxConns int
	// MaxConnsPerAddress bounds one client address's open connections (an IPv6
	// address's /64; a trusted proxy's are not counted): past it Server.Listener closes
	// a new one as it accepts it. Keep it above MaxStreamsPerAddress. Defaults to 64.
	MaxConnsPerAddress int
	// MaxStreams bounds the seat-map event streams open at once; past it a new one is
	// refused with 503 and Retry-After. Keep it well under the connection limit, so
	// that streams never starve other requests. Defaults to 1,000.
	MaxStreams int
	// MaxStreamsPerAddress bounds one client address's open event streams (429 past
	// it). Defaults to 16.
	MaxStreamsPerAddress int
	// StreamConnectRate bounds the event streams opened per second, from all clients
	// together (503 with Retry-After past it): a reconnect storm, each connect a
	// snapshot, cannot crowd out bookings. Defaults to 200 (burst 200).
	StreamConnectRate float64
	// Heartbeat is how often an idle event stream gets a comment line, so that
	// proxies keep it open and a client notices a dead one. Defaults to 15 seconds.
	Heartbeat time.Duration
	// StreamWriteTimeout bounds each write to an event stream: a client that does not
	// read for that long is disconnected (it resumes with Last-Event-ID). Stream
	// connections get a small send buffer (StreamSendBuffer), so a reader that stops
	// fills it fast and is cut. Defaults to 10 seconds.
	StreamWriteTimeout time.Duration
	// StreamSendBuffer is the kernel send buffer of an event stream's connection, in
	// bytes (needs Server.ConnContext on the http.Server). Defaults to 32 KiB.
	StreamSendBuffer int
	// LogKey keys the hash that logs show of a holder or an address (HMAC-SHA-256),
	// so that a list of guessed ids cannot be matched against logs. Defaults to 32
	// random bytes per process.
	LogKey []byte
	// TLS says the server is reached over TLS: responses carry HSTS.
	TLS bool
}

// Server is the HTTP face of one engine.
type Server struct {
	e      *engine.Engine
	log    *slog.Logger
	reg    *prometheus.Registry
	tracer trace.Tracer // nil without Options.TracerProvider
	opts   Options

	addrWrites, holderWrites *buckets // holds and confirmations
	addrReads, holderReads   *buckets // reads
	unknownShows             *buckets // requests for shows that do not exist, per address
	opFailures               *buckets // wrong operator tokens, per address
	demoIDs                  *buckets // demo identities given, per address
	logSamples               [logClasses]logSampler
	streamConnects           *rate.Limiter // event streams opened, all clients
	connect                  *connectRefusal
	addrHolds                *addrHolds
	opToken                  *fileValue[string] // nil without OperatorTokenFile

	conns atomic.Pointer[connLimiter] // the public listener, once Listener wrapped it

	draining atomic.Bool
	epoch    string      // names this process's seat-map versions (ETags, event ids)
	maps     mapCache    // seat maps, encoded once per version
	layouts  layoutCache // layouts, encoded once per show
	streams  streamSlots // open event streams
	events   eventCache  // SSE events formatted once for every stream
	ready    readyCache  // the public /readyz answer, for a second

	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refused  *prometheus.CounterVec
	handler  http.Handler // the public routes, with logging and metrics
	admin    http.Handler // the admin routes, likewise
}

// New returns a Server over e.
func New(e *engine.Engine, opts Options) (*Server, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	epoch := make([]byte, 4)
	_, _ = rand.Read(epoch)
	size := opts.LimiterSize
	s := &Server{e: e, log: opts.Logger, reg: opts.Registry, opts: opts, epoch: hex.EncodeToString(epoch),
		addrWrites:     newBuckets(rate.Limit(opts.AddrRateLimit), opts.AddrRateBurst, size),
		holderWrites:   newBuckets(rate.Limit(opts.RateLimit), opts.RateBurst, size),
		addrReads:      newBuckets(rate.Limit(opts.ReadRateLimit), opts.ReadRateBurst, size),
		holderReads:    newBuckets(rate.Limit(opts.ReadRateLimit), opts.ReadRateBurst, size),
		unknownShows:   newBuckets(rate.Limit(opts.UnknownShowRate), max(1, int(4*opts.UnknownShowRate)), size),
		opFailures:     newBuckets(rate.Every(10*time.Second), opts.OperatorFailures, size),
		demoIDs:        newBuckets(rate.Every(20*time.Second), 3, size),
		streamConnects: rate.NewLimiter(rate.Limit(opts.StreamConnectRate), max(1, int(opts.StreamConnectRate))),
		addrHolds:      newAddrHolds(opts.MaxSeatsPerAddress, size),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "holdfast_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"route"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_http_refused_total", Help: "Requests refused by a limit (429 and stream caps), by the limit.",
		}, []string{"reason"}),
	}
	for i := range s.logSamples {
		s.logSamples[i].lim = rate.NewLimiter(5, 5)
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer("github.com/holdfast/holdfast/httpapi")
	}
	if opts.OperatorTokenFile != "" {
		if err := s.watchOperatorToken(); err != nil {
			return nil, err
		}
	}
	if err := s.register(); err != nil {
		return nil, err
	}
	s.handler, s.admin = s.routes()
	s.connect = s.newConnectRefusal()
	return s, nil
}

// setDefaults gives every unset field of opts its default, and checks the rest.
func (opts *Options) setDefaults() error {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if _, ok := opts.Logger.Handler().(requestLogHandler); !ok {
		opts.Logger = slog.New(LogHandler(opts.Logger.Handler()))
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	for _, d := range []struct {
		v   *float64
		def float64
	}{{&opts.RateLimit, 20}, {&opts.AddrRateLimit, 100}, {&opts.ReadRateLimit, 50}, {&opts.UnknownShowRate, 5}, {&opts.StreamConnectRate, 200}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return errors.New("httpapi: rate limits must be positive")
		}
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&opts.RateBurst, 40}, {&opts.AddrRateBurst, 200}, {&opts.ReadRateBurst, 100}, {&opts.MaxSeatsPerAddress, 100},
		{&opts.LimiterSize, 65_536}, {&opts.OperatorFailures, 5}, {&opts.MaxStreams, 1000}, {&opts.MaxStreamsPerAddress, 16},
		{&opts.StreamSendBuffer, 32 << 10}, {&opts.MaxConns, 4096}, {&opts.MaxConnsPerAddress, 64}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return errors.New("httpapi: bursts, caps and sizes must be positive")
		}
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 16 << 10
	}
	if opts.MaxShowBodyBytes == 0 {
		opts.MaxShowBodyBytes = 4 << 20
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.StreamWriteTimeout == 0 {
		opts.StreamWriteTimeout = 10 * time.Second
	}
	if opts.Heartbeat < 0 || opts.StreamWriteTimeout < 0 {
		return errors.New("httpapi: Heartbeat and StreamWriteTimeout must be positive")
	}
	if opts.DemoIdentity && (opts.HolderAuth == nil || !opts.HolderAuth.CanSign()) {
		return errors.New("httpapi: DemoIdentity needs HolderAuth with an HS256 secret (a public key cannot sign)")
	}
	if len(opts.LogKey) == 0 {
		opts.LogKey = make([]byte, 32)
		_, _ = rand.Read(opts.LogKey)
	}
	return nil
}

// watchOperatorToken reads the operator token from Options.OperatorTokenFile, and again
// whenever the file changes (a bad one keeps the last good token).
func (s *Server) watchOperatorToken() error {
	tok, err := newFileValue(func(c [][]byte) (string, error) {
		t := strings.TrimSpace(string(c[0]))
		if len(t) < 16 {
			return "", errors.New("the operator token must be at least 16 characters")
		}
		return t, nil
	}, func(err error) {
		s.log.Error("operator token file not reloaded; the last good token stays", "error", err)
	}, s.opts.OperatorTokenFile)
	if err != nil {
		return fmt.Errorf("httpapi: operator token file: %w", err)
	}
	s.opToken = tok
	return nil
}

// register registers the server's collectors with Options.Registry.
func (s *Server) register() error {
	streams := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "holdfast_http_event_streams", Help: "Seat-map event streams open now.",
	}, func() float64 { return float64(s.streams.open()) })
	conns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "holdfast_http_connections", Help: "Client connections open now on the public listener.",
	}, func() float64 { return float64(s.openConns()) })
	for _, c := range []prometheus.Collector{s.requests, s.latency, s.refused, streams, conns} {
		if err := s.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ServeHTTP serves the API's public routes (paths under /v1/, the seat-map page,
// /livez and a minimal /readyz).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.refusedConnect(w, r) {
		return
	}
	s.handler.ServeHTTP(w, r)
}

// Admin is the handler of the admin listener: /metrics, the operator routes (show
// creation, resync; the operator token still required) and /readyz with the cause of
// unreadiness. holdfast serve puts it on --admin-addr (loopback by default); it must
// not be reachable from where buyers are.
func (s *Server) Admin() http.Handler { return s.admin }

// ConnContext, set as an http.Server's ConnContext, lets event streams shrink their
// connection's send buffer (Options.StreamSendBuffer), so that a client that stops
// reading is found out and cut within StreamWriteTimeout.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

type connKey struct{}

// SetDraining makes /readyz answer 503, so load balancers stop sending traffic before
// shutdown.
func (s *Server) SetDraining() { s.draining.Store(true) }
