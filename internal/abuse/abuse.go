// Package abuse runs the attacks of docs/RELIABILITY.md ("Abuse") against a running
// holdfast serve, each the way the black-box review ran it, and measures what the
// attacker gets and what honest traffic pays meanwhile (confirmation latency, side by
// side with a baseline in the same run). holdfast abuse drives it.
//
// The server runs behind a trusted proxy (--trusted-proxy 127.0.0.1): each simulated
// client says its address in X-Forwarded-For, as a proxy in front would, so that one
// machine plays an attacker's address and honest users' addresses.
package abuse

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Options say where the servers are.
type Options struct {
	URL      string // public address of a server with default limits, unsigned holders
	AdminURL string // its admin listener
	// SignedURL is a second server with signed holders (HS256), and Token a valid
	// token of one holder there.
	SignedURL string
	Token     string
	Show      string // a large show (the honest sale and the big layout)
	// LogLines counts the lines the unsigned server has logged so far.
	LogLines func() int64
	Out      io.Writer

	// SignedAdminURL is the signed server's admin listener, OperatorToken the operator
	// token of both servers, Sign a token of the signed server for a holder, and Serve
	// starts one more unsigned server with extra serve flags (its public base URL, or
	// why it did not start; it stops when ctx ends).
	SignedAdminURL string
	OperatorToken  string
	Sign           func(holder string) string
	Serve          func(ctx context.Context, extra ...string) (string, error)
	// Detached runs holdfast abuse with args in a process of its own at a lower CPU
	// priority and returns what it printed and the CPU seconds it used.
	Detached func(ctx context.Context, args ...string) (out []byte, cpu float64, err error)
	// StormRate caps the reconnect storm's connects a second (0: as fast as its clients
	// go), to measure a storm of a given size when its process has CPUs of its own.
	StormRate int
	// HonestRate paces the honest sale at about this many confirmations a second in all
	// (0: its 8 buyers go 20 ms apart, about 300 a second on a 2-core machine).
	HonestRate int
	// Only, when set, runs only the attacks whose name contains one of these.
	Only []string
}

// Row is one attack's outcome.
type Row struct {
	Attack, Result string
}

type runner struct {
	o      Options
	c      *http.Client
	rows   []Row
	honest *honest
}

// attack is one row: its name and what runs it.
type attack struct {
	name string
	fn   func(context.Context) string
}

// Run runs every attack and returns the rows.
func Run(ctx context.Context, o Options) ([]Row, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0, IdleConnTimeout: 30 * time.Second}
	r := &runner{o: o, c: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
	r.honest = startHonest(ctx, r)
	defer r.honest.stop()
	time.Sleep(3 * time.Second) // the baseline's first samples
	for _, a := range append([]attack{
		{"anyone is any holder (unsigned: 2,000 fresh ids, best-available holds of 10)", r.hoardUnsigned},
		{"anyone is any holder (signed: one identity; fresh ids without a token)", r.hoardSigned},
		{"event streams from one address, then from 5,000 addresses", r.streams},
		{"streams on 40 distinct shows (the watched pool is 32)", r.watchedShows},
		{"50 never-reading streams under load", r.slowReaders},
		{"reconnect storm (connect, snapshot, close)", r.reconnectStorm},
		{"rotating holder ids on reads, 5 s", r.rotatingReads},
		{"350,000 distinct holder ids (limiter memory)", r.limiterMemory},
		{"behind a proxy: a flooder and another user", r.behindProxy},
		{"100k-seat layout at 14/s and ?format=json at 12/s", r.uncachedReads},
		{"random show ids from one address", r.unknownShows},
		{"/metrics and /readyz on the public address", r.metricsReadyz},
		{"6,000 wrong operator tokens", r.operatorGuesses},
		{"clickjacking: the page's headers", r.framing},
		{"logs under a flood of 429s", r.logFlood},
		{"error details: generation 2^53, a wrong JSON type", r.errorDetails},
		{"4,096 keep-alive connections from one address (idle /livez, refused streams)", r.idleConns},
		{"64 addresses x 16 never-reading streams on a quiet show", r.quietNeverReading},
		{"logs under a flood of unknown paths and /readyz", r.logFloodPaths},
	}, r.authAttacks()...) {
		if ctx.Err() != nil {
			break
		}
		if len(o.Only) > 0 && !slices.ContainsFunc(o.Only, func(s string) bool { return strings.Contains(a.name, s) }) {
			continue
		}
		fmt.Fprintf(o.Out, "abuse: %s ...\n", a.name)
		res := a.fn(ctx)
		fmt.Fprintf(o.Out, "  %s\n", res)
		r.rows = append(r.rows, Row{a.name, res})
	}
	return r.rows, ctx.Err()
}

// req sends one request from addr (X-Forwarded-For) and returns its status and body.
func (r *runner) req(ctx context.Context, base, method, path, addr string, h http.Header, body string) (int, []byte, http.Header) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	q, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
	for k, v := range h {
		q.Header[k] = v
	}
	if addr != "" {
		q.Header.Set("X-Forwarded-For", addr)
	}
	resp, err := r.c.Do(q)
	if err != nil {
		if ctx.Err() != nil {
			return -1, nil, nil // the attack's time was up: not the server's answer
		}
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// counts tallies statuses.
type counts struct {
	mu sync.Mutex
	m  map[int]int
}

func (c *counts) add(s int) {
	if s < 0 {
		return
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[int]int{}
	}
	c.m[s]++
	c.mu.Unlock()
}

func (c *counts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]int, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		name := strconv.Itoa(k)
		if k == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%d × %s", c.m[k], name))
	}
	return strings.Join(parts, ", ")
}

// flood runs fn from workers goroutines for d.
func flood(ctx context.Context, workers int, d time.Duration, fn func(ctx context.Context, worker, i int)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				fn(ctx, w, i)
			}
		}()
	}
	wg.Wait()
}

// parallel runs fn(i) for i in [0, n) on workers goroutines.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(ctx, i)
			}
		}()
	}
	wg.Wait()
}

// honest is a steady sale by honest buyers from their own addresses: hold one seat,
// confirm it; its confirmation latencies are what an attack costs. Its 8 buyers each
// wait 20 ms after a confirmation, or share Options.HonestRate when it is set.
type honest struct {
	mu       sync.Mutex
	lat      []time.Duration
	marks    []int // index into lat at each mark
	cancel   context.CancelFunc
	done     chan struct{}
	watching atomic.Int64 // the viewer's streams open: 0 or 1
}

func startHonest(ctx context.Context, r *runner) *honest {
	ctx, cancel := context.WithCancel(ctx)
	h := &honest{cancel: cancel, done: make(chan struct{})}
	pace := rate.NewLimiter(rate.Inf, 0)
	if r.o.HonestRate > 0 {
		pace = rate.NewLimiter(rate.Limit(r.o.HonestRate), 1)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := fmt.Sprintf("10.8.0.%d", w+1)
			for i := 0; pace.Wait(ctx) == nil; i++ {
				hdr := http.Header{"Holder-Id": {fmt.Sprintf("honest-%d-%d", w, i)}}
				st, body, _ := r.req(ctx, r.o.URL, "POST", "/v1/shows/"+r.o.Show+"/holds", addr, hdr, `{"count":1}`)
				if st != 201 {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				hdr.Set("Idempotency-Key", fmt.Sprintf("k-%d-%d", w, i))
				t := time.Now()
				st, _, _ = r.req(ctx, r.o.URL, "POST", "/v1/bookings", addr, hdr, string(body))
				if st == 201 {
					h.mu.Lock()
					h.lat = append(h.lat, time.Since(t))
					h.mu.Unlock()
				}
				if r.o.HonestRate == 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	watched := make(chan struct{})
	wg.Go(func() { h.watch(ctx, r, watched) })
	go func() { wg.Wait(); close(h.done) }()
	select {
	case <-watched:
	case <-ctx.Done():
	case <-time.After(viewerWait):
		fmt.Fprintf(r.o.Out, "abuse: the honest viewer got no seat map in %v: the first attack that reads the map builds the server's view of the show\n", viewerWait)
	}
	return h
}

// viewerWait bounds the wait for the honest viewer's first event (the server builds the
// show's view for it: 0.3 s for 100,000 seats).
const viewerWait = 30 * time.Second

// watch is the honest viewer: it keeps the show's seat map open as an event stream
// from the honest buyers' side, as on any on-sale (buyers look at the map), and opens
// it again when it ends. The server's view of the show is then live before the first
// attack and stays live (a view nobody reads for a minute is dropped), and building it
// (0.3 s for 100,000 seats) is no attack's cost. watched is closed once the first event
// has come.
func (h *honest) watch(ctx context.Context, r *runner, watched chan struct{}) {
	var once sync.Once
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for ctx.Err() == nil {
		q, _ := http.NewRequestWithContext(ctx, "GET", r.o.URL+"/v1/shows/"+r.o.Show+"/events", nil)
		q.Header.Set("X-Forwarded-For", "10.8.0.100")
		if resp, err := c.Do(q); err == nil {
			if resp.StatusCode == 200 {
				h.watching.Store(1)
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(nil, 4<<20) // a snapshot is one line of about a byte a seat
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data: ") {
						once.Do(func() { close(watched) })
					}
				}
				h.watching.Store(0)
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (h *honest) stop() { h.cancel(); <-h.done }

// during measures the honest confirmations while fn runs, and in the same length of
// time just before it (the baseline).
func (r *runner) during(ctx context.Context, fn func()) string {
	h := r.honest
	cpu := func() float64 { return r.gauge(ctx, "process_cpu_seconds_total") }
	h.mu.Lock()
	start := len(h.lat)
	h.mu.Unlock()
	t, c0 := time.Now(), cpu()
	fn()
	d, c1 := time.Since(t), cpu()
	h.mu.Lock()
	under := slices.Clone(h.lat[start:])
	h.mu.Unlock()
	quiet := min(d, 10*time.Second)
	time.Sleep(quiet) // a quiet stretch as long as the attack, after it
	c2 := cpu()
	h.mu.Lock()
	after := slices.Clone(h.lat[start+len(under):])
	h.mu.Unlock()
	return fmt.Sprintf("honest confirm p50/p99 %s ms under attack, %s ms after it; server CPU %.2f cores under attack, %.2f after",
		pct(under), pct(after), (c1-c0)/d.Seconds(), (c2-c1)/quiet.Seconds())
}

func pct(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	slices.Sort(ds)
	p := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	return fmt.Sprintf("%.1f/%.1f (n=%d)", p(.5), p(.99), len(ds))
}

func (r *runner) hoardUnsigned(ctx context.Context) string {
	var c counts
	var held atomic.Int64
	parallel(ctx, 2000, 32, func(ctx context.Context, id int) {
		st, body, _ := r.req(ctx, r.o.URL, "POST", "/v1/shows/"+r.o.Show+"/holds", "198.51.100.66",
			http.Header{"Holder-Id": {fmt.Sprintf("hoarder-%d", id)}}, `{"count":10}`)
		c.add(st)
		if st == 201 {
			var h struct{ Seats []string }
			_ = json.Unmarshal(body, &h)
			held.Add(int64(len(h.Seats)))
		}
	})
	st, _, _ := r.req(ctx, r.o.URL, "POST", "/v1/shows/"+r.o.Show+"/holds", "198.51.100.200",
		http.Header{"Holder-Id": {"honest-after-hoard"}}, `{"count":2}`)
	return fmt.Sprintf("the attacker's address held %d seats (%s); an honest buyer then: %d", held.Load(), c.String(), st)
}

func (r *runner) hoardSigned(ctx context.Context) string {
	var c, fresh counts
	held := 0
	for i := range 2000 {
		st, body, _ := r.req(ctx, r.o.SignedURL, "POST", "/v1/shows/"+r.o.Show+"/holds", fmt.Sprintf("198.51.%d.%d", 101+i/250, i%250),
			http.Header{"Authorization": {"Bearer " + r.o.Token}}, `{"count":1}`)
		c.add(st)
		if st == 201 {
			var h struct{ Seats []string }
			_ = json.Unmarshal(body, &h)
			held += len(h.Seats)
		}
		st, _, _ = r.req(ctx, r.o.SignedURL, "POST", "/v1/shows/"+r.o.Show+"/holds", fmt.Sprintf("198.51.%d.%d", 101+i/250, i%250),
			http.Header{"Holder-Id": {fmt.Sprintf("fresh-%d", i)}}, `{"count":1}`)
		fresh.add(st)
	}
	return fmt.Sprintf("one identity held %d seats from 2,000 addresses (%s); 2,000 fresh ids without a token: %s", held, c.String(), fresh.String())
}

// openStream opens an event stream from addr and reads its first event; the body stays
// open until ctx ends.
func (r *runner) openStream(ctx context.Context, show, addr string) int {
	q, _ := http.NewRequestWithContext(ctx, "GET", r.o.URL+"/v1/shows/"+show+"/events", nil)
	q.Header.Set("X-Forwarded-For", addr)
	tr := &http.Transport{DisableKeepAlives: true}
	resp, err := (&http.Client{Transport: tr}).Do(q)
	if err != nil {
		return 0
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return resp.StatusCode
	}
	go func() {
		<-ctx.Done()
		resp.Body.Close()
	}()
	go io.Copy(io.Discard, resp.Body)
	return 200
}

func (r *runner) livez(ctx context.Context, n int) string {
	var lat []time.Duration
	for range n {
		t := time.Now()
		st, _, _ := r.req(ctx, r.o.URL, "GET", "/livez", "10.9.9.9", nil, "")
		if st == 200 {
			lat = append(lat, time.Since(t))
		}
	}
	return fmt.Sprintf("/livez %d of %d answered, p50/p99 %s ms", len(lat), n, pct(lat))
}

func (r *runner) streams(ctx context.Context) string {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var one, many counts
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range 200 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			one.add(r.openStream(sctx, r.o.Show, "198.51.100.77"))
		}()
		_ = i
	}
	wg.Wait()
	for i := range 5000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			many.add(r.openStream(sctx, r.o.Show, fmt.Sprintf("100.%d.%d.%d", 64+i/65536, i/256%256, i%256)))
		}()
	}
	wg.Wait()
	return fmt.Sprintf("200 from one address: %s; 5,000 from 5,000 addresses: %s; meanwhile %s", one.String(), many.String(), r.livez(ctx, 200))
}

func (r *runner) watchedShows(ctx context.Context) string {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var c counts
	for i := range 40 {
		show := fmt.Sprintf("pool-%d", i)
		c.add(r.openStream(sctx, show, fmt.Sprintf("100.70.0.%d", i+1)))
	}
	var lat []time.Duration
	for i := range 50 {
		t := time.Now()
		st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/pool-39/seats", fmt.Sprintf("100.71.0.%d", i+1), nil, "")
		if st == 200 {
			lat = append(lat, time.Since(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Sprintf("40 streams: %s; map reads of a show past the pool p50/p99 %s ms", c.String(), pct(lat))
}

// streamsOpen is the event streams the server has open, the honest viewer's left out.
func (r *runner) streamsOpen(ctx context.Context) float64 {
	n := r.gauge(ctx, "holdfast_http_event_streams")
	if n < 0 {
		return n // not read
	}
	return n - float64(r.honest.watching.Load())
}

// gauge reads one metric from the admin listener.
func (r *runner) gauge(ctx context.Context, name string) float64 {
	_, body, _ := r.req(ctx, r.o.AdminURL, "GET", "/metrics", "", nil, "")
	for _, l := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return -1
}

func (r *runner) slowReaders(ctx context.Context) string {
	host := strings.TrimPrefix(r.o.URL, "http://")
	var conns []net.Conn
	for i := range 50 {
		c, err := net.Dial("tcp", host)
		if err != nil {
			continue
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "GET /v1/shows/%s/events HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 100.72.0.%d\r\n\r\n", r.o.Show, i+1)
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(time.Second)
	before := r.streamsOpen(ctx)
	// Load: holds and releases by many holders, each an event for every stream.
	flood(ctx, 16, 10*time.Second, func(ctx context.Context, w, i int) {
		addr := fmt.Sprintf("10.20.%d.%d", w, i%250)
		hdr := http.Header{"Holder-Id": {fmt.Sprintf("load-%d-%d", w, i)}}
		st, body, _ := r.req(ctx, r.o.URL, "POST", "/v1/shows/"+r.o.Show+"/holds", addr, hdr, `{"count":1}`)
		if st == 201 {
			r.req(ctx, r.o.URL, "POST", "/v1/holds/release", addr, hdr, string(body))
		}
	})
	during := r.streamsOpen(ctx)
	time.Sleep(12 * time.Second)
	after := r.streamsOpen(ctx)
	return fmt.Sprintf("streams open: %.0f before the load, %.0f when it stopped, %.0f 12 s later (the never-reading ones cut)", before, during, after)
}

func (r *runner) rotatingReads(ctx context.Context) string {
	var c counts
	flood(ctx, 32, 5*time.Second, func(ctx context.Context, w, i int) {
		st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/seats?format=compact", "198.51.100.90",
			http.Header{"Holder-Id": {fmt.Sprintf("rot-%d-%d", w, i)}}, "")
		c.add(st)
	})
	return c.String()
}

func (r *runner) limiterMemory(ctx context.Context) string {
	heap := func() float64 { return r.gauge(ctx, "go_memstats_heap_inuse_bytes") / (1 << 20) }
	before := heap()
	const ids = 350_000
	parallel(ctx, ids, 64, func(ctx context.Context, id int) {
		// A fresh address and a fresh holder each time: every table of limits sees a new key.
		r.req(ctx, r.o.URL, "GET", "/v1/shows/pool-0/seats", fmt.Sprintf("100.%d.%d.%d", 96+id/65536, id/256%256, id%256),
			http.Header{"Holder-Id": {fmt.Sprintf("mem-%d", id)}}, "")
	})
	return fmt.Sprintf("heap in use %.0f MB before, %.0f MB after %d distinct ids and addresses", before, heap(), ids)
}

func (r *runner) behindProxy(ctx context.Context) string {
	var flooder counts
	var other counts
	flood(ctx, 16, 5*time.Second, func(ctx context.Context, w, i int) {
		if w == 0 && i%10 == 0 {
			st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/seats?format=compact", "198.51.100.10", nil, "")
			other.add(st)
			return
		}
		st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/seats?format=compact", "198.51.100.9", nil, "")
		flooder.add(st)
	})
	return fmt.Sprintf("the flooder: %s; another user behind the same proxy: %s", flooder.String(), other.String())
}

func (r *runner) uncachedReads(ctx context.Context) string {
	var layout, js counts
	var etag string
	_, _, h := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/layout", "100.90.0.1", nil, "")
	if h != nil {
		etag = h.Get("ETag")
	}
	res := r.during(ctx, func() {
		tick := time.NewTicker(time.Second / 26)
		defer tick.Stop()
		end := time.Now().Add(8 * time.Second)
		var wg sync.WaitGroup
		for i := 0; time.Now().Before(end); i++ {
			<-tick.C
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%26 < 14 {
					hdr := http.Header{"Accept-Encoding": {"gzip"}}
					if i%2 == 0 && etag != "" {
						hdr.Set("If-None-Match", etag)
					}
					st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/layout", "100.90.0.2", hdr, "")
					layout.add(st)
				} else {
					st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/seats?format=json", "100.90.0.3", nil, "")
					js.add(st)
				}
			}()
		}
		wg.Wait()
	})
	return fmt.Sprintf("layout (half revalidations): %s; per-seat JSON: %s; %s", layout.String(), js.String(), res)
}

func (r *runner) unknownShows(ctx context.Context) string {
	var c counts
	res := r.during(ctx, func() {
		flood(ctx, 32, 8*time.Second, func(ctx context.Context, w, i int) {
			st, _, _ := r.req(ctx, r.o.URL, "GET", fmt.Sprintf("/v1/shows/nope-%d-%d-%d/seats", w, i, rand.Int()), "198.51.100.44", nil, "")
			c.add(st)
		})
	})
	return fmt.Sprintf("%s; %s", c.String(), res)
}

func (r *runner) metricsReadyz(ctx context.Context) string {
	m, _, _ := r.req(ctx, r.o.URL, "GET", "/metrics", "198.51.100.45", nil, "")
	var c counts
	var n atomic.Int64
	res := r.during(ctx, func() {
		flood(ctx, 32, 8*time.Second, func(ctx context.Context, w, i int) {
			st, _, _ := r.req(ctx, r.o.URL, "GET", "/readyz", fmt.Sprintf("100.100.%d.%d", w, i%250), nil, "")
			c.add(st)
			n.Add(1)
		})
	})
	return fmt.Sprintf("public /metrics: %d; %.0f readyz/s (%s); %s", m, float64(n.Load())/8, c.String(), res)
}

func (r *runner) operatorGuesses(ctx context.Context) string {
	var c counts
	t := time.Now()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 375 {
				st, _, _ := r.req(ctx, r.o.AdminURL, "PUT", "/v1/shows/guess", "",
					http.Header{"Authorization": {fmt.Sprintf("Bearer guess-%d-%d-000000000000", w, i)}}, `{"seats":["A1"]}`)
				c.add(st)
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("6,000 guesses in %.1f s: %s", time.Since(t).Seconds(), c.String())
}

func (r *runner) framing(ctx context.Context) string {
	_, _, h := r.req(ctx, r.o.URL, "GET", "/shows/"+r.o.Show, "100.110.0.1", nil, "")
	if h == nil {
		return "no answer"
	}
	return fmt.Sprintf("Content-Security-Policy %q; X-Frame-Options %q", h.Get("Content-Security-Policy"), h.Get("X-Frame-Options"))
}

func (r *runner) logFlood(ctx context.Context) string {
	// The honest sale logs its own lines: count them in a quiet 5 s first.
	quiet := r.o.LogLines()
	time.Sleep(5 * time.Second)
	before := r.o.LogLines()
	quiet = before - quiet
	var c counts
	flood(ctx, 32, 5*time.Second, func(ctx context.Context, w, i int) {
		st, _, _ := r.req(ctx, r.o.URL, "GET", "/v1/shows/"+r.o.Show+"/seats?format=compact", "198.51.100.46", nil, "")
		c.add(st)
	})
	time.Sleep(500 * time.Millisecond)
	refused := r.gauge(ctx, `holdfast_http_refused_total{reason="address-reads"}`)
	return fmt.Sprintf("%s; %d log lines written in those 5 s, %d in the 5 s before (the honest sale's); refusals counted in all (address-reads): %.0f",
		c.String(), r.o.LogLines()-before, quiet, refused)
}

func (r *runner) errorDetails(ctx context.Context) string {
	hdr := http.Header{"Holder-Id": {"err"}}
	_, a, _ := r.req(ctx, r.o.URL, "POST", "/v1/bookings", "100.120.0.1", hdr,
		`{"show":"`+r.o.Show+`","seats":["R01-001"],"token":"00000000000000000000000000000000","generation":9007199254740992}`)
	_, b, _ := r.req(ctx, r.o.URL, "POST", "/v1/bookings", "100.120.0.1", hdr, `{"show":"x","seats":["A1"],"token":"x","generation":"7"}`)
	_, c, _ := r.req(ctx, r.o.URL, "POST", "/v1/bookings", "100.120.0.1", hdr, `{"show":"x","seats":["A1"],"tok`)
	detail := func(b []byte) string {
		var p struct{ Detail string }
		_ = json.Unmarshal(b, &p)
		return p.Detail
	}
	return fmt.Sprintf("%q; %q; %q", detail(a), detail(b), detail(c))
}
