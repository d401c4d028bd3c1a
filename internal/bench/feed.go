package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/engine"
)

// The seat-map feed: SSE subscribers on one serve process watch a show while sellers
// on another engine (another process, as far as the feed goes) hold seats and release
// a third of them; each subscriber keeps its own map from the events, and at the end
// every map must equal the engine's.

// feedSellers is how many sellers hold seats while the subscribers watch.
const feedSellers = 8

// subscriber is one SSE client of the feed workload: it keeps its own map from the
// events and the lag of each change it saw.
type subscriber struct {
	mu         sync.Mutex
	states     []byte
	lags       []time.Duration // from just before the Hold call
	fromReturn []time.Duration // from its return
	events     int
}

func (s *subscriber) statesSnapshot() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.states)
}

// feedWorkload: 1,000 SSE subscribers on a 5,000-seat show, then 5,000 on a
// 20,000-seat one, while a sale runs through another engine.
func (e *env) feedWorkload(ctx context.Context, r *Report) error {
	if err := e.feedRun(ctx, r, 1000, 5000); err != nil {
		return err
	}
	return e.feedRun(ctx, r, 5000, 20_000)
}

// feedShow is one feed run: the show, the engine that serves it, the one that sells,
// and when each seat's hold was asked for and answered.
type feedShow struct {
	show     string
	ids      []string
	server   *engine.Engine
	seller   *engine.Engine
	reg      *prometheus.Registry
	addr     string
	index    []int // ids[i]'s layout index (a bare-id show: id order)
	started  []atomic.Int64
	returned []atomic.Int64 // by layout index: unix ns just before its seat's Hold call, and when it returned
	holds    atomic.Int64
}

// feedRun: subscribers SSE streams on one serve process watch a show of seats seats
// while feedSellers sellers hold (and release a third of) its seats. Each hold's lag is
// from just before the Hold call to the subscriber reading the change: an upper bound.
func (e *env) feedRun(ctx context.Context, r *Report, subscribers, seats int) error {
	time.Sleep(time.Second) // the previous workload's connections close
	f, stop, err := e.newFeedShow(ctx, subscribers, seats)
	if err != nil {
		return err
	}
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.progress("  opening %d event streams", subscribers)
	subs, done, err := f.subscribe(sctx, subscribers)
	if err != nil {
		return err
	}
	e.progress("  selling while %d subscribers watch", subscribers)
	f.sell(ctx, e.o.Duration)
	equal, err := f.converge(ctx, subs, 10*time.Second)
	if err != nil {
		return err
	}
	cancel()
	done.Wait()
	f.report(r, subs, equal, e.o.Duration)
	return nil
}

// newFeedShow creates the show of seats seats, its serving engine and its API, and the
// seller's engine on the same keys.
func (e *env) newFeedShow(ctx context.Context, subscribers, seats int) (*feedShow, func(), error) {
	f := &feedShow{show: fmt.Sprintf("feed%d", subscribers), reg: prometheus.NewRegistry(),
		started: make([]atomic.Int64, seats), returned: make([]atomic.Int64, seats)}
	var err error
	if f.server, err = e.engine(engine.Config{Registerer: f.reg}); err != nil {
		return nil, nil, err
	}
	f.ids = make([]string, seats)
	for i := range f.ids {
		f.ids[i] = fmt.Sprintf("F%05d", i)
	}
	if err := f.server.CreateShow(ctx, f.show, f.ids); err != nil {
		return nil, nil, err
	}
	if f.seller, err = engine.New(e.pool, e.rdb, &engine.Config{KeyPrefix: e.prefixes[len(e.prefixes)-1], MaxSeatsPerHolder: 1000}); err != nil {
		return nil, nil, err
	}
	e.opened = append(e.opened, f.seller)
	lay, err := f.server.Layout(ctx, f.show)
	if err != nil {
		return nil, nil, err
	}
	at := map[string]int{}
	for i, s := range lay {
		at[s.ID] = i
	}
	f.index = make([]int, seats)
	for i, id := range f.ids {
		f.index[i] = at[id]
	}
	addr, stop, err := serveAPI(f.server)
	f.addr = addr
	return f, stop, err
}

// subscribe opens n event streams and returns once each has its snapshot; done ends
// when every stream has (when ctx ends).
func (f *feedShow) subscribe(ctx context.Context, n int) ([]*subscriber, *sync.WaitGroup, error) {
	subs := make([]*subscriber, n)
	var ready sync.WaitGroup
	done := &sync.WaitGroup{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}}
	var failed atomic.Int64
	for i := range subs {
		sub := &subscriber{lags: make([]time.Duration, 0, 1<<14), fromReturn: make([]time.Duration, 0, 1<<14)}
		subs[i] = sub
		ready.Add(1)
		done.Go(func() {
			once := sync.OnceFunc(ready.Done)
			defer once()
			if !f.watch(ctx, client, sub, once) {
				failed.Add(1)
			}
		})
	}
	ready.Wait()
	if k := failed.Load(); k > 0 {
		return nil, done, fmt.Errorf("%d of %d event streams failed to open", k, n)
	}
	return subs, done, nil
}

// watch reads the show's event stream into sub until ctx ends; ready is called at its
// snapshot. It says false when the stream did not open.
func (f *feedShow) watch(ctx context.Context, client *http.Client, sub *subscriber, ready func()) bool {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+f.addr+"/v1/shows/"+f.show+"/events", nil)
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var event string
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			now := time.Now()
			sub.mu.Lock()
			sub.events++
			if event == "snapshot" {
				sub.states = []byte(field(line, `"states":"`))
				sub.mu.Unlock()
				ready()
				continue
			}
			f.apply(sub, line, now)
			sub.mu.Unlock()
		}
	}
	return true
}

// apply applies an event's changes to sub's map, and records each new hold's lag.
// A thousand clients share these two cores with the server: it reads only each
// change's index and status, not the whole document.
func (f *feedShow) apply(sub *subscriber, line []byte, now time.Time) {
	for rest := line; ; {
		at := bytes.Index(rest, []byte(`{"i":`))
		if at < 0 {
			return
		}
		rest = rest[at+5:]
		comma := bytes.IndexByte(rest, ',')
		if comma < 0 {
			return
		}
		i, err := strconv.Atoi(string(rest[:comma]))
		status := field(rest, `"s":"`)
		if err != nil || i < 0 || i >= len(sub.states) || status == "" {
			return
		}
		sub.states[i] = status[0]
		if status != "h" || len(sub.lags) == cap(sub.lags) {
			continue
		}
		if t := f.started[i].Load(); t != 0 {
			sub.lags = append(sub.lags, now.Sub(time.Unix(0, t)))
			d := time.Duration(0) // the change may arrive before Hold returns
			if r := f.returned[i].Load(); r != 0 {
				d = max(0, now.Sub(time.Unix(0, r)))
			}
			sub.fromReturn = append(sub.fromReturn, d)
		}
	}
}

// sell runs the sale for d: sellers hold 1-4 seats at a time, in order, and release a
// third of the holds.
func (f *feedShow) sell(ctx context.Context, d time.Duration) {
	var next atomic.Int64
	ctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var wg sync.WaitGroup
	for w := range feedSellers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for ctx.Err() == nil {
				n := 1 + rng.IntN(4)
				i := int(next.Add(int64(n))) - n
				if i+n > len(f.ids) {
					return
				}
				f.holdSeats(ctx, rng, i, n)
				time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// holdSeats holds the n seats from ids[i], noting when it asked and when it was
// answered, and releases a third of them.
func (f *feedShow) holdSeats(ctx context.Context, rng *rand.Rand, i, n int) {
	pick := f.ids[i : i+n]
	now := time.Now().UnixNano()
	for j := range pick {
		f.started[f.index[i+j]].Store(now)
	}
	h, err := f.seller.Hold(ctx, engine.HoldRequest{ShowID: f.show, SeatIDs: pick, TTL: holdTTL})
	if err != nil {
		return
	}
	done := time.Now().UnixNano()
	for j := range pick {
		f.returned[f.index[i+j]].Store(done)
	}
	f.holds.Add(1)
	if rng.IntN(3) == 0 {
		_ = f.seller.Release(ctx, h)
	}
}

// converge lets the streams drain, comparing every subscriber's map with the engine's
// (read again each round: the server's view may still be applying the last holds)
// until all are equal or wait is over; it returns how many are equal.
func (f *feedShow) converge(ctx context.Context, subs []*subscriber, wait time.Duration) (int, error) {
	deadline := time.Now().Add(wait)
	for {
		m, err := f.server.SeatMap(ctx, f.show)
		if err != nil {
			return 0, err
		}
		want := make([]byte, len(m.States))
		for i, st := range m.States {
			want[i] = string(st)[0]
		}
		equal := 0
		for _, s := range subs {
			if bytes.Equal(s.statesSnapshot(), want) {
				equal++
			}
		}
		if equal == len(subs) || time.Now().After(deadline) {
			return equal, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// report adds the run's row and goals: the lag from the Hold call to each subscriber
// (and from its return), and how many subscribers' maps equal the engine's.
func (f *feedShow) report(r *Report, subs []*subscriber, equal int, d time.Duration) {
	var lags, fromReturn []time.Duration
	events := 0
	for _, s := range subs {
		lags = append(lags, s.lags...)
		fromReturn = append(fromReturn, s.fromReturn...)
		events += s.events
	}
	slices.Sort(lags)
	slices.Sort(fromReturn)
	lag := stats{lat: lags}
	back := stats{lat: fromReturn}
	n := len(subs)
	merges := counterValue(f.reg, "holdfast_seatmap_watch_merges_total")
	r.Rows = append(r.Rows, Row{Workload: "seat-map feed over SSE", Variant: fmt.Sprintf("hold -> %s subscribers, %s seats", thousands(n), thousands(len(f.ids))), Clients: n,
		OpsPerS: float64(f.holds.Load()) / d.Seconds(), P50ms: lag.pct(.5), P99ms: lag.pct(.99),
		Note: fmt.Sprintf("lag from the Hold call; from its return p50 %.1f ms, p99 %.1f ms; %d holds, %d events delivered, %d merged for streams behind; %d/%d subscribers' maps equal the engine's",
			back.pct(.5), back.pct(.99), f.holds.Load(), events, int64(merges), equal, n)})
	r.goal(fmt.Sprintf("seat-map feed: change-to-client lag p99, %s SSE subscribers (ms)", thousands(n)), "<= 250", lag.pct(.99), lag.pct(.99) <= 250 && len(lags) > 0)
	r.goal(fmt.Sprintf("seat-map feed: subscribers whose final map equals the engine's (of %s)", thousands(n)), fmt.Sprintf("= %d", n), float64(equal), equal == n)
}
