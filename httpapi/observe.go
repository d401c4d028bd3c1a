package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// RequestIDHeader carries each response's request id: the same id is on every log
// line of the request and on its trace.
const RequestIDHeader = "X-Request-Id"

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

// requestInfo is what every log line of a request carries, kept in its context.
type requestInfo struct {
	id     string // random, per request
	addr   string // the client address (limits key on it)
	sample logClass
	// peer is what logs show of the address, a keyed hash: computed for the first line
	// logged, so that a request that logs nothing (a sampled refusal) costs no hash.
	peer func() string
}

// logClass names the requests whose line is sampled: floods of them (refusals, unknown
// paths, probes) are counted in full in the metrics and logged a few a second.
type logClass int

const (
	logAlways    logClass = iota
	logRefused            // refused by a limit (429, the stream caps' 503)
	logUnmatched          // no route (404) or not its method (405)
	logProbe              // /livez, /readyz
	logClasses
)

// logSampler lets through a class's lines at its rate and counts those it skips.
type logSampler struct {
	lim     *rate.Limiter
	skipped atomic.Int64
}

// sampleLog marks r's log line as one of class, to be sampled.
func sampleLog(r *http.Request, class logClass) {
	if ri, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		ri.sample = class
	}
}

// logged reports whether a line of class goes out, and how many of its class were
// skipped since the last that did.
func (s *Server) logged(class logClass) (ok bool, skipped int64) {
	if class == logAlways {
		return true, 0
	}
	ls := &s.logSamples[class]
	if !ls.lim.Allow() {
		ls.skipped.Add(1)
		return false, 0
	}
	return true, ls.skipped.Swap(0)
}

type requestInfoKey struct{}

// clientAddrOf is the client address observe found for r.
func clientAddrOf(r *http.Request) string {
	if ri, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		return ri.addr
	}
	return r.RemoteAddr
}

// LogHandler wraps a slog handler so that every line logged with a request's context
// (the server's and the engine's) carries its request_id and peer. holdfast serve
// wraps its one logger with it.
func LogHandler(h slog.Handler) slog.Handler { return requestLogHandler{h} }

type requestLogHandler struct{ slog.Handler }

func (h requestLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ri, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
		r.AddAttrs(slog.String("request_id", ri.id), slog.String("peer", ri.peer()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestLogHandler{h.Handler.WithAttrs(as)}
}

func (h requestLogHandler) WithGroup(name string) slog.Handler {
	return requestLogHandler{h.Handler.WithGroup(name)}
}

// observe gives each request its id and client address, sets the headers every
// response carries, logs one line per request (route, status, duration, peer and
// holder hashed; never a token, key or body; refusals, unknown paths and probes
// sampled) and counts it by route
// and status.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		addr := s.clientAddr(r)
		ri := &requestInfo{id: newRequestID(), addr: addr, peer: sync.OnceValue(func() string { return s.hashHolder("addr " + addr) })}
		ctx := context.WithValue(r.Context(), requestInfoKey{}, ri)
		var span trace.Span
		if s.tracer != nil {
			ctx, span = s.tracer.Start(ctx, "http", trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("holdfast.request_id", ri.id), attribute.String("http.request.method", r.Method)))
		}
		orig := r
		r = r.WithContext(ctx)
		h := w.Header()
		h.Set(RequestIDHeader, ri.id)
		s.setCommonHeaders(h)
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		orig.Pattern = r.Pattern // a wrapper outside sees the route, as with a bare ServeMux
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		d := time.Since(start)
		if span != nil {
			span.SetName("http " + route)
			span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", rec.status))
			span.End()
		}
		s.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
		s.latency.WithLabelValues(route).Observe(d.Seconds())
		if rec.status == http.StatusTooManyRequests {
			ri.sample = logRefused
		}
		ok, skipped := s.logged(ri.sample)
		if !ok {
			return // a flood of refusals or probes is counted (the metrics above), logged sampled
		}
		attrs := []any{"route", route, "status", rec.status, "duration_ms", float64(d.Microseconds()) / 1000}
		if skipped > 0 {
			attrs = append(attrs, "skipped", skipped) // lines of its kind not logged since the last
		}
		if h := r.Header.Get(HolderHeader); h != "" {
			attrs = append(attrs, "holder", s.hashHolder(h))
		}
		s.log.Log(r.Context(), s.opts.RequestLogLevel, "http request", attrs...)
	})
}

// setCommonHeaders sets the headers every response carries, but its request id.
func (s *Server) setCommonHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", apiCSP) // pages set their own, stricter for scripts
	h.Set("Referrer-Policy", "no-referrer")
	if s.opts.TLS {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
}

// newRequestID is a random request id, 16 hex digits: from the runtime's generator
// (ChaCha8, seeded by the system), so that it costs no system call.
func newRequestID() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// apiCSP is the Content-Security-Policy of every response that is not a page: nothing
// may load from it, and no origin may frame it.
const apiCSP = "default-src 'none'; frame-ancestors 'none'"

// hashHolder is what logs show of a holder (or an address): enough to correlate, not
// to identify. It is keyed (HMAC with Options.LogKey), so a list of guessed ids
// cannot be matched.
func (s *Server) hashHolder(h string) string {
	m := hmac.New(sha256.New, s.opts.LogKey)
	m.Write([]byte(h))
	return hex.EncodeToString(m.Sum(nil)[:6])
}
