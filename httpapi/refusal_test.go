package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// refusingServer is a Server whose every event stream is refused for its connect rate
// (a reconnect storm past StreamConnectRate). It has no engine: a refusal must not
// reach one (Redis, PostgreSQL).
func refusingServer(tb testing.TB) *Server {
	s, err := New(nil, Options{TrustedProxies: loopback, StreamConnectRate: 1e-9})
	if err != nil {
		tb.Fatal(err)
	}
	s.streamConnects.AllowN(time.Now(), 1) // the one token of its burst
	return s
}

// discardWriter is the least a ResponseWriter can be.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkRefusedStream is what a reconnect storm's refused connect costs the server,
// through its handler alone and end to end over a socket (accept, parse, answer,
// close; the client side a raw socket): go test -run '^$' -bench RefusedStream ./httpapi
func BenchmarkRefusedStream(b *testing.B) {
	b.Run("handler", func(b *testing.B) {
		s := refusingServer(b)
		r, _ := http.NewRequest("GET", "/v1/shows/big/events", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		b.ReportAllocs()
		for i := range b.N {
			r.Header = http.Header{"X-Forwarded-For": {fmt.Sprintf("100.80.%d.%d", i/250%250, i%250)}}
			w := &discardWriter{h: http.Header{}}
			s.ServeHTTP(w, r)
		}
	})
	b.Run("socket", func(b *testing.B) {
		s := refusingServer(b)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: s, ConnContext: s.ConnContext, ConnState: s.ConnState}
		go srv.Serve(s.Listener(ln))
		defer srv.Close()
		reqs := make([][]byte, 250)
		for i := range reqs {
			reqs[i] = fmt.Appendf(nil, "GET /v1/shows/big/events HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 100.80.0.%d\r\n\r\n", i)
		}
		buf := make([]byte, 4096)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Write(reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			n, _ := io.ReadAtLeast(c, buf, 12)
			if n < 12 || string(buf[9:12]) != "503" {
				b.Fatalf("answer %q", buf[:n])
			}
			_, _ = io.Copy(io.Discard, c) // until the server closes
			c.Close()
		}
	})
}

// TestRefusedConnectIsCheap: in a reconnect storm, a connect past StreamConnectRate is
// answered before the routes, with a few allocations (the routes' refusal: 30), no
// engine (this server has none) and the same answer as the routes give the refusal
// that is logged.
func TestRefusedConnectIsCheap(t *testing.T) {
	s := refusingServer(t)
	answer := func(addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/v1/shows/big/events", nil)
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Forwarded-For", addr)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	logged := answer("100.80.0.1") // the log sample has room: the routes refuse it
	var fast *httptest.ResponseRecorder
	for i := range 20 { // past the sample's burst: answered before the routes
		fast = answer(fmt.Sprintf("100.80.0.%d", i+2))
	}
	for _, w := range []*httptest.ResponseRecorder{logged, fast} {
		w.Header().Del(RequestIDHeader)
	}
	if fast.Code != 503 || logged.Code != 503 || fast.Body.String() != logged.Body.String() ||
		fmt.Sprint(fast.Header()) != fmt.Sprint(logged.Header()) {
		t.Fatalf("refused connects answered differently:\n%d %v %s\n%d %v %s", logged.Code, logged.Header(), logged.Body,
			fast.Code, fast.Header(), fast.Body)
	}
	r, _ := http.NewRequest("GET", "/v1/shows/big/events", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header = http.Header{"X-Forwarded-For": {"100.80.1.1"}}
	w := &discardWriter{}
	allocs := testing.AllocsPerRun(200, func() {
		w.h = http.Header{}
		s.ServeHTTP(w, r)
	})
	if allocs > 6 {
		t.Fatalf("a refused connect allocates %.0f times, want at most 6", allocs)
	}
	if n := testutilCounter(t, s, `holdfast_http_refused_total{reason="stream-connects"}`); n < 220 {
		t.Fatalf("refusals counted: %v, want every one (221)", n)
	}
}

// testutilCounter reads a metric of s's registry by its exposition name.
func testutilCounter(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	s.Admin().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, l := range strings.Split(w.Body.String(), "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}
