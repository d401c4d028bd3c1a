package httpapi

import (
	"bytes"
	"container/list"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
)

// Connections. [Server.Listener] wraps the public listener: it bounds the connections
// open at once (Options.MaxConns; past it a new one waits in the kernel's backlog) and
// those of one client address (Options.MaxConnsPerAddress; past it a new one is closed
// as soon as it is accepted, before it costs a goroutine or a read), closes idle
// keep-alive connections while the server is near MaxConns, and answers in problem+json
// what net/http answers itself in plain text (requests it cannot parse).
//
// The address is the connection's peer: a trusted proxy's connections carry many
// clients and are not counted per address (their requests are, by X-Forwarded-For). An
// IPv6 peer counts by its /64, what one host is usually given.

// connLimiter is the listener Server.Listener returns.
type connLimiter struct {
	net.Listener
	s     *Server
	slots chan struct{} // one per open connection
	high  int           // from this many open connections on, idle ones are closed

	mu      sync.Mutex
	open    int
	perAddr map[netip.Addr]int
	idle    list.List // of *limitedConn, longest idle first
}

// limitedConn is an accepted connection: it gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	addr   netip.Addr    // invalid for a trusted proxy: not counted per address
	outer  net.Conn      // what http.Server calls it (a *tls.Conn over it with TLS)
	idleAt *list.Element // in l.idle while idle
	closed bool          // under l.mu
	once   sync.Once
}

// Listener wraps ln with the connection limits (Options.MaxConns, MaxConnsPerAddress).
// The http.Server serving it needs ConnState set to [Server.ConnState], so that idle
// connections can be closed near the cap.
func (s *Server) Listener(ln net.Listener) net.Listener {
	max := s.opts.MaxConns
	l := &connLimiter{Listener: ln, s: s, slots: make(chan struct{}, max), high: max - max/8, perAddr: map[netip.Addr]int{}}
	s.conns.Store(l)
	return l
}

// Accept waits for a free slot, then accepts the next connection that its address's
// cap lets in.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		l.slots <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
		<-l.slots
	}
}

// admit counts c in, or closes it when its address has its cap open already. Near the
// cap it closes the connections idle longest, down to the mark.
func (l *connLimiter) admit(c net.Conn) *limitedConn {
	addr := l.peerKey(c.RemoteAddr())
	l.mu.Lock()
	if addr.IsValid() && l.perAddr[addr] >= l.s.opts.MaxConnsPerAddress {
		l.mu.Unlock()
		_ = c.Close()
		l.s.refused.WithLabelValues("address-conns").Inc()
		return nil
	}
	l.open++
	if addr.IsValid() {
		l.perAddr[addr]++
	}
	var trim []net.Conn
	for l.open-len(trim) >= l.high && l.idle.Len() > 0 {
		idle := l.idle.Remove(l.idle.Front()).(*limitedConn)
		idle.idleAt = nil
		trim = append(trim, idle.outer)
	}
	l.mu.Unlock()
	closeIdle(l.s, trim)
	lc := &limitedConn{Conn: c, l: l, addr: addr}
	lc.outer = lc
	return lc
}

// closeIdle closes idle connections to make room, counting them.
func closeIdle(s *Server, conns []net.Conn) {
	for _, c := range conns {
		_ = c.Close()
		s.refused.WithLabelValues("idle-conns").Inc()
	}
}

// peerKey is what a connection's peer counts under: its address (an IPv6 one's /64), or
// the invalid Addr for a trusted proxy.
func (l *connLimiter) peerKey(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap()
	if l.s.trusted(ip) {
		return netip.Addr{}
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		l := c.l
		l.mu.Lock()
		c.closed = true
		l.open--
		if c.addr.IsValid() {
			if l.perAddr[c.addr]--; l.perAddr[c.addr] <= 0 {
				delete(l.perAddr, c.addr)
			}
		}
		if c.idleAt != nil {
			l.idle.Remove(c.idleAt)
			c.idleAt = nil
		}
		l.mu.Unlock()
		<-l.slots
	})
	return err
}

// NetConn is the connection under the limit (for an event stream's send buffer).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes, as net/http does before closing on a request too large.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Write sends what net/http writes, except that its own plain-text error answers
// become problems.
func (c *limitedConn) Write(b []byte) (int, error) {
	if p := plainErrorProblem(b); p != nil {
		if _, err := c.Conn.Write(p); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// ConnState, set as the http.Server's ConnState, tracks which connections of
// [Server.Listener] are idle: near the cap a connection that goes idle is closed, and
// the longest idle go first when new ones come.
func (s *Server) ConnState(c net.Conn, state http.ConnState) {
	lc := limitedOf(c)
	if lc == nil {
		return
	}
	l := lc.l
	l.mu.Lock()
	if lc.idleAt != nil {
		l.idle.Remove(lc.idleAt)
		lc.idleAt = nil
	}
	if state != http.StateIdle || lc.closed {
		l.mu.Unlock()
		return
	}
	lc.outer = c
	if l.open < l.high {
		lc.idleAt = l.idle.PushBack(lc)
		c = nil
	}
	l.mu.Unlock()
	if c != nil {
		closeIdle(s, []net.Conn{c})
	}
}

// limitedOf finds the limitedConn under c's wrappers (a *tls.Conn), or nil.
func limitedOf(c net.Conn) *limitedConn {
	for range 4 {
		switch x := c.(type) {
		case *limitedConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// openConns is how many connections Server.Listener has open.
func (s *Server) openConns() int {
	l := s.conns.Load()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// net/http's own answers, written straight to the connection: "HTTP/1.1 <code> <text>"
// and these headers, then the text; and, on a TLS listener, its answer to plain HTTP.
var (
	plainErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")
	plainToTLS        = []byte("HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
)

// plainErrorProblem is the problem answer that replaces b, when b is one of net/http's
// plain-text error answers; else nil. A handler's answer never matches: net/http gives
// it a Date header, and writes Connection first.
func plainErrorProblem(b []byte) []byte {
	if bytes.Equal(b, plainToTLS) {
		return problemAnswer(http.StatusBadRequest, "malformed-request", "this is an HTTPS server: use https://")
	}
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 {
		return nil
	}
	line, text, ok := bytes.Cut(rest, plainErrorHeaders)
	if !ok || bytes.IndexByte(line, '\n') >= 0 {
		return nil
	}
	code, err := strconv.Atoi(string(line[:3]))
	if err != nil {
		return nil
	}
	typ := "malformed-request"
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		typ = "headers-too-large"
	case http.StatusNotImplemented:
		typ = "not-implemented"
	case http.StatusHTTPVersionNotSupported:
		typ = "unsupported-version"
	}
	// The text is net/http's ("400 Bad Request: missing required Host header"); it
	// never echoes what the client sent.
	_, detail, _ := bytes.Cut(text, []byte(": "))
	if len(detail) == 0 {
		detail = text
	}
	return problemAnswer(code, typ, string(detail))
}

// problemAnswer is a whole HTTP/1.1 answer carrying a problem, closing the connection.
func problemAnswer(code int, typ, detail string) []byte {
	body, _ := json.Marshal(problemJSON{Type: problemPrefix + typ, Title: http.StatusText(code), Status: code, Detail: detail})
	body = append(body, '\n')
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n")
	b.WriteString("Content-Type: application/problem+json\r\nConnection: close\r\nX-Content-Type-Options: nosniff\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.Write(body)
	return b.Bytes()
}
