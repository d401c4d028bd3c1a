package httpapi

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

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
