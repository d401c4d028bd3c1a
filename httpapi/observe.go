package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

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
