package httpapi

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Limits. Every limit is per client address, always; a holder's bucket is a second
// one on top, never the only one (a holder id is whatever an unsigned client says),
// and charged only once the holder is proven (see charged).
// Each table of buckets is a size-capped LRU, so a flood of fresh ids or addresses
// costs a bounded amount of memory: the least recently seen bucket goes first.

// buckets keeps one token bucket per key.
type buckets struct {
	limit rate.Limit
	burst int
	m     *lru.Cache[string, *rate.Limiter]
}

func newBuckets(limit rate.Limit, burst, size int) *buckets {
	m, _ := lru.New[string, *rate.Limiter](size) // size > 0: New checks it
	return &buckets{limit: limit, burst: burst, m: m}
}

func (b *buckets) get(key string) *rate.Limiter {
	if l, ok := b.m.Get(key); ok {
		return l
	}
	l := rate.NewLimiter(b.limit, b.burst)
	if prev, ok, _ := b.m.PeekOrAdd(key, l); ok {
		return prev
	}
	return l
}

// allow takes a token from key's bucket.
func (b *buckets) allow(key string) bool { return b.get(key).Allow() }

// has reports whether key's bucket has a token, without taking it (for limits on
// outcomes: a failure takes the token afterwards).
func (b *buckets) has(key string) bool {
	l, ok := b.m.Peek(key)
	return !ok || l.Tokens() >= 1
}

// clientAddr is the request's client address: its peer, or, when the peer is a
// trusted proxy, the rightmost X-Forwarded-For address that is not one.
func (s *Server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !s.trusted(peer) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a malformed hop: what is left of it cannot be believed
		}
		if !s.trusted(a) {
			return a.Unmap().String()
		}
	}
	return host
}

func (s *Server) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refuse answers 429 for a limit (reason names it in the metric), with Retry-After.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, reason, detail string) {
	s.refusal(w, r, reason, http.StatusTooManyRequests, "1", "rate-limited", "Rate limited", detail)
}

// refusal answers a request a limit refused: counted by reason, its log line sampled,
// and a client's connection closed (a refused client does not keep a connection idle
// for its next try; a reconnect costs it more than us). A trusted proxy's connection
// stays open: it carries other clients, and closing it would only make the proxy
// connect again for the next of them.
func (s *Server) refusal(w http.ResponseWriter, r *http.Request, reason string, status int, retryAfter, typ, title, detail string) {
	s.refused.WithLabelValues(reason).Inc()
	sampleLog(r, logRefused)
	h := w.Header()
	h.Set("Retry-After", retryAfter)
	if !s.viaTrustedProxy(r) {
		h.Set("Connection", "close")
	}
	writeProblem(w, status, typ, title, detail)
}

// viaTrustedProxy reports whether r came on a trusted proxy's connection.
func (s *Server) viaTrustedProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && len(s.opts.TrustedProxies) > 0 && s.trusted(ap.Addr())
}

// connectRefusal is the answer to an event stream connect past StreamConnectRate,
// made once: a reconnect storm's refusals are answered before the routes (see
// refusedConnect).
type connectRefusal struct {
	// header is every response's headers and the refusal's, shared read-only; proxied
	// the same without Connection: close (see refusal).
	header, proxied http.Header
	body            []byte
	refused         prometheus.Counter // holdfast_http_refused_total{reason="stream-connects"}
	requests        prometheus.Counter // holdfast_http_requests_total of the route, 503
	latency         prometheus.Observer
}

const (
	eventsRoute   = "GET /v1/shows/{show}/events"
	connectDetail = "too many event streams opened this second; retry"
)

func (s *Server) newConnectRefusal() *connectRefusal {
	h := http.Header{}
	s.setCommonHeaders(h)
	h.Set("Retry-After", "2")
	h.Set("Content-Type", "application/problem+json")
	proxied := h.Clone()
	h.Set("Connection", "close")
	body, _ := json.Marshal(problemJSON{Type: problemPrefix + "too-many-streams", Title: "Too many event streams",
		Status: http.StatusServiceUnavailable, Detail: connectDetail})
	body = append(body, '\n')
	return &connectRefusal{header: h, proxied: proxied, body: body, refused: s.refused.WithLabelValues("stream-connects"),
		requests: s.requests.WithLabelValues(eventsRoute, "503"), latency: s.latency.WithLabelValues(eventsRoute)}
}

// refusedConnect answers an event stream connect that StreamConnectRate refuses
// before anything else runs (no request id context, route, limiter table, JSON
// encoding or log line; the answer's bytes are made once): in a reconnect storm
// refusals are most requests, and each must cost the honest ones little. It reports
// whether it answered. Only while refusals' log lines are being skipped: the one
// that is sampled takes the routes (and is refused there, logged).
func (s *Server) refusedConnect(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet || !isEventsPath(r.URL.Path) || s.streamConnects.Tokens() >= 1 ||
		s.logSamples[logRefused].lim.Tokens() >= 1 {
		return false
	}
	start := time.Now()
	c := s.connect
	h, answer := w.Header(), c.header
	if s.viaTrustedProxy(r) {
		answer = c.proxied
	}
	for k, v := range answer {
		h[k] = v
	}
	h[RequestIDHeader] = []string{newRequestID()}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(c.body)
	s.logSamples[logRefused].skipped.Add(1)
	c.refused.Inc()
	c.requests.Inc()
	c.latency.Observe(time.Since(start).Seconds())
	return true
}

// isEventsPath reports whether p is a show's seat-map event stream,
// /v1/shows/{show}/events.
func isEventsPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v1/shows/")
	if !ok {
		return false
	}
	show, ok := strings.CutSuffix(rest, "/events")
	return ok && show != "" && !strings.Contains(show, "/")
}

// limit is a table of buckets and how a refusal by it is named.
type limit struct {
	b              *buckets
	reason, detail string
}

// charged wraps a holder's operation with its limits: the client address's bucket,
// then, once the holder is proven (a valid token with signed holders), the holder's.
// Nothing is charged to a holder before that: a request that only names a holder
// spends none of that holder's allowance.
func (s *Server) charged(addr, holder limit, fn func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !addr.b.allow(clientAddrOf(r)) {
			s.refuse(w, r, addr.reason, addr.detail)
			return
		}
		id, ok := s.holder(w, r)
		if !ok {
			return
		}
		if !holder.b.allow(id) {
			s.refuse(w, r, holder.reason, holder.detail)
			return
		}
		fn(w, r, id)
	}
}

// limited applies a holder's write route's limits (holds, confirmations, cancels).
func (s *Server) limited(fn func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return s.charged(limit{s.addrWrites, "address-writes", "too many requests from this address"},
		limit{s.holderWrites, "holder-writes", "too many requests from this holder"}, fn)
}

// holderReading applies a holder-scoped read route's limits.
func (s *Server) holderReading(fn func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return s.charged(limit{s.addrReads, "address-reads", "too many reads from this address"},
		limit{s.holderReads, "holder-reads", "too many reads from this holder"}, fn)
}

// reading applies a read route's limits: the client address's read bucket and, with
// unsigned holders, the bucket of the holder the request names (Holder-Id is then who
// the caller is). With signed holders such a read is charged to no holder: naming one
// proves nothing there, and must not spend that holder's allowance.
func (s *Server) reading(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		holder, ok := s.singleHeader(w, r, HolderHeader)
		if !ok {
			return
		}
		if s.opts.HolderAuth != nil {
			holder = ""
		}
		switch {
		case !s.addrReads.allow(clientAddrOf(r)):
			s.refuse(w, r, "address-reads", "too many reads from this address")
		case holder != "" && len(holder) <= maxHolderBytes && !s.holderReads.allow(holder):
			s.refuse(w, r, "holder-reads", "too many reads from this holder")
		default:
			fn(w, r)
		}
	}
}

// showLookups limits, per client address, the requests for shows that do not exist:
// each costs a database query (the engine remembers an unknown id for a while, but a
// flood of fresh ids misses that). It wraps a route whose path names a show.
func (s *Server) showLookups(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddrOf(r)
		if !s.unknownShows.has(addr) {
			s.refuse(w, r, "unknown-shows", "too many requests for shows that do not exist from this address")
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		fn(rec, r)
		if rec.status == http.StatusNotFound {
			s.unknownShows.allow(addr)
		}
	}
}

// addrHolds counts, per show and client address, the seats held through this server
// (holds granted, minus those released, confirmed or expired), so that one address
// cannot hold a show's seats under many holder ids. It is per process: N replicas
// behind a balancer allow up to N times the cap.
type addrHolds struct {
	max int
	m   *lru.Cache[string, *heldSeats]
}

type heldSeats struct {
	mu    sync.Mutex
	holds map[int64]heldHold // by generation; negative keys are holds being asked for
	next  int64
}

type heldHold struct {
	seats int
	until time.Time
}

func newAddrHolds(max, size int) *addrHolds {
	m, _ := lru.New[string, *heldSeats](size)
	return &addrHolds{max: max, m: m}
}

func (a *addrHolds) of(show, addr string) *heldSeats {
	k := show + "\x00" + addr
	if h, ok := a.m.Get(k); ok {
		return h
	}
	h := &heldSeats{holds: map[int64]heldHold{}}
	if prev, ok, _ := a.m.PeekOrAdd(k, h); ok {
		return prev
	}
	return h
}

// reserve counts n more seats, or reports false past the cap; done settles the
// reservation with the hold's generation and expiry (ok) or drops it. A generation of
// 0 keeps the reservation as it is, until then (a waitlist entry's count: it has no
// hold yet).
func (a *addrHolds) reserve(show, addr string, n int) (done func(gen int64, until time.Time, ok bool), allowed bool) {
	h := a.of(show, addr)
	h.mu.Lock()
	defer h.mu.Unlock()
	now, held := time.Now(), 0
	for g, x := range h.holds {
		if x.until.Before(now) {
			delete(h.holds, g)
			continue
		}
		held += x.seats
	}
	if held+n > a.max {
		return nil, false
	}
	h.next--
	key := h.next
	h.holds[key] = heldHold{seats: n, until: now.Add(time.Minute)} // until the engine answers
	return func(gen int64, until time.Time, ok bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.holds, key)
		if ok && gen == 0 {
			gen = key
		}
		if ok {
			h.holds[gen] = heldHold{seats: n, until: until}
		}
	}, true
}

// update moves a hold's expiry (an extension) or, with a zero until, forgets it (a
// release or confirmation).
func (a *addrHolds) update(show, addr string, gen int64, until time.Time) {
	h, ok := a.m.Peek(show + "\x00" + addr)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	x, ok := h.holds[gen]
	switch {
	case !ok:
	case until.IsZero():
		delete(h.holds, gen)
	default:
		x.until = until
		h.holds[gen] = x
	}
}

// shrink counts a hold (by generation) as n seats from now on: it gave back the rest.
func (a *addrHolds) shrink(show, addr string, gen int64, n int) {
	h, ok := a.m.Peek(show + "\x00" + addr)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if x, ok := h.holds[gen]; ok {
		x.seats = min(x.seats, n)
		h.holds[gen] = x
	}
}

// streamSlots counts open event streams, in all and per client address. A full server
// makes room for a newcomer when an address holds two streams more than the newcomer
// would: that address's oldest stream is evicted. Streams that never read hold their
// slots on a quiet show (nothing written, no buffer fills), so from any number of
// addresses they can hold only their fair share.
type streamSlots struct {
	mu      sync.Mutex
	total   int
	perAddr map[string][]*streamSlot // oldest first
}

type streamSlot struct {
	evict func() // ends the stream
}

// take claims a stream slot for addr, or says which limit refused it; evict ends the
// stream if a newcomer needs its slot. evicted reports that another stream made room.
func (c *streamSlots) take(addr string, max, maxPerAddr int, evict func()) (release func(), refusal string, evicted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perAddr[addr] != nil && len(c.perAddr[addr]) >= maxPerAddr {
		return nil, "address", false
	}
	if c.total >= max {
		if !c.evictFor(len(c.perAddr[addr])) {
			return nil, "server", false
		}
		evicted = true
	}
	if c.perAddr == nil {
		c.perAddr = map[string][]*streamSlot{}
	}
	slot := &streamSlot{evict: evict}
	c.total++
	c.perAddr[addr] = append(c.perAddr[addr], slot)
	return func() { c.drop(addr, slot) }, "", evicted
}

// evictFor ends the oldest stream of the address holding the most, if it holds at
// least two more than a newcomer holding has; it reports whether it did.
func (c *streamSlots) evictFor(has int) bool {
	var top string
	for a, slots := range c.perAddr {
		if len(slots) > len(c.perAddr[top]) {
			top = a
		}
	}
	if len(c.perAddr[top]) < has+2 {
		return false
	}
	victim := c.perAddr[top][0]
	c.remove(top, victim)
	victim.evict()
	return true
}

// drop gives a slot back (once: an evicted one was given back already).
func (c *streamSlots) drop(addr string, slot *streamSlot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(addr, slot)
}

func (c *streamSlots) remove(addr string, slot *streamSlot) {
	slots := c.perAddr[addr]
	for i, x := range slots {
		if x == slot {
			c.total--
			if slots = append(slots[:i:i], slots[i+1:]...); len(slots) == 0 {
				delete(c.perAddr, addr)
			} else {
				c.perAddr[addr] = slots
			}
			return
		}
	}
}

func (c *streamSlots) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
