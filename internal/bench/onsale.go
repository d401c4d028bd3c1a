package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/internal/progress"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
)

// The open-loop on-sale: buyers arrive at a given rate, whatever the system's state (a
// ramp, then a spike, then the rate), and each one loads the seat map, asks for 1–6
// seats — best available for most, named seats for some, aimed at the best free seats
// — retries a bounded number of times when refused, "pays" for a think time, then
// confirms (most; some confirmations retried as if the response was lost), releases
// (some) or abandons the hold to expire (the rest). Both designs run the same buyers on
// the same PostgreSQL.

// onsaleDesign is one way to run the on-sale.
type onsaleDesign interface {
	// seatMap loads the seat map and returns the free seats, best first (at most
	// limit; the map itself is read whole).
	seatMap(ctx context.Context, limit int) ([]int, error)
	holdBest(ctx context.Context, buyer string, n int) (any, error)
	holdNamed(ctx context.Context, buyer string, seats []int) (any, error)
	confirm(ctx context.Context, buyer string, h any, key string) (int, error) // seats booked
	release(ctx context.Context, h any) error
	sold(ctx context.Context) (int, error)
	doubleBooked(ctx context.Context) (int, error)
}

// withJobs is a design with periodic jobs of its own (the rival's sweep of expired
// holds and its seat-map snapshot). runOnsale runs them only while that design's sale
// runs, so that another design's sale neither pays for them nor has them counted in its
// PostgreSQL CPU.
type withJobs interface {
	// startJobs starts the jobs, which run until ctx ends; wait waits for them to end.
	startJobs(ctx context.Context) (wait func())
}

// onsale sizes a sale.
type onsaleParams struct {
	seats      int
	rate       float64       // buyers per second after the ramp
	ramp       bool          // a 2 s ramp, then the spike for 2 s, then the rate; else the rate throughout
	spike      float64       // times the rate during the spike
	think      time.Duration // the longest think time (the shortest is a sixth of it)
	holdTTL    time.Duration
	timeout    time.Duration
	maxBuyers  int           // buyers in flight at most (arrivals past it are turned away)
	arrivals   time.Duration // >0: arrivals stop after it, and the sale ends when its buyers are done
	noConfirms bool
}

// onsaleResult is one design's sale.
type onsaleResult struct {
	arrived, turnedAway   int64 // arrived is read by the progress display meanwhile (atomic)
	holdAttempts, refused int64
	shed                  int64           // confirmations shed (ErrOverloaded) and tried again
	holdShed              int64           // holds shed (ErrOverloaded: too many in flight) and tried again
	holdGaveUp            int64           // buyers who left after being shed 50 times
	grantLat              []time.Duration // from a buyer's first hold attempt to a granted hold, retries included
	confRefused           int64           // confirmations refused (the hold lost, expired while queued)
	bookings, seatsSold   int64
	soldOutAfter          time.Duration // 0: not sold out
	elapsed               time.Duration
	timeline              []timePoint // seats sold, every 250 ms
	mapLat, holdLat       []time.Duration
	confLat               []time.Duration
	shedLat               []time.Duration // how long a shed confirmation took to be told
	errors                int64
	firstErr              atomic.Value
}

var (
	errOnsaleRefused = errors.New("refused")
	errOnsaleShed    = errors.New("shed: overloaded, try again")
)

// timePoint is the seats sold at a time into a sale.
type timePoint struct {
	at   time.Duration
	sold int64
}

// runOnsale runs one open-loop sale on d until every seat is sold or p.timeout,
// showing its progress on w (nil: none).
func runOnsale(ctx context.Context, d onsaleDesign, p onsaleParams, seed uint64, w io.Writer) *onsaleResult {
	o := &onsale{s: newSaleRun(ctx, p.timeout), d: d, p: p, seed: seed, res: &onsaleResult{}}
	defer o.s.cancel()
	if j, ok := d.(withJobs); ok {
		jobsCtx, stopJobs := context.WithCancel(o.s.ctx)
		defer j.startJobs(jobsCtx)() // started now; at return stopped (below, run first), then waited for
		defer stopJobs()
	}
	if w != nil {
		defer o.showProgress(w)()
	}
	o.s.every(250*time.Millisecond, func(at time.Duration) bool {
		o.mu.Lock()
		o.res.timeline = append(o.res.timeline, timePoint{at, o.booked.Load()})
		o.mu.Unlock()
		return true
	})
	o.s.arrive(o.due(), o.admit)
	// Arrivals stop; buyers in flight finish (the last seats may sell now).
	o.s.waitUntil(o.s.buyersDone())
	res := o.res
	res.elapsed = o.s.finish()
	res.soldOutAfter = o.s.soldAt
	res.seatsSold = o.booked.Load()
	for _, l := range [][]time.Duration{res.mapLat, res.holdLat, res.confLat, res.shedLat, res.grantLat} {
		slices.Sort(l)
	}
	return res
}

// onsale is one open-loop sale: its buyers' model on the sale harness.
type onsale struct {
	s                *saleRun
	d                onsaleDesign
	p                onsaleParams
	seed             uint64
	res              *onsaleResult
	mu               sync.Mutex // res's latencies and timeline
	inFlight, booked atomic.Int64
}

// due is the arrivals: a ramp to the rate over 2 s, a spike for 2 s, then the rate, until
// p.arrivals (if set).
func (o *onsale) due() func(at time.Duration, arrived int) (int, bool) {
	var owed float64
	var last time.Duration
	return func(at time.Duration, arrived int) (int, bool) {
		if o.p.arrivals > 0 && at >= o.p.arrivals {
			return arrived, false
		}
		owed += o.rateAt(at) * (at - last).Seconds()
		last = at
		n := int(owed)
		owed -= float64(n)
		return arrived + n, true
	}
}

func (o *onsale) rateAt(t time.Duration) float64 {
	switch {
	case !o.p.ramp:
		return o.p.rate
	case t < 2*time.Second:
		return o.p.rate * t.Seconds() / 2
	case t < 4*time.Second:
		return o.p.rate * o.p.spike
	}
	return o.p.rate
}

// admit is an arrival's turn, or nil when p.maxBuyers are in flight (turned away).
func (o *onsale) admit(int) func() {
	id := atomic.AddInt64(&o.res.arrived, 1)
	if o.inFlight.Load() >= int64(o.p.maxBuyers) {
		o.res.turnedAway++
		return nil
	}
	o.inFlight.Add(1)
	return func() { o.buyer(id) }
}

// showProgress shows the sale's progress on w until the returned func is called.
func (o *onsale) showProgress(w io.Writer) (stop func()) {
	stopShow := make(chan struct{})
	var shown sync.WaitGroup
	shown.Go(func() {
		progress.Show(w, stopShow, "seats sold", o.p.seats, func() int { return int(o.booked.Load()) }, func() string {
			return fmt.Sprintf("buyers %d, in flight %d, hold attempts %d", atomic.LoadInt64(&o.res.arrived), o.inFlight.Load(), atomic.LoadInt64(&o.res.holdAttempts))
		})
	})
	return func() { close(stopShow); shown.Wait() }
}

func (o *onsale) record(l *[]time.Duration, d time.Duration) {
	o.mu.Lock()
	*l = append(*l, d)
	o.mu.Unlock()
}

func (o *onsale) fail(err error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	if atomic.AddInt64(&o.res.errors, 1) == 1 {
		o.res.firstErr.Store(err)
	}
}

// buyer is one buyer: load the map, hold 1-6 seats (best available mostly, some named),
// think, then confirm (80%), release (10%) or abandon the hold.
func (o *onsale) buyer(id int64) {
	defer o.inFlight.Add(-1)
	rng := rand.New(rand.NewPCG(o.seed, uint64(id)))
	name := "b" + strconv.FormatUint(o.seed, 36) + "-" + strconv.FormatInt(id, 36) // unique across runs on a show
	h := o.hold(rng, name)
	if h == nil || !o.s.think(rng, o.p.think) {
		return
	}
	r := rng.IntN(100)
	if o.p.noConfirms {
		r = 85 // release, so that the inventory lasts
	}
	switch {
	case r < 80:
		o.buy(rng, name, h)
	case r < 90:
		if err := o.d.release(o.s.ctx, h); err != nil && !errors.Is(err, errOnsaleRefused) {
			o.fail(err)
		}
	}
	// else: abandoned; the hold expires by itself
}

// hold loads the seat map and tries to hold 1-6 seats, three times at most (a shed try
// not counted, 50 at most); nil when nothing was held.
func (o *onsale) hold(rng *rand.Rand, name string) any {
	ctx := o.s.ctx
	t := time.Now()
	free, err := o.d.seatMap(ctx, 64)
	o.record(&o.res.mapLat, time.Since(t))
	if err != nil {
		o.fail(err)
		return nil
	}
	if len(free) == 0 {
		return nil // sold out, or every seat held: a real buyer would wait; this one leaves
	}
	n := []int{1, 2, 2, 2, 3, 4, 4, 5, 6}[rng.IntN(9)]
	firstTry := time.Now()
	for attempt, shed := 0, 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		t = time.Now()
		var h any
		if rng.IntN(100) < 80 {
			h, err = o.d.holdBest(ctx, name, n)
		} else {
			pick := slices.Clone(free)
			rng.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
			h, err = o.d.holdNamed(ctx, name, pick[:min(n, len(pick))])
		}
		o.record(&o.res.holdLat, time.Since(t))
		atomic.AddInt64(&o.res.holdAttempts, 1)
		switch {
		case err == nil:
			o.record(&o.res.grantLat, time.Since(firstTry))
			return h
		case errors.Is(err, errOnsaleShed):
			if shed == 50 { // a real buyer would have left long ago
				atomic.AddInt64(&o.res.holdGaveUp, 1)
				return nil
			}
			// Shed at once (503 with Retry-After over HTTP): try again shortly.
			atomic.AddInt64(&o.res.holdShed, 1)
			shed++
			attempt--
			o.s.backOff(rng)
		case !errors.Is(err, errOnsaleRefused):
			o.fail(err)
			return nil
		default:
			atomic.AddInt64(&o.res.refused, 1)
			if free, err = o.d.seatMap(ctx, 64); err != nil || len(free) == 0 {
				return nil
			}
		}
	}
	return nil
}

// buy confirms h, and one time in ten again as if the reply was lost.
func (o *onsale) buy(rng *rand.Rand, name string, h any) {
	key := uuid.NewString()
	t := time.Now()
	seats, err := o.confirm(rng, name, h, key)
	o.record(&o.res.confLat, time.Since(t))
	if err == nil && rng.IntN(100) < 10 { // the response was lost: the client retries
		_, err = o.confirm(rng, name, h, key)
	}
	switch {
	case err == nil:
		atomic.AddInt64(&o.res.bookings, 1)
		if o.booked.Add(int64(seats)) >= int64(o.p.seats) {
			o.s.markSoldOut()
		}
	case errors.Is(err, errOnsaleRefused):
		atomic.AddInt64(&o.res.confRefused, 1)
	default:
		o.fail(err)
	}
}

// confirm confirms h under key, trying again shortly after a shed (503 with Retry-After
// over HTTP), as a client would, while the hold lives.
func (o *onsale) confirm(rng *rand.Rand, name string, h any, key string) (int, error) {
	for {
		attempt := time.Now()
		seats, err := o.d.confirm(o.s.ctx, name, h, key)
		if !errors.Is(err, errOnsaleShed) || o.s.ctx.Err() != nil {
			return seats, err
		}
		o.record(&o.res.shedLat, time.Since(attempt))
		atomic.AddInt64(&o.res.shed, 1)
		o.s.backOff(rng)
	}
}

// checkpoint writes PostgreSQL's dirty pages out now (CHECKPOINT), so that the
// checkpointer's work for what ran before (a previous run, the design measured before
// this one) is not counted in the next measurement. Best effort: a role without the
// right (superuser or pg_checkpoint) measures without it, and says so once.
func (e *env) checkpoint(ctx context.Context) {
	if _, err := e.pool.Exec(ctx, "CHECKPOINT"); err != nil && !e.checkpointSaid {
		e.checkpointSaid = true
		e.progress("   (CHECKPOINT refused: %v; measurements may include earlier work)", err)
	}
}

// resources are what a design's sale cost the machine.
type resources struct {
	xacts, walBytes, pgCPU, redisCalls float64
	redisCPU, selfCPU                  float64 // CPU seconds of the Redis server, of this process
}

// machineCPU is the CPU seconds of every process a sale uses: this one (the buyers and
// the design: the engine, or the database-only design's code), Redis and PostgreSQL.
func (r resources) machineCPU() float64 { return r.selfCPU + r.redisCPU + r.pgCPU }

// measure reads the counters: PostgreSQL's transactions (pgXacts), its WAL bytes, the CPU
// seconds of the server's processes (serverCPU), Redis's commands and CPU, and this
// process's CPU.
func (e *env) measure(ctx context.Context) (resources, error) {
	var r resources
	var err error
	if r.xacts, err = e.pgXacts(ctx); err != nil {
		return r, err
	}
	var backend int
	if err := e.pool.QueryRow(ctx, "SELECT wal_bytes::float8, pg_backend_pid() FROM pg_stat_wal").Scan(&r.walBytes, &backend); err != nil {
		return r, err
	}
	e.xactProbes++ // that query's own transaction too
	r.pgCPU = serverCPU(backend)
	if _, ticks, ok := procStat(os.Getpid()); ok {
		r.selfCPU = ticks / userHZ
	}
	if r.redisCPU, err = e.redisCPU(ctx); err != nil {
		return r, err
	}
	r.redisCalls, err = e.redisCalls(ctx)
	return r, err
}

// procStat is a process's parent and its CPU ticks (user and system, its own and its
// exited children's), from /proc/PID/stat; ok is false when it cannot be read.
func procStat(pid int) (ppid int, ticks float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')') // the command name may hold anything
	if end < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 15 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	for _, f := range fields[11:15] { // utime, stime, cutime, cstime
		v, _ := strconv.ParseFloat(f, 64)
		ticks += v
	}
	return ppid, ticks, true
}

// serverCPU is the CPU seconds (user and system) of the PostgreSQL server that runs
// backend: its postmaster and every process it started, the exited ones included (the
// backends the pool closed, the autovacuum workers), and nothing of any other server on
// the machine. 0 when the server runs elsewhere.
func serverCPU(backend int) float64 {
	postmaster, _, ok := procStat(backend)
	if !ok {
		return 0
	}
	_, ticks, _ := procStat(postmaster) // its exited children are in its own counts
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == postmaster {
			continue
		}
		if ppid, t, ok := procStat(pid); ok && ppid == postmaster {
			ticks += t
		}
	}
	return ticks / userHZ
}

// userHZ is the clock ticks a second of /proc/PID/stat's CPU times.
const userHZ = 100

// onsaleWorkload runs the open-loop on-sale on both designs (and, but in the quick run,
// on holdfast with batches that wait for more confirmations), then finds each design's
// knee.
func (e *env) onsaleWorkload(ctx context.Context, r *Report) error {
	p := e.saleParams()
	venue := demo.Venue(p.seats)
	designs, waiting, err := e.onsaleSetUp(ctx, r, p, venue)
	if err != nil {
		return err
	}
	hf, err := e.sale(ctx, r, p, designs[0], p.timeout)
	if err != nil {
		return err
	}
	if sizes, err := batchSizes(designs[0].reg); err == nil {
		r.Series.BatchSizes = sizes
	}
	r.goal("on-sale PostgreSQL transactions per sold seat, holdfast", "<= 1.10", hf.xacts, hf.xacts <= 1.1)
	r.goal("on-sale PostgreSQL CPU per sold seat (ms), holdfast", "<= 0.15", hf.cpu, hf.cpu <= 0.15)
	if !e.o.Quick {
		w, err := e.sale(ctx, r, p, waiting, p.timeout)
		if err != nil {
			return err
		}
		r.goal("on-sale PostgreSQL CPU per sold seat (ms), "+waiting.name, "<= 0.15", w.cpu, w.cpu <= 0.15)
	}
	for i, d := range designs[1:] {
		timeout := p.timeout
		if hf.soldOut > 0 {
			// Past three times holdfast's sell-out the goal is decided: stop there.
			timeout = min(p.timeout, 3*hf.soldOut+time.Second)
		}
		other, err := e.sale(ctx, r, p, d, timeout)
		if err != nil {
			return err
		}
		soldOutGoal(r, d.name, i > 0, hf, other)
		if d.name == dbRival {
			ratio := hf.machine / other.machine
			r.goal("on-sale CPU of every process per sold seat, holdfast / "+d.name, "<= 0.33", ratio, ratio <= 1.0/3)
		}
	}
	if e.o.Quick {
		return nil
	}
	return e.onsaleKnee(ctx, r, venue)
}

// onsaleSetUp measures a commit's latency, makes the designs (and, but in the quick run,
// holdfast with batches that wait), books a history, and vacuums and analyzes the
// set-up's rows (every design's seats, the history) before any sale, so that the first
// sale's VACUUM ANALYZE pays for its own rows only; then every connection is opened
// again, to plan on these tables.
func (e *env) onsaleSetUp(ctx context.Context, r *Report, p onsaleParams, venue []engine.Seat) (designs []namedDesign, waiting namedDesign, err error) {
	if err := e.commitLatency(ctx, r); err != nil {
		return nil, waiting, err
	}
	if designs, err = e.onsaleDesigns(ctx, "onsale", venue, p.holdTTL); err != nil {
		return nil, waiting, err
	}
	if !e.o.Quick {
		if waiting, err = e.onsaleWaiting(ctx, "onsale-wait", venue, p.holdTTL); err != nil {
			return nil, waiting, err
		}
	}
	if err := e.onsaleHistory(ctx, min(5_000, p.seats/4)); err != nil {
		return nil, waiting, err
	}
	if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return nil, waiting, err
	}
	e.pool.Reset()
	return designs, waiting, nil
}

// saleCost is what one design's on-sale cost.
type saleCost struct {
	soldOut    time.Duration
	xacts, cpu float64 // per sold seat: PostgreSQL transactions, its CPU in ms
	machine    float64 // per sold seat: the CPU of every process (machineCPU) in ms
}

// sale runs the on-sale on d, stopping at timeout, adds its rows and returns its cost
// per sold seat.
func (e *env) sale(ctx context.Context, r *Report, p onsaleParams, d namedDesign, timeout time.Duration) (saleCost, error) {
	e.saleSeed++
	e.progress("   %s: %.0f buyers/s (x%.0f spike), %d seats, think up to %v", d.name, p.rate, p.spike, p.seats, p.think)
	e.checkpoint(ctx)
	before, err := e.measure(ctx)
	if err != nil {
		return saleCost{}, err
	}
	p.timeout = timeout
	res := runOnsale(ctx, d.d, p, e.saleSeed, e.o.Progress)
	// The sale's dead rows are vacuumed and its new rows analyzed now, inside its
	// window: whether autovacuum (a round a minute) happened to reach them during a 30 s
	// sale or only after it, perhaps during the next design's, moved a design's
	// PostgreSQL CPU per sold seat by half from run to run. (The ANALYZE samples every
	// table, changed or not: a fixed cost, the same for each sale.)
	if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return saleCost{}, err
	}
	after, err := e.measure(ctx)
	if err != nil {
		return saleCost{}, err
	}
	sold, err := checkSale(ctx, d.name, d.d, res)
	if err != nil {
		return saleCost{}, err
	}
	seats := max(1, float64(sold))
	machineMs := 1000 * (after.machineCPU() - before.machineCPU())
	c := saleCost{soldOut: res.soldOutAfter, xacts: (after.xacts - before.xacts) / seats, cpu: 1000 * (after.pgCPU - before.pgCPU) / seats,
		machine: machineMs / seats}
	note := saleNote(p, res, sold) + fmt.Sprintf("; per sold seat: %.2f PG transactions, %.0f WAL bytes, %.2f ms PG CPU, %.1f Redis commands",
		c.xacts, (after.walBytes-before.walBytes)/seats, c.cpu, (after.redisCalls-before.redisCalls)/seats) +
		fmt.Sprintf("; CPU of every process %.2f ms per sold seat (this process, the buyers and the design, %.2f; Redis %.2f; PG %.2f), %.3f ms per hold attempt",
			c.machine, 1000*(after.selfCPU-before.selfCPU)/seats, 1000*(after.redisCPU-before.redisCPU)/seats, c.cpu,
			machineMs/max(1, float64(res.holdAttempts)))
	e.saleRows(r, "on-sale", d.name, d.name, res, note)
	return c, nil
}

// soldOutGoal is the goal of holdfast's time to sell out against another design's.
func soldOutGoal(r *Report, other string, comparison bool, hf, o saleCost) {
	name := "on-sale time to sell out, holdfast / " + other
	if comparison {
		name += " (for comparison)"
	}
	switch {
	case hf.soldOut == 0:
		r.goal(name, "<= 0.33", 0, false)
	case o.soldOut == 0: // stopped unsold at 3x holdfast's time
		r.goal(name+" (not sold out: at most)", "<= 0.33", 1.0/3, true)
	default:
		ratio := hf.soldOut.Seconds() / o.soldOut.Seconds()
		r.goal(name, "<= 0.33", ratio, ratio <= 1.0/3)
	}
}

// onsaleHistory books n one-seat bookings of a past show, as the confirm workload
// seeds its tables: a database that has sold before. On empty booking tables the first
// design's batches would cache plans made for empty tables (a scan of the whole table
// where a lookup by key is meant) and keep them while the sale grows the tables, until
// an ANALYZE: that took holdfast's PostgreSQL CPU per sold seat from about 0.3 ms to
// 0.5–1.0 ms, in the first sale of each run only (docs/BENCHMARKS.md).
func (e *env) onsaleHistory(ctx context.Context, n int) error {
	eng, err := e.engine(engine.Config{})
	if err != nil {
		return err
	}
	return e.bookHistory(ctx, eng, "onsale-history", n)
}

// commitLatency reports what one small write transaction alone costs on this machine
// (a one-row update, committed; most of it the WAL's fsync): what the database-only
// design pays for every hold and every release, one after another, and so what its knee
// depends on more than holdfast's does.
func (e *env) commitLatency(ctx context.Context, r *Report) error {
	if _, err := e.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_commit (id int PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO bench_commit VALUES (1, 0) ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	const n = 300
	lat := make([]time.Duration, 0, n)
	before, err := e.measure(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	for range n {
		t := time.Now()
		if _, err := e.pool.Exec(ctx, "UPDATE bench_commit SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	after, err := e.measure(ctx)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	// Its PostgreSQL CPU is the floor of any transaction's, a batch's included.
	r.Rows = append(r.Rows, Row{Workload: "PostgreSQL commit, one row, alone", Variant: "-", Clients: 1,
		OpsPerS: n / elapsed.Seconds(), P50ms: p50(lat), P99ms: p99(lat),
		Note: fmt.Sprintf("a one-row UPDATE and its COMMIT (fsync), one after another: what the database-only design pays per hold and per release; %.3f ms PG CPU each",
			1000*(after.pgCPU-before.pgCPU)/n)})
	return nil
}

// saleBatchWait is how long the on-sale's second holdfast waits for more
// confirmations after the first of a batch (Config.ConfirmBatchWait).
const saleBatchWait = 25 * time.Millisecond

// onsaleWaiting sets up a show of the venue on an engine of its own whose batches wait
// saleBatchWait for more confirmations: fewer, larger transactions for the same
// sale, paid in confirmation latency.
func (e *env) onsaleWaiting(ctx context.Context, show string, venue []engine.Seat, ttl time.Duration) (namedDesign, error) {
	eng, err := e.engine(engine.Config{MaxSeatsPerHold: 6, MaxSeatsPerHolder: 6, ConfirmBatchWait: saleBatchWait, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return namedDesign{}, err
	}
	if err := eng.CreateShowLayout(ctx, show, venue); err != nil {
		return namedDesign{}, err
	}
	hf, err := newOnsaleHoldfast(ctx, e, eng, show, ttl)
	if err != nil {
		return namedDesign{}, err
	}
	return namedDesign{fmt.Sprintf("holdfast, batches wait %v", saleBatchWait), hf, nil}, nil
}

// kneeBisections is how many times the knee search halves the gap between the last rate
// met and the first missed.
const kneeBisections = 3

// onsaleKnee steps the arrival rate (buyers who load the map, hold and release, so
// that the inventory lasts), doubling it, then bisects between the last rate met and
// the first missed, and reports the highest rate at which hold p99 stays within 100 ms,
// for each design.
func (e *env) onsaleKnee(ctx context.Context, r *Report, venue []engine.Seat) error {
	designs, err := e.onsaleDesigns(ctx, "knee", venue, 5*time.Second)
	if err != nil {
		return err
	}
	knees := make([]float64, len(designs))
	for i, d := range designs {
		if d.name == dbRival {
			if knees[i], err = e.rivalKnee(ctx, r, d, len(venue)); err != nil {
				return err
			}
			continue
		}
		knees[i] = e.knee(ctx, r, d, d.name, len(venue))
		r.Rows = append(r.Rows, Row{Workload: kneeWorkload, Variant: d.name, OpsPerS: knees[i], Note: kneeNote})
	}
	for i, d := range designs[1:] {
		name := "on-sale knee, holdfast / " + d.name
		if i > 0 {
			name += " (for comparison)"
		}
		ratio := knees[0] / max(knees[i+1], 12.5) // below the first step: at most half of it
		r.goal(name, ">= 5.00", ratio, ratio >= 5)
		if i == 0 { // the knee that goes with the whole machine's CPU per sold seat
			r.goal(name+", beside the whole machine's CPU", ">= 2.00", ratio, ratio >= 2)
		}
	}
	return nil
}

const kneeWorkload = "on-sale: knee (hold p99 <= 100 ms)"

var kneeNote = fmt.Sprintf("buyers/s arriving (seat map, hold, release), stepped x2 from 25, then %d bisections", kneeBisections)

// rivalKnee is the database-only rival's knee on each of rawPools (it pays a
// transaction for every hold and release, so its pool's size matters as the raw
// confirm design's does), a row each, and its best: the baseline.
func (e *env) rivalKnee(ctx context.Context, r *Report, d namedDesign, seats int) (float64, error) {
	rival := d.d.(*onsaleDBSnapshot)
	bestKnee, best := 0.0, 0
	for _, conns := range rawPools {
		pool, err := e.poolOf(ctx, conns)
		if err != nil {
			return 0, err
		}
		rival.pool = pool
		name := fmt.Sprintf("%s, %d connections", d.name, conns)
		k := e.knee(ctx, r, d, name, seats)
		rival.pool = e.pool
		pool.Close()
		r.Rows = append(r.Rows, Row{Workload: kneeWorkload, Variant: name, OpsPerS: k, Note: kneeNote})
		if k > bestKnee || best == 0 {
			bestKnee, best = k, conns
		}
	}
	r.Rows = append(r.Rows, Row{Workload: kneeWorkload, Variant: d.name + ", best pool", OpsPerS: bestKnee,
		Note: fmt.Sprintf("%d connections; %s", best, kneeNote)})
	return bestKnee, nil
}

// knee finds d's knee: doubling the rate from 25 until one is missed, then halving the
// gap between the last rate met and the first missed kneeBisections times. Each rate
// run is a point of series in the report's chart.
func (e *env) knee(ctx context.Context, r *Report, d namedDesign, series string, seats int) float64 {
	e.checkpoint(ctx)
	met, missed := 0.0, 0.0
	for rate := 25.0; rate <= 25_600; rate *= 2 {
		if !e.kneeMet(ctx, r, d, series, seats, rate) {
			missed = rate
			break
		}
		met = rate
	}
	for k := 0; k < kneeBisections && met > 0 && missed > 0; k++ {
		if mid := (met + missed) / 2; e.kneeMet(ctx, r, d, series, seats, mid) {
			met = mid
		} else {
			missed = mid
		}
	}
	slices.SortFunc(r.Series.HoldP99ByRate[series], func(a, b Point) int { return cmp.Compare(a.X, b.X) })
	return met
}

// kneeMet runs d at rate and says whether hold p99 stayed within 100 ms with no buyer
// turned away and no error.
func (e *env) kneeMet(ctx context.Context, r *Report, d namedDesign, series string, seats int, rate float64) bool {
	p := onsaleParams{seats: seats, rate: rate, think: 60 * time.Millisecond, holdTTL: 5 * time.Second,
		timeout: 2 * time.Second, maxBuyers: 4000, noConfirms: true}
	res := runOnsale(ctx, d.d, p, uint64(rate), nil)
	hp99 := p99(res.holdLat)
	if r.Series.HoldP99ByRate == nil {
		r.Series.HoldP99ByRate = map[string][]Point{}
	}
	r.Series.HoldP99ByRate[series] = append(r.Series.HoldP99ByRate[series], Point{rate, hp99})
	e.progress("   %s at %.0f buyers/s: hold p99 %.1f ms, seat map p99 %.1f ms, %d turned away, %d errors %v",
		series, rate, hp99, p99(res.mapLat), res.turnedAway, res.errors, res.firstErr.Load())
	return hp99 <= 100 && res.turnedAway == 0 && res.errors == 0
}

// checkSale fails a sale that had errors, booked a seat twice or lost a seat it
// acknowledged (checked in the design's own tables), and returns the seats it sold.
func checkSale(ctx context.Context, name string, d onsaleDesign, res *onsaleResult) (int, error) {
	if res.errors > 0 {
		return 0, fmt.Errorf("%s: %d errors, the first: %v", name, res.errors, res.firstErr.Load())
	}
	sold, err := d.sold(ctx)
	if err != nil {
		return 0, err
	}
	double, err := d.doubleBooked(ctx)
	if err != nil {
		return 0, err
	}
	if double != 0 || int64(sold) < res.seatsSold {
		return 0, fmt.Errorf("%s: %d seats booked twice; %d seats acknowledged, %d sold in the database", name, double, res.seatsSold, sold)
	}
	return sold, nil
}

// saleNote says how a sale went: seats sold and when, buyers, refusals, shed
// confirmations (none, none are said).
func saleNote(p onsaleParams, res *onsaleResult, sold int) string {
	note := fmt.Sprintf("sold %d/%d", sold, p.seats)
	if res.soldOutAfter > 0 {
		note += fmt.Sprintf(" in %.1fs", res.soldOutAfter.Seconds())
	} else {
		note += fmt.Sprintf(" (NOT sold out in %.0fs)", res.elapsed.Seconds())
	}
	note += fmt.Sprintf(" (%d seats acknowledged, all in the database); %d buyers (%d turned away), %.2f refusals/booking",
		res.seatsSold, res.arrived, res.turnedAway, float64(res.refused)/max(1, float64(res.bookings)))
	if res.shed > 0 {
		note += fmt.Sprintf("; confirmations shed %d times (told in p50 %.2f / p99 %.2f ms) and tried again", res.shed, p50(res.shedLat), p99(res.shedLat))
	}
	if res.holdShed > 0 {
		note += fmt.Sprintf("; holds shed %d times (too many of the show in flight) and tried again, %d buyers left after 50", res.holdShed, res.holdGaveUp)
	}
	note += fmt.Sprintf("; first try to a granted hold p50 %.1f / p99 %.1f ms", p50(res.grantLat), p99(res.grantLat))
	if res.confRefused > 0 {
		note += fmt.Sprintf("; %d confirmations refused (the hold lost, expired, or about to while queued)", res.confRefused)
	}
	return note + "; double bookings 0"
}

// saleRows reports a sale: its seat-map, hold and confirm rows (the note on the hold's),
// its progress lines, and its seats sold over time as series.
func (e *env) saleRows(r *Report, workload, variant, series string, res *onsaleResult, note string) {
	secs := res.elapsed.Seconds()
	r.Rows = append(r.Rows,
		Row{Workload: workload + ": seat map", Variant: variant, Clients: int(res.arrived), OpsPerS: float64(len(res.mapLat)) / secs, P50ms: p50(res.mapLat), P99ms: p99(res.mapLat)},
		Row{Workload: workload + ": hold", Variant: variant, Clients: int(res.arrived), OpsPerS: float64(res.holdAttempts) / secs, P50ms: p50(res.holdLat), P99ms: p99(res.holdLat), Note: note},
		Row{Workload: workload + ": confirm", Variant: variant, Clients: int(res.arrived), OpsPerS: float64(len(res.confLat)) / secs, P50ms: p50(res.confLat), P99ms: p99(res.confLat)})
	e.progress("   %s", note)
	e.progress("   seat map p50 %.1f / p99 %.1f ms, hold %.1f / %.1f ms, confirm %.1f / %.1f ms",
		p50(res.mapLat), p99(res.mapLat), p50(res.holdLat), p99(res.holdLat), p50(res.confLat), p99(res.confLat))
	if r.Series.SoldOverTime == nil {
		r.Series.SoldOverTime = map[string][]Point{}
	}
	for _, tp := range res.timeline {
		r.Series.SoldOverTime[series] = append(r.Series.SoldOverTime[series], Point{tp.at.Seconds(), float64(tp.sold)})
	}
}

// saleParams is the on-sale's shape (the quick run's is smaller and shorter).
func (e *env) saleParams() onsaleParams {
	p := onsaleParams{seats: e.o.SaleSeats, rate: e.o.SaleRate, ramp: true, spike: 3, think: 3 * time.Second,
		holdTTL: 5 * time.Second, timeout: e.o.SaleTimeout, maxBuyers: 8000}
	if e.o.Quick {
		p.think, p.holdTTL = 600*time.Millisecond, 2*time.Second
	}
	return p
}

// overloadWorkload runs holdfast's on-sale twice too big: the same sale with twice the
// arrivals (the ramp, the spike and the rate after it), so that confirmations arrive
// faster than PostgreSQL commits them. The engine must shed the excess with typed
// refusals before the database (ErrOverloaded at once, tried again by its buyer; or
// ErrHoldLost when the hold would expire first), keep its latency bounded, lose
// nothing it acknowledged and book no seat twice; and it must still sell out.
func (e *env) overloadWorkload(ctx context.Context, r *Report) error {
	p := e.saleParams()
	p.rate, p.maxBuyers = 2*p.rate, 2*p.maxBuyers
	// Side by side: the engine as configured (holds in flight per show capped), and
	// the same without the cap, so that what the cap does to hold latency shows.
	for _, v := range []struct {
		name, show string
		inFlight   int
	}{{"holdfast", "twice", 0}, {"holdfast, no hold cap", "twice-nocap", 1_000_000}} {
		eng, err := e.engine(engine.Config{MaxSeatsPerHold: 6, MaxSeatsPerHolder: 6, MaxHoldsInFlight: v.inFlight})
		if err != nil {
			return err
		}
		venue := demo.Venue(p.seats)
		if err := eng.CreateShowLayout(ctx, v.show, venue); err != nil {
			return err
		}
		hf, err := newOnsaleHoldfast(ctx, e, eng, v.show, p.holdTTL)
		if err != nil {
			return err
		}
		e.progress("   %s: %.0f buyers/s (x%.0f spike), %d seats, think up to %v", v.name, p.rate, p.spike, p.seats, p.think)
		res := runOnsale(ctx, hf, p, 99, e.o.Progress)
		sold, err := checkSale(ctx, v.name, hf, res)
		if err != nil {
			return err
		}
		series := "holdfast, twice too big"
		if v.inFlight != 0 {
			series += ", no hold cap"
		}
		e.saleRows(r, "on-sale twice too big", v.name, series, res, saleNote(p, res, sold))
		if v.inFlight == 0 {
			r.goal("on-sale twice too big: sold out, shedding (0 errors, 0 double bookings, nothing acknowledged lost)", "sold out", float64(sold)/float64(p.seats), res.soldOutAfter > 0)
		}
	}
	return nil
}

type namedDesign struct {
	name string
	d    onsaleDesign
	reg  *prometheus.Registry // holdfast's engine's metrics
}

// batchSizes reads the engine's batch size histogram: batches per size bucket.
func batchSizes(reg *prometheus.Registry) ([]Point, error) {
	if reg == nil {
		return nil, errors.New("no registry")
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, f := range fams {
		if f.GetName() != "holdfast_confirm_batch_size" || len(f.GetMetric()) == 0 {
			continue
		}
		var out []Point
		prev := uint64(0)
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			out = append(out, Point{b.GetUpperBound(), float64(b.GetCumulativeCount() - prev)})
			prev = b.GetCumulativeCount()
		}
		return out, nil
	}
	return nil, errors.New("no batch size histogram")
}

// onsaleDesigns sets up a show of the venue on both designs.
// The designs' background jobs run until ctx ends.
func (e *env) onsaleDesigns(ctx context.Context, show string, venue []engine.Seat, ttl time.Duration) ([]namedDesign, error) {
	reg := prometheus.NewRegistry()
	eng, err := e.engine(engine.Config{MaxSeatsPerHold: 6, MaxSeatsPerHolder: 6, Registerer: reg})
	if err != nil {
		return nil, err
	}
	if err := eng.CreateShowLayout(ctx, show, venue); err != nil {
		return nil, err
	}
	hf, err := newOnsaleHoldfast(ctx, e, eng, show, ttl)
	if err != nil {
		return nil, err
	}
	snap, err := newOnsaleDB(ctx, e, show, hf.layout, ttl)
	if err != nil {
		return nil, err
	}
	naive, err := newOnsaleDB(ctx, e, show+"-naive", hf.layout, ttl)
	if err != nil {
		return nil, err
	}
	rival, err := newOnsaleDBSnapshot(ctx, snap)
	if err != nil {
		return nil, err
	}
	return []namedDesign{{"holdfast", hf, reg}, {dbRival, rival, nil}, {dbNaive, naive, nil}}, nil
}

// The database-only designs: the rival the goals are measured against (its seat map a
// snapshot per process, refreshed at most once a second), and the naive one that reads
// the whole map from PostgreSQL for every buyer, reported beside it.
const (
	dbRival = "database-only"
	dbNaive = "database-only, map read per buyer"
)

// rankOrder is the layout's indices, best rank first.
func rankOrder(layout []engine.Seat) []int {
	idx := make([]int, len(layout))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return layout[a].Rank - layout[b].Rank })
	return idx
}

// onsaleHoldfast sells through the engine: the seat map from its in-memory view,
// best-available and named holds in Redis, group-committed confirmations.
type onsaleHoldfast struct {
	e      *engine.Engine
	env    *env
	show   string
	ttl    time.Duration
	layout []engine.Seat
	byRank []int
	ids    []string
	free   atomic.Pointer[freeSeats]
}

// newOnsaleHoldfast sells show, created on eng, with holds of ttl.
func newOnsaleHoldfast(ctx context.Context, e *env, eng *engine.Engine, show string, ttl time.Duration) (*onsaleHoldfast, error) {
	m, err := eng.SeatMap(ctx, show)
	if err != nil {
		return nil, err
	}
	hf := &onsaleHoldfast{e: eng, env: e, show: show, ttl: ttl, layout: m.Layout, byRank: rankOrder(m.Layout), ids: make([]string, len(m.Layout))}
	for i, s := range m.Layout {
		hf.ids[i] = s.ID
	}
	return hf, nil
}

func (h *onsaleHoldfast) seatMap(ctx context.Context, limit int) ([]int, error) {
	m, err := h.e.SeatMap(ctx, h.show)
	if err != nil {
		return nil, err
	}
	// Finding the best free seats is the buyer's page's work, not the server's: buyers
	// who read the same snapshot share it, so that the load generator does not scan the
	// venue for every buyer.
	if f := h.free.Load(); f != nil && f.version == m.Version && f.limit == limit {
		return f.seats, nil
	}
	var free []int
	for _, i := range h.byRank {
		if m.States[i] == engine.SeatFree {
			if free = append(free, i); len(free) == limit {
				break
			}
		}
	}
	h.free.Store(&freeSeats{m.Version, limit, free})
	return free, nil
}

// freeSeats is the best free seats of one seat-map snapshot.
type freeSeats struct {
	version uint64
	limit   int
	seats   []int // shared: read only
}

func (h *onsaleHoldfast) refusal(err error) error {
	switch {
	case errors.Is(err, engine.ErrSeatsUnavailable):
		return errOnsaleRefused
	case errors.Is(err, engine.ErrOverloaded): // too many holds of the show in flight
		return errOnsaleShed
	}
	return err
}

func (h *onsaleHoldfast) holdBest(ctx context.Context, buyer string, n int) (any, error) {
	hold, err := h.e.HoldBest(ctx, engine.BestRequest{ShowID: h.show, Count: n, TTL: h.ttl, HolderID: buyer})
	return hold, h.refusal(err)
}

func (h *onsaleHoldfast) holdNamed(ctx context.Context, buyer string, seats []int) (any, error) {
	ids := make([]string, len(seats))
	for i, s := range seats {
		ids[i] = h.ids[s]
	}
	hold, err := h.e.Hold(ctx, engine.HoldRequest{ShowID: h.show, SeatIDs: ids, TTL: h.ttl, HolderID: buyer})
	return hold, h.refusal(err)
}

func (h *onsaleHoldfast) confirm(ctx context.Context, _ string, v any, key string) (int, error) {
	b, err := h.e.Confirm(ctx, v.(engine.Hold), engine.ConfirmOptions{IdempotencyKey: key})
	if errors.Is(err, engine.ErrOverloaded) {
		return 0, errOnsaleShed
	}
	if errors.Is(err, engine.ErrHoldLost) || errors.Is(err, engine.ErrStaleGeneration) || errors.Is(err, engine.ErrSeatsUnavailable) {
		return 0, errOnsaleRefused
	}
	return len(b.SeatIDs), err
}

func (h *onsaleHoldfast) release(ctx context.Context, v any) error {
	err := h.e.Release(ctx, v.(engine.Hold))
	if errors.Is(err, engine.ErrHoldLost) {
		return errOnsaleRefused
	}
	return err
}

func (h *onsaleHoldfast) sold(ctx context.Context) (n int, err error) {
	err = h.env.pool.QueryRow(ctx, "SELECT count(*) FROM seat_claims WHERE show_id = $1", h.show).Scan(&n)
	return
}

func (h *onsaleHoldfast) doubleBooked(ctx context.Context) (n int, err error) {
	err = h.env.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT bs.seat_id FROM booking_seats bs JOIN bookings b USING (show_id, booking_id)
		WHERE bs.show_id = $1 AND b.status = 'confirmed'
		GROUP BY bs.seat_id HAVING count(*) > 1) d`, h.show).Scan(&n)
	return
}

// onsaleDB is the database-only design: a row per seat with its rank, held_by and
// held_until; the seat map is a read of the show's rows for every buyer (the naive
// design; onsaleDBSnapshot serves it from a snapshot per process); a hold is one
// UPDATE (best available: the best free rows, locked with SKIP LOCKED) that returns its
// seats; a confirmation marks the hold's rows, found by primary key, and inserts the
// booking in one transaction, idempotent by the hold's token; a hold expires by time,
// and a background sweep frees expired holds' rows for best available.
type onsaleDB struct {
	env  *env
	pool *pgxpool.Pool // the bench's, unless the knee sizes one for it (between runs only)
	show string
	ttl  time.Duration
}

func newOnsaleDB(ctx context.Context, e *env, show string, layout []engine.Seat, ttl time.Duration) (*onsaleDB, error) {
	_, err := e.pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS onsale_seats (
    show_id    text NOT NULL,
    idx        int NOT NULL,
    rank       int NOT NULL,
    held_by    text,
    held_until timestamptz,
    booking_id uuid,
    PRIMARY KEY (show_id, idx)
);
CREATE INDEX IF NOT EXISTS onsale_seats_free ON onsale_seats (show_id, rank, idx) WHERE booking_id IS NULL AND held_by IS NULL;
CREATE TABLE IF NOT EXISTS onsale_bookings (
    booking_id uuid PRIMARY KEY,
    show_id    text NOT NULL,
    seats      int[] NOT NULL,
    holder     text NOT NULL,
    token      text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return nil, err
	}
	idx, ranks := make([]int32, len(layout)), make([]int32, len(layout))
	for i, s := range layout {
		idx[i], ranks[i] = int32(i), int32(s.Rank)
	}
	_, err = e.pool.Exec(ctx, `INSERT INTO onsale_seats (show_id, idx, rank)
		SELECT $1, i, r FROM unnest($2::int[], $3::int[]) AS t (i, r)`, show, idx, ranks)
	if err != nil {
		return nil, err
	}
	if _, err = e.pool.Exec(ctx, "ANALYZE onsale_seats"); err != nil {
		return nil, err
	}
	return &onsaleDB{env: e, pool: e.pool, show: show, ttl: ttl}, nil
}

// startJobs sweeps expired holds once a second.
func (d *onsaleDB) startJobs(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() { d.env.every(ctx, time.Second, d.sweep) })
	return wg.Wait
}

// every runs f every period until ctx ends, off the buyers' path: the rival's periodic
// jobs (the sweep of expired holds, the seat map's snapshot), as its operator would run
// them, so that no buyer waits for one. A failure is said once.
func (e *env) every(ctx context.Context, period time.Duration, f func(context.Context) error) {
	t := time.NewTicker(period)
	defer t.Stop()
	said := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := f(ctx); err != nil && ctx.Err() == nil && !said {
				said = true
				e.progress("   (the database-only design's periodic job: %v)", err)
			}
		}
	}
}

func (d *onsaleDB) seatMap(ctx context.Context, limit int) ([]int, error) {
	free, err := d.freeSeats(ctx)
	return free[:min(limit, len(free))], err
}

// freeSeats reads the whole seat map and returns the free seats, best first.
func (d *onsaleDB) freeSeats(ctx context.Context) ([]int, error) {
	rows, err := d.pool.Query(ctx, `SELECT idx, rank, booking_id IS NULL AND (held_until IS NULL OR held_until < now())
		FROM onsale_seats WHERE show_id = $1`, d.show)
	if err != nil {
		return nil, err
	}
	type seat struct{ idx, rank int }
	var free []seat
	for rows.Next() {
		var s seat
		var isFree bool
		if err := rows.Scan(&s.idx, &s.rank, &isFree); err != nil {
			rows.Close()
			return nil, err
		}
		if isFree {
			free = append(free, s)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(free, func(a, b seat) int { return a.rank - b.rank })
	out := make([]int, len(free))
	for i, s := range free {
		out[i] = s.idx
	}
	return out, nil
}

// onsaleDBSnapshot is the database-only design as a good engineer would build it: holds
// as rows with an expiry, best available with SKIP LOCKED, releases and confirmations
// by the hold's seats' primary keys (onsaleDB), and the seat map served from a snapshot this process keeps
// and refreshes once a second in the background — one read of the show's rows per
// second, however many buyers load the map, and none of them waits for it. Buyers see
// seats up to a second stale; a hold on a seat taken since is refused and retried, as
// on any real site.
type onsaleDBSnapshot struct {
	*onsaleDB
	snap atomic.Pointer[dbSnapshot]
}

// dbSnapshot is the free seats, best first, as last read.
type dbSnapshot struct {
	free []int // shared: read only
}

// snapshotAge is how stale the rival's seat map may be.
const snapshotAge = time.Second

func newOnsaleDBSnapshot(ctx context.Context, d *onsaleDB) (*onsaleDBSnapshot, error) {
	s := &onsaleDBSnapshot{onsaleDB: d}
	return s, s.refresh(ctx)
}

// refresh reads the snapshot again.
func (s *onsaleDBSnapshot) refresh(ctx context.Context) error {
	free, err := s.freeSeats(ctx)
	if err == nil {
		s.snap.Store(&dbSnapshot{free: free})
	}
	return err
}

// startJobs sweeps expired holds and refreshes the snapshot, each once a second, the
// snapshot first before it returns (the last sale on the show may have left it stale).
func (s *onsaleDBSnapshot) startJobs(ctx context.Context) (wait func()) {
	if err := s.refresh(ctx); err != nil && ctx.Err() == nil {
		s.env.progress("   (the database-only design's snapshot: %v)", err)
	}
	sweeps := s.onsaleDB.startJobs(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.env.every(ctx, snapshotAge, s.refresh) })
	return func() { wg.Wait(); sweeps() }
}

// seatMap serves the snapshot.
func (s *onsaleDBSnapshot) seatMap(ctx context.Context, limit int) ([]int, error) {
	snap := s.snap.Load()
	return snap.free[:min(limit, len(snap.free))], nil
}

// sweep frees the show's expired holds (once a second, in the background: every), so
// that the free-seat index (booking_id and held_by null) holds only free seats and
// best available never walks past held ones. Until a sweep, an expired hold's seats can
// still be held by name.
func (d *onsaleDB) sweep(ctx context.Context) error {
	// SKIP LOCKED: the sweep never waits for a row, so it never deadlocks with a hold
	// or a confirmation; a row it skipped is swept next time.
	_, err := d.pool.Exec(ctx, `UPDATE onsale_seats SET held_by = NULL, held_until = NULL
		WHERE show_id = $1 AND idx IN (
			SELECT idx FROM onsale_seats WHERE show_id = $1 AND booking_id IS NULL AND held_until < now()
			FOR UPDATE SKIP LOCKED)`, d.show)
	return err
}

// dbHold is a hold of the database-only design: its token, and its seats, so that a
// confirmation or a release finds its rows by primary key.
type dbHold struct {
	token string
	seats []int32
}

// holdBest holds the n best free seats, or none, in one statement.
func (d *onsaleDB) holdBest(ctx context.Context, _ string, n int) (any, error) {
	return d.hold(ctx, n, `WITH picked AS (
			SELECT idx FROM onsale_seats
			WHERE show_id = $1 AND booking_id IS NULL AND held_by IS NULL
			ORDER BY rank, idx LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE onsale_seats SET held_by = $3, held_until = now() + $4 * interval '1 millisecond'
		WHERE show_id = $1 AND idx IN (SELECT idx FROM picked) AND (SELECT count(*) FROM picked) = $2
		RETURNING idx`, n)
}

// holdNamed holds the seats, or none, in one statement.
func (d *onsaleDB) holdNamed(ctx context.Context, _ string, seats []int) (any, error) {
	return d.hold(ctx, len(seats), `WITH picked AS (
			SELECT idx FROM onsale_seats
			WHERE show_id = $1 AND idx = ANY($2) AND booking_id IS NULL AND (held_until IS NULL OR held_until < now())
			ORDER BY idx FOR UPDATE)
		UPDATE onsale_seats SET held_by = $3, held_until = now() + $4 * interval '1 millisecond'
		WHERE show_id = $1 AND idx IN (SELECT idx FROM picked) AND (SELECT count(*) FROM picked) = cardinality($2::int[])
		RETURNING idx`, seats)
}

// hold runs a hold statement ($1 the show, $2 what, $3 the token, $4 the TTL in ms)
// that holds n seats or none, and returns the hold.
func (d *onsaleDB) hold(ctx context.Context, n int, sql string, what any) (any, error) {
	h := dbHold{token: uuid.NewString()}
	rows, err := d.pool.Query(ctx, sql, d.show, what, h.token, d.ttl.Milliseconds())
	if err != nil {
		return nil, err
	}
	if h.seats, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
		return nil, err
	}
	if len(h.seats) != n {
		return nil, errOnsaleRefused // all or nothing
	}
	slices.Sort(h.seats)
	return h, nil
}

func (d *onsaleDB) confirm(ctx context.Context, buyer string, v any, _ string) (int, error) {
	h := v.(dbHold)
	var seats []int32
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		id := uuid.Must(uuid.NewV7())
		// The hold's rows by primary key, locked in seat order as holdNamed locks them:
		// no deadlock.
		rows, err := tx.Query(ctx, `UPDATE onsale_seats SET booking_id = $2
			WHERE show_id = $1 AND idx IN (
				SELECT idx FROM onsale_seats WHERE show_id = $1 AND idx = ANY($4) AND held_by = $3 ORDER BY idx FOR UPDATE)
			AND held_by = $3 AND held_until > now() AND booking_id IS NULL RETURNING idx`, d.show, id, h.token, h.seats)
		if err != nil {
			return err
		}
		seats, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		if len(seats) == 0 {
			return errOnsaleRefused
		}
		_, err = tx.Exec(ctx, "INSERT INTO onsale_bookings (booking_id, show_id, seats, holder, token) VALUES ($1, $2, $3, $4, $5)",
			id, d.show, seats, buyer, h.token)
		return err
	})
	if errors.Is(err, errOnsaleRefused) {
		// A retry of a confirmation that committed: the booking is there.
		var n int
		if qerr := d.pool.QueryRow(ctx, "SELECT cardinality(seats) FROM onsale_bookings WHERE token = $1", h.token).Scan(&n); qerr == nil {
			return n, nil
		}
	}
	return len(seats), err
}

func (d *onsaleDB) release(ctx context.Context, v any) error {
	h := v.(dbHold)
	_, err := d.pool.Exec(ctx, "UPDATE onsale_seats SET held_by = NULL, held_until = NULL WHERE show_id = $1 AND idx = ANY($3) AND held_by = $2 AND booking_id IS NULL",
		d.show, h.token, h.seats)
	return err
}

func (d *onsaleDB) sold(ctx context.Context) (n int, err error) {
	err = d.pool.QueryRow(ctx, "SELECT count(*) FROM onsale_seats WHERE show_id = $1 AND booking_id IS NOT NULL", d.show).Scan(&n)
	return
}

func (d *onsaleDB) doubleBooked(ctx context.Context) (n int, err error) {
	err = d.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT s FROM onsale_bookings, unnest(seats) s WHERE show_id = $1 GROUP BY s HAVING count(*) > 1) d`, d.show).Scan(&n)
	return
}
