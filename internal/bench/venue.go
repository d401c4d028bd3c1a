package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
)

// venueSeats is the venue-scale show's size.
const venueSeats = 100_000

// venueWorkload: a 100,000-seat arena, a third of it held or sold, while a seller
// keeps holding and releasing seats: what its seat map costs to create, serve, stream
// and draw.
func (e *env) venueWorkload(ctx context.Context, r *Report) error {
	const show = "arena"
	venue := demo.Arena(venueSeats)
	eng, err := e.engine(engine.Config{MaxSeatsPerHold: 4, MaxSeatsPerHolder: 1000})
	if err != nil {
		return err
	}
	var t venueTimes
	if t.created, err = timed(func() error { return eng.CreateShowLayout(ctx, show, venue) }); err != nil {
		return err
	}
	e.progress("  holding and selling a third of %d seats", venueSeats)
	if err := takeAThird(ctx, eng, show, venue); err != nil {
		return err
	}
	if err := e.dropIndex(ctx, show); err != nil {
		return err
	}
	if t.indexed, err = timed(func() error {
		_, err := eng.HoldBest(ctx, engine.BestRequest{ShowID: show, Count: 1})
		return err
	}); err != nil {
		return err
	}
	if t.viewBuilt, err = timed(func() error { _, err := eng.SeatMap(ctx, show); return err }); err != nil {
		return err
	}
	addr, stop, err := serveAPI(eng)
	if err != nil {
		return err
	}
	defer stop()
	defer sellAndRelease(ctx, eng, show, venue)()
	c := &venueClient{url: "http://" + addr, show: show,
		c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}}
	if err := e.venueReads(ctx, r, eng, c, t); err != nil {
		return err
	}
	return e.venuePage(ctx, r, c.url+"/shows/"+show)
}

// venueTimes are how long the venue's set-up steps took.
type venueTimes struct{ created, indexed, viewBuilt time.Duration }

// timed runs fn and says how long it took.
func timed(fn func() error) (time.Duration, error) {
	t := time.Now()
	err := fn()
	return time.Since(t), err
}

// takeAThird takes a third of the venue's seats: holds of 1-4 seats, every other one
// confirmed.
func takeAThird(ctx context.Context, eng *engine.Engine, show string, venue []engine.Seat) error {
	var next atomic.Int64
	return parallel(ctx, 64, venueSeats/3/4, func(ctx context.Context, k int) error {
		i := int(next.Add(4)) - 4
		var ids []string
		for _, s := range venue[i : i+1+k%4] {
			ids = append(ids, s.ID)
		}
		h, err := eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: ids, TTL: 15 * time.Minute})
		if err != nil {
			return err
		}
		if k%2 == 0 {
			_, err = eng.Confirm(ctx, h, engine.ConfirmOptions{})
		}
		return err
	})
}

// dropIndex drops the show's best-available index (its completion key and the seats'
// metas) so that the next HoldBest builds it again.
func (e *env) dropIndex(ctx context.Context, show string) error {
	base := showBase(e.prefixes[len(e.prefixes)-1], show)
	if err := e.rdb.Del(ctx, base+"ixs").Err(); err != nil {
		return err
	}
	for it := e.rdb.Scan(ctx, 0, base+"mt:*", 1000).Iterator(); it.Next(ctx); {
		if err := e.rdb.Del(ctx, it.Val()).Err(); err != nil {
			return err
		}
	}
	return nil
}

// sellAndRelease has a seller hold and release seats in the venue's last third until
// the returned func is called: the map changes (about 200 holds a second), as in a sale.
func sellAndRelease(ctx context.Context, eng *engine.Engine, show string, venue []engine.Seat) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	var seller sync.WaitGroup
	seller.Go(func() {
		for k := 0; sctx.Err() == nil; k++ {
			s := venue[2*venueSeats/3+k%(venueSeats/3)]
			h, err := eng.Hold(sctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{s.ID}, TTL: time.Minute})
			if err == nil && k%2 == 0 {
				_ = eng.Release(sctx, h)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return func() { cancel(); seller.Wait() }
}

// venueClient reads one show over HTTP.
type venueClient struct {
	url, show string
	c         *http.Client
}

var gzipped = http.Header{"Accept-Encoding": {"gzip"}}

// get reads the show's path and says how many bytes came.
func (c *venueClient) get(ctx context.Context, path string, h http.Header) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+"/v1/shows/"+c.show+path, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return int(n), err
}

// sizes is each document's size without and with gzip: [map, layout, compact
// layout][plain, gzip].
func (c *venueClient) sizes(ctx context.Context) (size [3][2]int, err error) {
	for k, path := range []string{"/seats", "/layout", "/layout?format=compact"} {
		for z, h := range []http.Header{nil, gzipped} {
			if size[k][z], err = c.get(ctx, path, h); err != nil {
				return size, err
			}
		}
	}
	return size, nil
}

// snapshots opens 50 event streams one after another: a new stream's time to its first
// event, a snapshot, and that event's size.
func (c *venueClient) snapshots(ctx context.Context) (stats, int, error) {
	var snapshot stats
	snapBytes := 0
	began := time.Now()
	for range 50 {
		t0 := time.Now()
		n, err := firstEvent(ctx, c.url+"/v1/shows/"+c.show+"/events")
		if err != nil {
			return snapshot, 0, err
		}
		snapshot.lat = append(snapshot.lat, time.Since(t0))
		snapshot.ops++
		snapBytes = n
	}
	snapshot.elapsed = time.Since(began)
	slices.Sort(snapshot.lat)
	return snapshot, snapBytes, nil
}

// venueReads measures the venue's reads while the seller sells — the documents' sizes,
// SeatMap in process, the compact map over HTTP, a new stream's snapshot — and adds
// the workload's rows.
func (e *env) venueReads(ctx context.Context, r *Report, eng *engine.Engine, c *venueClient, t venueTimes) error {
	size, err := c.sizes(ctx)
	if err != nil {
		return err
	}
	mapPlain, mapZipped := size[0][0], size[0][1]
	seatMap := drive(ctx, 1, e.o.Warmup, e.o.Duration, func(ctx context.Context, _ int64) error {
		_, err := eng.SeatMap(ctx, c.show)
		return err
	})
	compact := drive(ctx, mapReaders, e.o.Warmup, e.o.Duration, func(ctx context.Context, _ int64) error {
		_, err := c.get(ctx, "/seats", gzipped)
		return err
	})
	snapshot, snapBytes, err := c.snapshots(ctx)
	if err != nil {
		return err
	}
	r.Rows = append(r.Rows,
		Row{Workload: "venue scale, " + thousands(venueSeats) + " seats", Variant: "create the show (PostgreSQL rows, Redis state, the best-available index)", Clients: 1, P50ms: ms(t.created)},
		Row{Workload: "", Variant: "the best-available index built again (a third taken), by a HoldBest", Clients: 1, P50ms: ms(t.indexed)},
		Row{Workload: "", Variant: "the engine's seat-map view, first read (built from PostgreSQL and Redis)", Clients: 1, P50ms: ms(t.viewBuilt)},
		Row{Workload: "", Variant: "engine.SeatMap, in process", Clients: 1, OpsPerS: seatMap.rate(), P50ms: seatMap.pct(.5), P99ms: seatMap.pct(.99), Note: errNote(seatMap)},
		Row{Workload: "", Variant: "GET compact map, gzip", Clients: mapReaders, OpsPerS: compact.rate(), P50ms: compact.pct(.5), P99ms: compact.pct(.99),
			Note: fmt.Sprintf("%s bytes (%s without gzip); the map changes about 200 times a second%s", thousands(mapZipped), thousands(mapPlain), errNote(compact))},
		Row{Workload: "", Variant: "GET layout (cacheable for good)", Clients: 1,
			Note: fmt.Sprintf("by seat: %s bytes gzip (%s without); by column (?format=compact, what the page reads): %s bytes gzip (%s without)",
				thousands(size[1][1]), thousands(size[1][0]), thousands(size[2][1]), thousands(size[2][0]))},
		Row{Workload: "", Variant: "SSE: a new stream's snapshot event", Clients: 1, OpsPerS: snapshot.rate(), P50ms: snapshot.pct(.5), P99ms: snapshot.pct(.99),
			Note: fmt.Sprintf("%s bytes, 50 streams opened one after another", thousands(snapBytes))},
	)
	r.goal("venue: a "+thousands(venueSeats)+"-seat show created (s)", "< 5", t.created.Seconds(), t.created < 5*time.Second)
	e.progress("  created %v, indexed %v, view %v; map %d B gzip, p99 %.1f ms; snapshot %d B, p50 %.1f ms",
		t.created.Round(time.Millisecond), t.indexed.Round(time.Millisecond), t.viewBuilt.Round(time.Millisecond), mapZipped, compact.pct(.99), snapBytes, snapshot.pct(.5))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// firstEvent opens an event stream, reads its first event, and returns the event's
// size in bytes.
func firstEvent(ctx context.Context, url string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	n, inEvent := 0, false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("id: ")), bytes.HasPrefix(line, []byte("event: ")), bytes.HasPrefix(line, []byte("data: ")):
			inEvent = true
			n += len(line) + 1
		case len(line) == 0 && inEvent:
			return n + 1, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("the stream ended before its first event")
}

// chromium finds a Chromium to drive: HOLDFAST_CHROMIUM, or one on PATH.
func chromium() string {
	if p := os.Getenv("HOLDFAST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// pagePerf is what the seat-map page records (window.holdfastPerf, in ms).
type pagePerf struct {
	View      string    `json:"view"`
	Draw      float64   `json:"draw"`
	Snapshot  float64   `json:"snapshot"`
	Painted   bool      `json:"painted"`
	Changes   []float64 `json:"changes"`
	LongTasks []float64 `json:"longTasks"`
}

// venuePage loads the seat-map page of the arena in headless Chromium, drawn as SVG
// elements and on a canvas, and reads how long it took to draw and to apply the
// stream's changes while the seller works. Without a Chromium the rows say so.
func (e *env) venuePage(ctx context.Context, r *Report, url string) error {
	path := chromium()
	if path == "" {
		r.Rows = append(r.Rows, Row{Workload: "", Variant: "the seat-map page", Note: "not measured: no Chromium (apt-get install chromium, or HOLDFAST_CHROMIUM)"})
		return nil
	}
	for _, draw := range []string{"svg", "canvas"} {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		tctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
		var p pagePerf
		err := chromedp.Do(tctx, chromedp.Navigate("about:blank")) // the browser started
		began := time.Now()
		if err == nil {
			err = chromedp.Do(tctx, chromedp.Navigate(url+"?draw="+draw))
		}
		if err == nil {
			_, err = chromedp.Run(tctx, chromedp.Poll[bool](`!!(window.holdfastPerf && window.holdfastPerf.painted)`,
				chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(2*time.Minute)))
		}
		loaded := time.Since(began)
		var loadTasks []float64
		if err == nil {
			loadTasks, err = chromedp.Run(tctx, chromedp.Evaluate[[]float64](`holdfastPerf.longTasks`))
		}
		if err == nil {
			// Reset the counts, then watch the changes come for the measured time.
			_, err = chromedp.Run(tctx, chromedp.Evaluate[int](`holdfastPerf.changes = []; holdfastPerf.longTasks = []; 0`))
		}
		if err == nil {
			time.Sleep(e.o.Duration)
			p, err = chromedp.Run(tctx, chromedp.Evaluate[pagePerf](`holdfastPerf`))
		}
		cancel()
		cancelBrowser()
		cancelAlloc()
		if err != nil {
			return fmt.Errorf("the page drawn as %s: %w", draw, err)
		}
		slices.Sort(p.Changes)
		pct := func(l []float64, q float64) float64 {
			if len(l) == 0 {
				return 0
			}
			return l[min(len(l)-1, int(float64(len(l))*q))]
		}
		long, loadLong := 0.0, 0.0
		for _, d := range p.LongTasks {
			long += d
		}
		for _, d := range loadTasks {
			loadLong = max(loadLong, d)
		}
		r.Rows = append(r.Rows, Row{Workload: "", Variant: fmt.Sprintf("the seat-map page, drawn as %s (headless Chromium, 1280×900)", p.View), Clients: 1,
			P50ms: pct(p.Changes, .5), P99ms: pct(p.Changes, .99),
			Note: fmt.Sprintf("open to every seat drawn %.0f ms (building the map %.0f ms, painting the snapshot %.0f ms; %d long tasks, the longest %.0f ms); p50/p99: a changes event applied (%d events in %v); long tasks while watching: %d, %.0f ms in all",
				ms(loaded), p.Draw, p.Snapshot, len(loadTasks), loadLong, len(p.Changes), e.o.Duration, len(p.LongTasks), long)})
		e.progress("  page as %s: drawn in %v (build %.0f ms, snapshot %.0f ms); changes p99 %.2f ms; %d long tasks", p.View, loaded.Round(time.Millisecond), p.Draw, p.Snapshot, pct(p.Changes, .99), len(p.LongTasks))
	}
	return nil
}
