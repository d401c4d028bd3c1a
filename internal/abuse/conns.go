package abuse

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The connection attacks: real sockets from loopback addresses of their own (the
// server trusts only 127.0.0.1 as a proxy, so these are clients by their peer).

// dialFrom opens a connection to the server from the loopback address src.
func (r *runner) dialFrom(ctx context.Context, src string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.DialContext(ctx, "tcp", strings.TrimPrefix(r.o.URL, "http://"))
}

// rawExchange sends a request on c and reads the answer's status (a served stream's
// body is left unread); for a refusal it reports whether the server then closed the
// connection (within a second).
func rawExchange(c net.Conn, request string) (status int, closed bool) {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, request); err != nil {
		return 0, true
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, true
	}
	if resp.StatusCode == 200 {
		return 200, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = br.ReadByte()
	ne, ok := err.(net.Error)
	return resp.StatusCode, err != nil && !(ok && ne.Timeout())
}

// freshLivez times a /livez on a new connection from src.
func (r *runner) freshLivez(ctx context.Context, src string) string {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
	c := &http.Client{Timeout: 8 * time.Second, Transport: tr}
	t := time.Now()
	resp, err := c.Get(r.o.URL + "/livez")
	if err != nil {
		return fmt.Sprintf("no answer in %.1f s", time.Since(t).Seconds())
	}
	resp.Body.Close()
	return fmt.Sprintf("%d in %.1f ms", resp.StatusCode, float64(time.Since(t).Microseconds())/1000)
}

func (r *runner) idleConns(ctx context.Context) string {
	const attacker = "127.0.6.66"
	var conns []net.Conn
	var mu sync.Mutex
	keep := func(c net.Conn) { mu.Lock(); conns = append(conns, c); mu.Unlock() }
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var streams, idle counts
	var refusedClosed, dialFailed atomic.Int64
	// Event streams first (16 served, the rest refused), then idle /livez.
	parallel(ctx, 4096, 64, func(ctx context.Context, i int) {
		c, err := r.dialFrom(ctx, attacker)
		if err != nil {
			dialFailed.Add(1)
			return
		}
		keep(c)
		if i < 2048 {
			st, closed := rawExchange(c, "GET /v1/shows/pool-2/events HTTP/1.1\r\nHost: x\r\n\r\n")
			if st != 200 && st != 0 && closed {
				refusedClosed.Add(1)
			}
			streams.add(st)
			return
		}
		st, _ := rawExchange(c, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
		idle.add(st)
	})
	open := r.gauge(ctx, "holdfast_http_connections")
	closedAtAccept := r.gauge(ctx, `holdfast_http_refused_total{reason="address-conns"}`)
	return fmt.Sprintf("streams: %s (%d refused ones closed by the server); idle /livez: %s; %.0f closed at accept; %d dials failed; connections open then %.0f; a fresh /livez from another address: %s",
		streams.String(), refusedClosed.Load(), idle.String(), closedAtAccept, dialFailed.Load(), open, r.freshLivez(ctx, "127.0.6.1"))
}

// rawStream opens an event stream from addr (X-Forwarded-For) that never reads.
func (r *runner) rawStream(show, addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(r.o.URL, "http://"))
	if err != nil {
		return nil, err
	}
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /v1/shows/%s/events HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n\r\n", show, addr)
	return c, nil
}

func (r *runner) quietNeverReading(ctx context.Context) string {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for a := range 64 {
		for range 16 {
			if c, err := r.rawStream("pool-3", fmt.Sprintf("100.130.0.%d", a+1)); err == nil {
				conns = append(conns, c)
			}
			if len(conns)%150 == 0 {
				time.Sleep(time.Second) // under the 200 stream connects a second
			}
		}
	}
	time.Sleep(2 * time.Second)
	held := r.streamsOpen(ctx)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var honest counts
	for i := range 50 {
		honest.add(r.openStream(sctx, "pool-3", fmt.Sprintf("100.131.0.%d", i+1)))
	}
	evicted := r.gauge(ctx, `holdfast_http_refused_total{reason="stream-evicted"}`)
	return fmt.Sprintf("never-reading streams open: %.0f; then 50 clients from other addresses: %s; %.0f never-reading streams evicted", held, honest.String(), evicted)
}

func (r *runner) logFloodPaths(ctx context.Context) string {
	quiet := r.o.LogLines()
	time.Sleep(5 * time.Second)
	before := r.o.LogLines()
	quiet = before - quiet
	var c counts
	flood(ctx, 32, 5*time.Second, func(ctx context.Context, w, i int) {
		path := fmt.Sprintf("/no-such-%d", i)
		if i%2 == 0 {
			path = "/readyz"
		}
		st, _, _ := r.req(ctx, r.o.URL, "GET", path, "198.51.100.47", nil, "")
		c.add(st)
	})
	time.Sleep(500 * time.Millisecond)
	return fmt.Sprintf("%s; %d log lines written in those 5 s, %d in the 5 s before (the honest sale's)", c.String(), r.o.LogLines()-before, quiet)
}
