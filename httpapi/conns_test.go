package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// neverReading opens an event stream from addr (X-Forwarded-For) on a raw connection
// that reads nothing.
func (a *api) neverReading(show, addr string) net.Conn {
	a.t.Helper()
	c, err := net.Dial("tcp", a.srv.Listener.Addr().String())
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET /v1/shows/%s/events HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n\r\n", show, addr)
	return c
}

// closedWithin reports whether the server closes c within d (what it sent is read).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	ne, ok := err.(net.Error)
	return !(ok && ne.Timeout())
}

// TestNeverReadingStreamsCannotHoldEverySlot: on a quiet show (nothing written, so no
// buffer fills), addresses whose never-reading streams hold every slot make room for a
// client from another address: the address with the most streams gives up its oldest.
// A newcomer is refused only when no address holds two more than it would.
func TestNeverReadingStreamsCannotHoldEverySlot(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, MaxStreams: 4, MaxStreamsPerAddress: 2})
	a.want(a.do("PUT", "/v1/shows/quiet", "", "", map[string]any{"seats": seats(5)}), 201, "")
	var attacker []net.Conn
	for _, addr := range []string{"198.51.100.1", "198.51.100.2"} {
		for range 2 {
			attacker = append(attacker, a.neverReading("quiet", addr))
			a.waitStreams(int64(len(attacker)))
		}
	}
	for i, addr := range []string{"198.51.100.10", "198.51.100.11"} {
		r, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/shows/quiet/events", nil)
		r.Header.Set("X-Forwarded-For", addr)
		resp, err := a.srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			t.Fatalf("honest client %d with every slot held by never-reading streams: %d, want 200", i, resp.StatusCode)
		}
	}
	// Each attacking address lost its oldest stream: the server closed it.
	for _, i := range []int{0, 2} {
		if !closedWithin(attacker[i], 10*time.Second) {
			t.Fatalf("never-reading stream %d still open after it was evicted", i)
		}
	}
	// Now every address holds one: a fifth newcomer is refused.
	r := a.doHeaders("GET", "/v1/shows/quiet/events", from("198.51.100.12", nil), nil)
	a.want(r, 503, "too-many-streams")
	if testCounter(t, a, `holdfast_http_refused_total{reason="stream-evicted"}`) != 2 {
		t.Fatal("evictions not counted")
	}
}

// TestRefusedStreamsAreCheap: a reconnect storm's refusals are logged sampled (all
// counted); a client's refusal closes its connection, while a trusted proxy's stays
// open for the proxy's next clients (no accept and close per refusal).
func TestRefusedStreamsAreCheap(t *testing.T) {
	t.Parallel()
	for _, proxied := range []bool{false, true} {
		opts := Options{StreamConnectRate: 0.001}
		if proxied {
			opts.TrustedProxies = loopback
		}
		a := newAPI(t, testsvc.Redis(t), engine.Config{}, opts)
		a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(5)}), 201, "")
		st, _ := a.openEvents("s", "")
		st.next(5 * time.Second)
		st.close()
		fresh := 0 // connections the client had to open
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				fresh++
			}
		}}
		for i := range 200 {
			r, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", a.srv.URL+"/v1/shows/s/events", nil)
			r.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i%250))
			resp, err := a.srv.Client().Do(r)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Close == proxied {
				t.Fatalf("proxied %v: refused connect %d: %d, Connection: close %v", proxied, i, resp.StatusCode, resp.Close)
			}
		}
		if want := map[bool]int{false: 200, true: 1}[proxied]; fresh != want {
			t.Fatalf("proxied %v: 200 refusals took %d connections, want %d", proxied, fresh, want)
		}
		if n := testCounter(t, a, `holdfast_http_refused_total{reason="stream-connects"}`); n != 200 {
			t.Fatalf("refusals counted: %v, want 200", n)
		}
		if n := strings.Count(a.logs.String(), `"status":503`); n == 0 || n > 50 {
			t.Fatalf("%d of 200 refused connects logged, want a sample", n)
		}
	}
}

// TestProbesAndUnknownPathsLogSampled: a flood of unknown paths (404), wrong methods
// (405), /readyz and /livez is counted in full and logged a few lines a second, each
// saying how many of its kind were skipped.
func TestProbesAndUnknownPathsLogSampled(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	// Unknown paths and wrong methods share one sample, /readyz and /livez another.
	type req struct {
		method, path, route string
		status              int
	}
	for _, kind := range [][]req{
		{{"GET", "/nope", "/", 404}, {"DELETE", "/livez", "/livez", 405}},
		{{"GET", "/readyz", "GET /readyz", 200}, {"GET", "/livez", "GET /livez", 200}},
	} {
		lines := 0
		for _, c := range kind {
			for range 200 {
				a.want(a.doHeaders(c.method, c.path, nil, nil), c.status, "")
			}
			lines += strings.Count(a.logs.String(), fmt.Sprintf(`"route":%q,"status":%d`, c.route, c.status))
			if n := testCounter(t, a, fmt.Sprintf(`holdfast_http_requests_total{code="%d",route=%q}`, c.status, c.route)); n != 200 {
				t.Fatalf("%s %s: %v counted, want 200", c.method, c.path, n)
			}
		}
		if lines == 0 || lines > 60 {
			t.Fatalf("%s and %s: %d of 400 lines logged, want a sample", kind[0].path, kind[1].path, lines)
		}
	}
	// The next line logged of a kind says how many were skipped before it.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(a.logs.String(), `"status":404,`) || !strings.Contains(a.logs.String(), `"skipped":`) {
		if time.Now().After(deadline) {
			t.Fatal("no sampled line says how many were skipped")
		}
		time.Sleep(50 * time.Millisecond)
		a.doHeaders("GET", "/nope", nil, nil)
	}
}
