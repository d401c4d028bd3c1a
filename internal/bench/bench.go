// Package bench measures holdfast side by side with its own raw limits and with the
// database-only design it replaces, on the same local servers in one run.
//
// It creates a scratch database (dropped at the end) and uses Redis key prefixes of its
// own (deleted at the end): it starts nothing it does not stop.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/migrations"
)

// Options tune a run.
type Options struct {
	DatabaseURL string                // a server where the bench may CREATE DATABASE
	Redis       redis.UniversalClient // noeviction
	Warmup      time.Duration         // per timed workload
	Duration    time.Duration         // per timed workload
	SaleSeats   int                   // flash sale: seats of the stadium
	SaleBuyers  int                   // best-available sale: concurrent buyers
	SaleRate    float64               // on-sale: buyers arriving per second after the ramp
	SaleTimeout time.Duration         // flash sale: give up after
	PoolSize    int                   // PostgreSQL connections, for both designs
	Progress    io.Writer             // a line as each workload starts, or nil
	Only        []string              // run only these workloads (fresh, seatmap, feed, best, hold, shape, memory, confirm, onsale, overload, venue, fair); all when empty
	Quick       bool                  // a smoke run: the on-sale only, small and short
}

// Row is one line of the result table.
type Row struct {
	Workload string  `json:"workload"`
	Variant  string  `json:"variant"`
	Clients  int     `json:"clients"`
	OpsPerS  float64 `json:"ops_per_s"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	Ratio    float64 `json:"ratio,omitempty"` // against the row it is compared with
	Note     string  `json:"note,omitempty"`
}

// Goal is one target of the benchmarks (docs/BENCHMARKS.md) with its measured value.
type Goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
}

// Report is a whole run.
type Report struct {
	Started time.Time `json:"started"`
	Rows    []Row     `json:"rows"`
	Goals   []Goal    `json:"goals"`
	Memory  Memory    `json:"memory"`
	Series  Series    `json:"series"`
}

// Series are what the charts draw (see WriteCharts).
type Series struct {
	// SoldOverTime is each design's seats sold by time into the on-sale (seconds).
	SoldOverTime map[string][]Point `json:"sold_over_time,omitempty"`
	// HoldP99ByRate is each design's hold p99 (ms) by arrival rate (buyers/s), from the
	// knee's steps.
	HoldP99ByRate map[string][]Point `json:"hold_p99_by_rate,omitempty"`
	// BatchSizes is how many group-committed batches of each size (the bucket's upper
	// bound) the on-sale's confirmations made.
	BatchSizes []Point `json:"batch_sizes,omitempty"`
	// FairSale is the fair on-sale's series by name: each variant's seats sold, and the
	// waiting room's length and admissions per second, by time into the sale (seconds).
	FairSale map[string][]Point `json:"fair_sale,omitempty"`
}

// Point is one point of a series.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Memory is what one hold, one sold seat, one Hold call and one Confirm call cost.
type Memory struct {
	RedisBytesPerHold     float64 `json:"redis_bytes_per_hold"`
	RedisBytesPerSoldSeat float64 `json:"redis_bytes_per_sold_seat"`
	// RedisFeedBytesPerHold is what the change feed adds to a hold while its entry is
	// in the feed; RedisFeedBytesPerShow is a show's feed at its length bound.
	RedisFeedBytesPerHold float64 `json:"redis_feed_bytes_per_hold"`
	RedisFeedBytesPerShow float64 `json:"redis_feed_bytes_per_show"`
	// RedisIndexBytesPerSeat is the best-available index per seat of a venue.
	RedisIndexBytesPerSeat float64 `json:"redis_index_bytes_per_seat"`
	HoldBytesPerOp         float64 `json:"hold_heap_bytes_per_op"`
	HoldAllocsPerOp        float64 `json:"hold_allocs_per_op"`
	ConfirmBytesPerOp      float64 `json:"confirm_heap_bytes_per_op"`
	ConfirmAllocsPerOp     float64 `json:"confirm_allocs_per_op"`
}

// env is the run's scratch database and Redis.
type env struct {
	o        Options
	pool     *pgxpool.Pool
	rdb      redis.UniversalClient
	prefixes []string
	runID    string
	opened   []*engine.Engine // closed when the run ends
	// xactProbes counts pgXacts's own queries.
	xactProbes int
	// checkpointSaid: a refused CHECKPOINT was reported (checkpoint).
	checkpointSaid bool
	inv            *inventory // the hold and shape workloads' shows, in this run's database
	saleSeed       uint64     // the last on-sale's seed (sale): each sale its own
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs every workload and returns the report.
func Run(ctx context.Context, o Options) (_ *Report, err error) {
	if o.Warmup == 0 {
		o.Warmup = time.Second
	}
	if o.Duration == 0 {
		o.Duration = 4 * time.Second
	}
	if o.SaleSeats == 0 {
		o.SaleSeats = 20_000
	}
	if o.SaleBuyers == 0 {
		o.SaleBuyers = 2_000
	}
	if o.SaleRate == 0 {
		o.SaleRate = 500
	}
	if o.SaleTimeout == 0 {
		o.SaleTimeout = 3 * time.Minute
	}
	if o.PoolSize == 0 {
		o.PoolSize = 64
	}
	e := &env{o: o, rdb: o.Redis, runID: randHex(4)}
	drop, err := e.openScratch(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		closeAll(e.opened)
		e.cleanRedis(context.WithoutCancel(ctx))
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	r := &Report{Started: time.Now()}
	// The first sale while the scratch database is fresh; then Redis-only workloads:
	// confirm and the sale write claims that later holds on the same inventory would meet.
	steps := []struct {
		key, name string
		fn        func(context.Context, *Report) error
	}{
		{"fresh", "first sale of a new database: PostgreSQL per sold seat, fresh and seeded, and what a sold seat writes", e.freshWorkload},
		{"seatmap", "seat map: the view vs the old path, and over HTTP", e.seatMapWorkload},
		{"feed", "seat-map feed: a sale watched by 1,000 SSE subscribers, then 5,000", e.feedWorkload},
		{"best", "best-available: cost by how sold the show is, and the sale, pick vs best", e.bestWorkload},
		{"hold", "hold: engine vs raw script", e.holdWorkload},
		{"join", "waiting room: what a join costs Redis, with one library and with stale ones beside it", e.joinWorkload},
		{"shape", "shape: seats per hold, hot show vs 100 shows", e.shapeWorkload},
		{"memory", "memory", e.memoryWorkload},
		{"confirm", "confirm: engine vs raw SQL", e.confirmWorkload},
		{"onsale", "on-sale: open-loop arrivals, holdfast vs database-only", e.onsaleWorkload},
		{"overload", "on-sale twice too big: twice the arrivals, holdfast", e.overloadWorkload},
		{"venue", "venue scale: a 100,000-seat arena's map, stream and page", e.venueWorkload},
		{"fair", "fair on-sale: 5x the seats in arrivals, 20% bots, without and with a waiting room", e.fairWorkload},
	}
	for _, s := range steps {
		if len(o.Only) > 0 && !slices.Contains(o.Only, s.key) {
			continue
		}
		e.progress("== %s", s.name)
		began := time.Now()
		err := s.fn(ctx, r)
		e.progress("   (%s: %v)", s.key, time.Since(began).Round(100*time.Millisecond))
		// A workload's engines end with it: their seat-map followers and repair loops
		// would otherwise run on under the next workload's measurements.
		closeAll(e.opened)
		e.opened = nil
		if err != nil {
			return r, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return r, nil
}

func (e *env) progress(format string, args ...any) {
	if e.o.Progress != nil {
		fmt.Fprintf(e.o.Progress, format+"\n", args...)
	}
}

// openScratch creates and migrates a database of the run's own.
func (e *env) openScratch(ctx context.Context) (func() error, error) {
	u, err := url.Parse(e.o.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	admin, err := pgx.Connect(ctx, e.o.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer admin.Close(ctx)
	name := "holdfast_bench_" + e.runID
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create scratch database (the bench needs CREATEDB): %w", err)
	}
	drop := func() error {
		if e.pool != nil {
			e.pool.Close()
		}
		c, err := pgx.Connect(context.Background(), e.o.DatabaseURL)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return drop, err
	}
	cfg.MaxConns = int32(e.o.PoolSize)
	if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return drop, err
	}
	if err := migrations.Up(ctx, e.pool); err != nil {
		return drop, err
	}
	return drop, nil
}

// poolOf is a pool of its own on the bench's database, of conns connections.
func (e *env) poolOf(ctx context.Context, conns int) (*pgxpool.Pool, error) {
	cfg := e.pool.Config()
	cfg.MaxConns = int32(conns)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// prefix returns a fresh Redis key prefix, deleted at the end of the run.
func (e *env) prefix() string {
	p := fmt.Sprintf("hfbench%s%d", e.runID, len(e.prefixes))
	e.prefixes = append(e.prefixes, p)
	return p
}

func (e *env) cleanRedis(ctx context.Context) { e.cleanPrefixes(ctx, e.rdb) }

// cleanPrefixes deletes the run's keys on one client.
func (e *env) cleanPrefixes(ctx context.Context, rdb redis.UniversalClient) {
	for _, p := range e.prefixes {
		iter := rdb.Scan(ctx, 0, p+":*", 5000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 1000 {
				rdb.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			rdb.Unlink(ctx, batch...)
		}
	}
}

// engine returns an engine over the scratch database with a fresh Redis prefix.
func (e *env) engine(cfg engine.Config) (*engine.Engine, error) {
	return e.engineAt(e.prefix(), cfg)
}

// engineAt is an engine on a key prefix of the run's, closed with its workload.
func (e *env) engineAt(prefix string, cfg engine.Config) (*engine.Engine, error) {
	cfg.KeyPrefix = prefix
	eng, err := engine.New(e.pool, e.rdb, &cfg)
	if err == nil {
		e.opened = append(e.opened, eng)
	}
	return eng, err
}

// stats are one timed run's operations and latencies.
type stats struct {
	ops, errs int64
	issued    int64 // sequence numbers handed out, warm-up included
	elapsed   time.Duration
	ranOut    bool // the prepared work ran out before the end: elapsed is up to then
	lat       []time.Duration
}

// merge is s and t as one measurement.
func (s stats) merge(t stats) stats {
	lat := append(slices.Clone(s.lat), t.lat...)
	slices.Sort(lat)
	return stats{ops: s.ops + t.ops, errs: s.errs + t.errs, issued: s.issued + t.issued, elapsed: s.elapsed + t.elapsed, ranOut: s.ranOut || t.ranOut, lat: lat}
}

func (s stats) rate() float64 { return float64(s.ops) / s.elapsed.Seconds() }

func (s stats) pct(p float64) float64 {
	if len(s.lat) == 0 {
		return 0
	}
	return float64(s.lat[min(len(s.lat)-1, int(float64(len(s.lat))*p))].Microseconds()) / 1000
}

// drive runs op from clients goroutines: first for the warm-up (not counted), then for
// the duration. op gets a sequence number unique across the run and returns an error
// when the operation did not succeed (counted apart).
func drive(ctx context.Context, clients int, warmup, duration time.Duration, op func(ctx context.Context, seq int64) error) stats {
	var seq atomic.Int64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	lats := make([][]time.Duration, clients)
	var ops, errs atomic.Int64
	var ranOut atomic.Int64 // unix ns of the first errExhausted while measuring
	stop := make(chan struct{})
	for c := range clients {
		wg.Go(func() {
			local := make([]time.Duration, 0, 1<<14)
			for {
				select {
				case <-stop:
					lats[c] = local
					return
				default:
				}
				if ctx.Err() != nil { // interrupted: wait for stop without spinning
					<-stop
					lats[c] = local
					return
				}
				t := time.Now()
				err := op(ctx, seq.Add(1)-1)
				d := time.Since(t)
				if errors.Is(err, errExhausted) { // neither an operation nor a latency
					if measuring.Load() {
						ranOut.CompareAndSwap(0, time.Now().UnixNano())
					}
					<-stop
					lats[c] = local
					return
				}
				if measuring.Load() {
					local = append(local, d)
					if err != nil {
						errs.Add(1)
					} else {
						ops.Add(1)
					}
				}
			}
		})
	}
	time.Sleep(warmup)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	if at := ranOut.Load(); at != 0 {
		// The prepared work ran out: the rate is over the time it lasted.
		elapsed = time.Unix(0, at).Sub(start)
	}
	close(stop)
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	return stats{ops: ops.Load(), errs: errs.Load(), issued: seq.Load(), elapsed: elapsed, ranOut: ranOut.Load() != 0, lat: all}
}

// crowd runs n buyers at once, each buyer(b) until it returns false or ctx ends, and
// returns every attempt's latency (sorted) and how long the crowd took. A buyer times an
// attempt by returning it from attempt; a zero duration is not an attempt.
func crowd(ctx context.Context, n int, buyer func(ctx context.Context, b int) (attempt time.Duration, more bool)) ([]time.Duration, time.Duration) {
	lats := make([][]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for b := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				d, more := buyer(ctx, b)
				if d > 0 {
					lats[b] = append(lats[b], d)
				}
				if !more {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	return all, elapsed
}

// WriteJSON writes the report as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%-30s %-28s %7s %11s %9s %9s %7s  %s\n", "workload", "variant", "clients", "ops/s", "p50 ms", "p99 ms", "ratio", "note")
	for _, row := range r.Rows {
		ratio := ""
		if row.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f", row.Ratio)
		}
		fmt.Fprintf(w, "%-30s %-28s %7d %11.0f %9.2f %9.2f %7s  %s\n", row.Workload, row.Variant, row.Clients, row.OpsPerS, row.P50ms, row.P99ms, ratio, row.Note)
	}
	if m := r.Memory; m != (Memory{}) { // the memory workload ran
		fmt.Fprintf(w, "\nmemory: Redis %.0f bytes per live hold (+%.0f while its feed entry lasts; a show's feed at its bound: %.0f KB), %.0f bytes per sold seat, %.0f bytes per seat for the best-available index; engine %.0f B and %.1f allocs per Hold, %.0f B and %.1f allocs per Confirm\n",
			m.RedisBytesPerHold, m.RedisFeedBytesPerHold, m.RedisFeedBytesPerShow/1024, m.RedisBytesPerSoldSeat, m.RedisIndexBytesPerSeat, m.HoldBytesPerOp, m.HoldAllocsPerOp, m.ConfirmBytesPerOp, m.ConfirmAllocsPerOp)
	}
	fmt.Fprintln(w, "\ngoals:")
	for _, g := range r.Goals {
		verdict := "MET"
		if !g.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "  %-6s %-58s %-12s measured %.2f\n", verdict, g.Name, g.Target, g.Value)
	}
}

// PrintSpread writes, for each goal of the runs, its value in every run (in order),
// their range, and in how many runs it was met.
func PrintSpread(w io.Writer, runs []*Report) {
	type spread struct {
		target string
		values []float64
		met    int
	}
	var names []string
	by := map[string]*spread{}
	for _, r := range runs {
		for _, g := range r.Goals {
			sp := by[g.Name]
			if sp == nil {
				sp = &spread{target: g.Target}
				by[g.Name] = sp
				names = append(names, g.Name)
			}
			sp.values = append(sp.values, g.Value)
			if g.Met {
				sp.met++
			}
		}
	}
	fmt.Fprintf(w, "goals over %d runs:\n", len(runs))
	for _, n := range names {
		sp := by[n]
		vals := make([]string, len(sp.values))
		for i, v := range sp.values {
			vals[i] = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(w, "  met in %d of %d  %-60s %-10s runs %s (spread %.2f–%.2f)\n", sp.met, len(runs), n, sp.target,
			strings.Join(vals, ", "), slices.Min(sp.values), slices.Max(sp.values))
	}
}

func (r *Report) goal(name, target string, value float64, met bool) {
	r.Goals = append(r.Goals, Goal{Name: name, Target: target, Value: value, Met: met})
}
