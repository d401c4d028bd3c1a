package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The connection rows of docs/RELIABILITY.md ("Abuse"), over real sockets from several
// loopback addresses: 127.0.6.66 attacks, 127.0.6.1-20 are honest.

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// exchange sends one raw request on c and reads its response.
func exchange(c net.Conn, br *bufio.Reader, request string) (*http.Response, []byte, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, request); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, err
}

// freshLivez is a /livez from src on a new connection, within 3 s.
func freshLivez(t *testing.T, src, base string) error {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
	c := &http.Client{Timeout: 3 * time.Second, Transport: tr}
	resp, err := c.Get(base + "/livez")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("/livez: %d", resp.StatusCode)
	}
	return nil
}

// closedByServer reports whether the server closes c (EOF or reset) within 5 s.
func closedByServer(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errAs(err, &ne) && ne.Timeout())
}

func errAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// TestOneAddressCannotFillTheConnections: one address that opens keep-alive connections
// (plain /livez left idle, event streams refused past its cap) gets at most its share;
// the connections past it are closed as they are accepted, a refused stream's
// connection is closed with its answer, and a fresh /livez from another address is
// served all the while.
func TestOneAddressCannotFillTheConnections(t *testing.T) {
	t.Parallel()
	base, _, _ := startServe(t, migratedEnv(t, nil), "--demo-show", "conns", "--demo-seats", "10",
		"--max-conns", "32", "--max-conns-per-addr", "8", "--max-streams", "8", "--max-streams-per-addr", "2")
	addr := strings.TrimPrefix(base, "http://")
	if err := freshLivez(t, "127.0.6.1", base); err != nil {
		t.Fatal(err)
	}
	// The attacker's streams: 2 served, the rest refused, each refusal closing its
	// connection.
	for i := range 6 {
		c, err := dialFrom(t, "127.0.6.66", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		if i < 2 {
			fmt.Fprintf(c, "GET /v1/shows/conns/events HTTP/1.1\r\nHost: x\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("stream %d: %v %v", i, resp, err)
			}
			continue // open, never read again
		}
		resp, body, err := exchange(c, br, "GET /v1/shows/conns/events HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if resp.StatusCode != 429 || !resp.Close { // Close: the answer said Connection: close
			t.Fatalf("stream %d past the address's cap: %d, close %v (%s), want 429 and Connection: close", i, resp.StatusCode, resp.Close, body)
		}
		if !closedByServer(c, br) {
			t.Fatalf("stream %d: the refused connection stays open", i)
		}
	}
	// Idle keep-alive connections: the attacker's past its cap are closed at accept.
	held := 0
	for range 40 {
		c, err := dialFrom(t, "127.0.6.66", addr)
		if err != nil {
			continue
		}
		br := bufio.NewReader(c)
		if resp, _, err := exchange(c, br, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil && resp.StatusCode == 200 {
			held++ // and left idle
		}
	}
	if held > 8 {
		t.Fatalf("one address holds %d idle connections, its cap is 8 (2 of them streams)", held)
	}
	for i := range 3 {
		if err := freshLivez(t, fmt.Sprintf("127.0.6.%d", i+2), base); err != nil {
			t.Fatalf("a fresh /livez from another address while the attacker holds its connections: %v", err)
		}
	}
}

// TestIdleConnectionsTrimmedNearTheCap: many addresses, each within its share, fill the
// connections with idle keep-alive ones; near --max-conns the idle ones are closed, so a
// new client is served instead of waiting for them to time out.
func TestIdleConnectionsTrimmedNearTheCap(t *testing.T) {
	t.Parallel()
	base, _, _ := startServe(t, migratedEnv(t, nil), "--max-conns", "16", "--max-conns-per-addr", "4", "--max-streams", "4", "--max-streams-per-addr", "2")
	addr := strings.TrimPrefix(base, "http://")
	for a := range 4 {
		for range 4 {
			c, err := dialFrom(t, fmt.Sprintf("127.0.6.%d", 10+a), addr)
			if err != nil {
				t.Fatal(err)
			}
			// Within the cap, so accepted; answered, or closed as near-the-cap idle.
			_, _, _ = exchange(c, bufio.NewReader(c), "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
		}
	}
	for i := range 3 {
		if err := freshLivez(t, fmt.Sprintf("127.0.6.%d", 1+i), base); err != nil {
			t.Fatalf("a new client with 16 idle connections open: %v", err)
		}
	}
}

// TestPlainHTTPErrorsAreProblems: what net/http answers itself, before any handler (a
// malformed request line, a missing Host, headers too large, an unknown transfer
// coding), is an RFC 9457 problem like every other answer, and closes the connection.
func TestPlainHTTPErrorsAreProblems(t *testing.T) {
	t.Parallel()
	base, _, _ := startServe(t, migratedEnv(t, nil))
	addr := strings.TrimPrefix(base, "http://")
	for _, c := range []struct {
		name, request string
		status        int
		typ           string
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", 400, "malformed-request"},
		{"no Host", "GET /livez HTTP/1.1\r\n\r\n", 400, "malformed-request"},
		{"malformed header", "GET /livez HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400, "malformed-request"},
		{"headers too large", "GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20+8192) + "\r\n\r\n", 431, "headers-too-large"},
		{"unknown transfer coding", "POST /v1/bookings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13\r\n\r\n", 501, "not-implemented"},
		{"unsupported HTTP version", "GET /livez HTTP/3.0\r\nHost: x\r\n\r\n", 505, "unsupported-version"},
	} {
		conn, err := dialFrom(t, "127.0.6.1", addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, body, err := exchange(conn, bufio.NewReader(conn), c.request)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var p struct {
			Type   string
			Status int
		}
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			p.Type != "urn:holdfast:problem:"+c.typ || p.Status != c.status {
			t.Fatalf("%s: %d %q %s, want a %d %s problem", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status, c.typ)
		}
	}
}

// TestTrustedProxyConnectionsNotCapped: a trusted proxy's connections carry many
// clients, so the per-address cap does not count them; an untrusted address's beside it
// still meet theirs.
func TestTrustedProxyConnectionsNotCapped(t *testing.T) {
	t.Parallel()
	base, _, _ := startServe(t, migratedEnv(t, nil), "--trusted-proxy", "127.0.6.5",
		"--max-conns-per-addr", "4", "--max-streams-per-addr", "2")
	addr := strings.TrimPrefix(base, "http://")
	served := map[string]int{}
	for _, src := range []string{"127.0.6.5", "127.0.6.66"} {
		for range 10 {
			c, err := dialFrom(t, src, addr)
			if err != nil {
				t.Fatal(err)
			}
			if resp, _, err := exchange(c, bufio.NewReader(c), "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil && resp.StatusCode == 200 {
				served[src]++ // and left open
			}
		}
	}
	if served["127.0.6.5"] != 10 || served["127.0.6.66"] != 4 {
		t.Fatalf("connections served: %v, want all 10 of the proxy's and 4 of the other address's", served)
	}
}
