package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
)

// The fair on-sale: a crowd many times the seats arrives in the first seconds — a share
// of it bots that skip any queue and call the hold API directly with fresh holder ids —
// and honest buyers who hold 1–6 seats under a limit of 6 per holder. Run twice on the
// engine, side by side: without a waiting room, and with one (admissions following the
// free seats). Honest buyers in the room join, wait for their turn on the room's state
// (one reader for everyone, as the page's per-show stream), check their ticket, then
// buy; bots never join.

// fairParams sizes a fair on-sale.
type fairParams struct {
	seats    int
	arrivals int           // buyers and bots arriving
	over     time.Duration // the arrivals are spread evenly over this
	bots     float64       // the share of arrivals that are bots
	limit    int           // SaleRules.HolderLimit
	think    time.Duration // the longest think time (the shortest is a sixth of it)
	holdTTL  time.Duration
	timeout  time.Duration
}

// fairResult is one variant's sale.
type fairResult struct {
	soldOutAfter, elapsed time.Duration
	at99ns                atomic.Int64 // when 99% of the seats were sold, ns into the sale (0: never)
	botSeats, seatsSold   atomic.Int64
	botAttempts, botHolds atomic.Int64
	botRefused            atomic.Int64 // bots' holds refused not-admitted
	buyers, admitted      atomic.Int64 // honest buyers arrived; honest buyers who got to try a hold
	taken                 atomic.Int64 // honest holds of named seats refused "seats taken"
	short                 atomic.Int64 // honest best-available holds that did not fit (fewer seats left)
	wasted                atomic.Int64 // admitted buyers who found nothing to hold
	shed                  atomic.Int64 // holds shed (overloaded) and tried again
	unavailable           atomic.Int64 // holds and confirmations answered unavailable and tried again
	gaveUp                atomic.Int64 // buyers shed or answered unavailable 50 times
	stillWaiting          int64        // honest buyers in the room when the sale ended
	mu                    sync.Mutex
	holdLat, waitLat      []time.Duration // honest holds; arrival to admission (room only)
	holdLatAfter          []time.Duration // honest holds once the arrivals are over (the crowd waits)
	arrivalsOver          atomic.Bool
	timeline              []fairPoint
	errs                  atomic.Int64
	firstErr              atomic.Value
}

// fairPoint is the room and the sale at a time into it.
type fairPoint struct {
	at                   time.Duration
	waiting, admittedTot int64
	sold                 int64
}

// at99 is when 99% of the seats were sold (0: never).
func (r *fairResult) at99() time.Duration { return time.Duration(r.at99ns.Load()) }

func (r *fairResult) record(l *[]time.Duration, d time.Duration) {
	r.mu.Lock()
	*l = append(*l, d)
	r.mu.Unlock()
}

func (r *fairResult) fail(err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if r.errs.Add(1) == 1 {
		r.firstErr.Store(err)
	}
}

// fairParamsFor is the fair on-sale's shape: docs/BENCHMARKS.md's (100,000 arrivals in
// 10 s for 20,000 seats, 20% bots, limit 6), or a small one for the quick run.
func (e *env) fairParamsFor() fairParams {
	p := fairParams{seats: e.o.SaleSeats, arrivals: 5 * e.o.SaleSeats, over: 10 * time.Second, bots: 0.2, limit: 6,
		think: 3 * time.Second, holdTTL: 30 * time.Second, timeout: e.o.SaleTimeout}
	if e.o.Quick {
		p.seats, p.arrivals, p.over, p.think = 2000, 10_000, 4*time.Second, 600*time.Millisecond
	}
	return p
}

// fairWorkload runs the fair on-sale without and with a waiting room, side by side.
func (e *env) fairWorkload(ctx context.Context, r *Report) error {
	p := e.fairParamsFor()
	var res [2]*fairResult
	for i, room := range []bool{false, true} {
		name := []string{"no waiting room", "waiting room"}[i]
		fr, err := e.fairVariant(ctx, p, name, []string{"fair-open", "fair-room"}[i], room, uint64(7+i))
		if err != nil {
			return err
		}
		res[i] = fr
		fairRows(r, e, p, name, room, fr)
		fairSeries(r, name, room, fr)
	}
	fairGoals(r, e, res[0], res[1])
	return nil
}

// fairVariant runs the fair on-sale on a show of its own, with or without a waiting
// room, and checks the sale: no errors, no seat booked twice, the seats the buyers were
// told of sold in the database.
func (e *env) fairVariant(ctx context.Context, p fairParams, name, show string, room bool, seed uint64) (*fairResult, error) {
	eng, err := e.engine(engine.Config{MaxSeatsPerHold: 6, MaxSeatsPerHolder: 6})
	if err != nil {
		return nil, err
	}
	if err := eng.CreateShowLayout(ctx, show, demo.Venue(p.seats)); err != nil {
		return nil, err
	}
	e.progress("   %s: %d arrivals over %v (%.0f%% bots), %d seats, holder limit %d", name, p.arrivals, p.over, 100*p.bots, p.seats, p.limit)
	fr, err := runFairSale(ctx, eng, show, p, room, seed, e)
	if err != nil {
		return nil, err
	}
	if n := fr.errs.Load(); n > 0 {
		return nil, fmt.Errorf("%s: %d errors, the first: %v", name, n, fr.firstErr.Load())
	}
	hf, err := newOnsaleHoldfast(ctx, e, eng, show, p.holdTTL)
	if err != nil {
		return nil, err
	}
	if n, err := hf.doubleBooked(ctx); err != nil || n > 0 {
		return nil, fmt.Errorf("%s: %d seats booked twice (%v)", name, n, err)
	}
	sold, err := hf.sold(ctx)
	if err != nil {
		return nil, err
	}
	if int64(sold) != fr.seatsSold.Load() {
		return nil, fmt.Errorf("%s: the buyers were told of %d seats sold, the database has %d", name, fr.seatsSold.Load(), sold)
	}
	return fr, nil
}

// fairRows adds a variant's rows: its honest holds, during and after the arrivals.
func fairRows(r *Report, e *env, p fairParams, name string, room bool, fr *fairResult) {
	adm := max(1, fr.admitted.Load())
	note := fmt.Sprintf("sold %d of %d seats, 99%% in %s, all in %s; bots won %d seats (%d holds granted of %d tried, %d refused not-admitted); "+
		"honest buyers %d, got to hold %d, refused seats-taken %.3f per buyer who held (and %d best-available asks too big for what was left), found nothing %d, shed %d, unavailable %d, still waiting at the end %d",
		fr.seatsSold.Load(), p.seats, soldOutText(fr.at99()), soldOutText(fr.soldOutAfter), fr.botSeats.Load(), fr.botHolds.Load(), fr.botAttempts.Load(), fr.botRefused.Load(),
		fr.buyers.Load(), fr.admitted.Load(), float64(fr.taken.Load())/float64(adm), fr.short.Load(), fr.wasted.Load(), fr.shed.Load(), fr.unavailable.Load(), fr.stillWaiting)
	if room {
		note += fmt.Sprintf("; arrival to admission p50 %.0f ms, p99 %.0f ms", p50(fr.waitLat), p99(fr.waitLat))
	}
	r.Rows = append(r.Rows, Row{Workload: "fair on-sale: honest holds", Variant: name, Clients: p.arrivals,
		OpsPerS: float64(len(fr.holdLat)) / fr.elapsed.Seconds(), P50ms: p50(fr.holdLat), P99ms: p99(fr.holdLat), Note: note},
		Row{Workload: "fair on-sale: honest holds after the arrivals", Variant: name, Clients: p.arrivals,
			OpsPerS: float64(len(fr.holdLatAfter)) / fr.elapsed.Seconds(), P50ms: p50(fr.holdLatAfter), P99ms: p99(fr.holdLatAfter)})
	e.progress("   %s", note)
	e.progress("   honest hold p50 %.1f / p99 %.1f ms; once the arrivals are over (the crowd waits) p50 %.1f / p99 %.1f ms (n=%d)",
		p50(fr.holdLat), p99(fr.holdLat), p50(fr.holdLatAfter), p99(fr.holdLatAfter), len(fr.holdLatAfter))
}

// fairSeries adds a variant's timeline to the fair-sale chart: seats sold, and with a
// room its line and admissions per second.
func fairSeries(r *Report, name string, room bool, fr *fairResult) {
	if r.Series.FairSale == nil {
		r.Series.FairSale = map[string][]Point{}
	}
	add := func(what string, pt Point) {
		r.Series.FairSale[name+": "+what] = append(r.Series.FairSale[name+": "+what], pt)
	}
	var prev fairPoint
	for _, tp := range fr.timeline {
		add("seats sold", Point{tp.at.Seconds(), float64(tp.sold)})
		if room {
			add("waiting", Point{tp.at.Seconds(), float64(tp.waiting)})
			if dt := (tp.at - prev.at).Seconds(); dt > 0 {
				add("admissions per second", Point{tp.at.Seconds(), float64(tp.admittedTot-prev.admittedTot) / dt})
			}
		}
		prev = tp
	}
}

// fairGoals are the fair on-sale's goals, from the runs without and with a room.
func fairGoals(r *Report, e *env, open, room *fairResult) {
	// Sell-out is when 99% of the seats are sold: the last few seats of a sale come back
	// from holds that expire or are released after the crowd has left, and a run without
	// a room, whose buyers leave when they find nothing, may never sell them.
	switch {
	case open.at99() == 0 || room.at99() == 0:
		r.goal("fair on-sale: 99% sold, waiting room / none", "<= 1.20", 0, false)
	default:
		ratio := room.at99().Seconds() / open.at99().Seconds()
		r.goal("fair on-sale: 99% sold, waiting room / none", "<= 1.20", ratio, ratio <= 1.2)
	}
	r.goal("fair on-sale: hold p99 of admitted buyers, ms", "<= 100", p99(room.holdLat), p99(room.holdLat) <= 100)
	// A sale that sold out during the arrivals has no hold after them: nothing to say.
	if len(room.holdLatAfter) > 0 {
		r.goal("fair on-sale: hold p99 of admitted buyers once the arrivals are over, ms", "<= 100", p99(room.holdLatAfter), p99(room.holdLatAfter) <= 100)
	} else {
		e.progress("   no hold after the arrivals (the room's sale sold out during them): the goal for holds after the arrivals is not measured")
	}
	r.goal("fair on-sale: seats won by bots, waiting room", "0", float64(room.botSeats.Load()), room.botSeats.Load() == 0)
	perAdmitted := float64(room.taken.Load()) / float64(max(1, room.admitted.Load()))
	r.goal("fair on-sale: holds refused seats-taken per admitted buyer", "<= 0.20", perAdmitted, perAdmitted <= 0.2)
}

func soldOutText(d time.Duration) string {
	if d == 0 {
		return "(never)"
	}
	return d.Round(10 * time.Millisecond).String()
}

// fairSaleTail is how long a sale runs on once 99% of its seats are sold.
const fairSaleTail = 10 * time.Second

// runFairSale runs one variant on show (created on eng).
func runFairSale(ctx context.Context, eng *engine.Engine, show string, p fairParams, room bool, seed uint64, e *env) (*fairResult, error) {
	f := &fairSale{s: newSaleRun(ctx, p.timeout), eng: eng, show: show, p: p, room: room, seed: seed, res: &fairResult{}}
	defer f.s.cancel()
	rules := engine.SaleRules{HolderLimit: p.limit}
	if room {
		rules.Queue = &engine.WaitingRoom{OpensAt: f.s.start}
	}
	if err := eng.SetSaleRules(ctx, show, rules); err != nil {
		return nil, err
	}
	var err error
	if f.hf, err = newOnsaleHoldfast(ctx, e, eng, show, p.holdTTL); err != nil {
		return nil, err
	}
	if room {
		f.s.every(50*time.Millisecond, f.admitWaiting)
	}
	f.s.every(250*time.Millisecond, f.sample)
	every := p.over / time.Duration(p.arrivals)
	f.s.arrive(func(at time.Duration, _ int) (int, bool) {
		n := min(int(at/every), p.arrivals)
		return n, n < p.arrivals
	}, f.admit)
	f.res.arrivalsOver.Store(true)
	f.tail()
	res := f.res
	res.elapsed = f.s.finish()
	res.soldOutAfter = f.s.soldAt
	f.wmu.Lock()
	res.stillWaiting = int64(len(f.waiting))
	f.wmu.Unlock()
	slices.Sort(res.holdLat)
	slices.Sort(res.holdLatAfter)
	slices.Sort(res.waitLat)
	return res, nil
}

// fairSale is one variant of the fair on-sale: its buyers' and bots' model on the sale
// harness.
type fairSale struct {
	s    *saleRun
	eng  *engine.Engine
	hf   *onsaleHoldfast
	show string
	p    fairParams
	room bool
	seed uint64
	res  *fairResult
	// The room: buyers wait for their turn on the room's state, read by one reader.
	wmu                     sync.Mutex
	waiting                 []waiter
	admittedTotal, queueLen atomic.Int64
	once99                  sync.Once
}

// waiter is an honest buyer waiting in the room.
type waiter struct {
	holder string
	target int64 // admitted_total at which it is their turn
	rng    *rand.Rand
	since  time.Time
}

// tail waits, once the arrivals are over, until the sale sells out, times out, or has
// been 99% sold for fairSaleTail (the last seats may never sell: buyers who found
// nothing left).
func (f *fairSale) tail() {
	tail := time.NewTicker(100 * time.Millisecond)
	defer tail.Stop()
	for {
		select {
		case <-f.s.soldOut:
			return
		case <-f.s.ctx.Done():
			return
		case <-tail.C:
			if at := f.res.at99(); at > 0 && f.s.since() > at+fairSaleTail {
				return
			}
		}
	}
}

// sold counts n seats sold, and the times 99% and all of them were.
func (f *fairSale) sold(n int) {
	total := f.res.seatsSold.Add(int64(n))
	if total*100 >= int64(f.p.seats)*99 {
		f.once99.Do(func() { f.res.at99ns.Store(int64(f.s.since())) })
	}
	if total >= int64(f.p.seats) {
		f.s.markSoldOut()
	}
}

// sample adds a point to the timeline, until the sale sells out.
func (f *fairSale) sample(at time.Duration) bool {
	f.res.mu.Lock()
	f.res.timeline = append(f.res.timeline, fairPoint{at, f.queueLen.Load(), f.admittedTotal.Load(), f.res.seatsSold.Load()})
	f.res.mu.Unlock()
	select {
	case <-f.s.soldOut:
		return false
	default:
		return true
	}
}

// admit is the id-th arrival: a bot, or an honest buyer who buys at once (no room) or
// joins the room.
func (f *fairSale) admit(id int) func() {
	rng := rand.New(rand.NewPCG(f.seed, uint64(id)))
	if rng.Float64() < f.p.bots {
		return func() { f.bot(rng) }
	}
	f.res.buyers.Add(1)
	holder := "buyer-" + strconv.FormatUint(f.seed, 36) + "-" + strconv.Itoa(id)
	if !f.room {
		return func() { f.buy(rng, holder) }
	}
	return func() { f.join(rng, holder) }
}

// join has an honest buyer join the room: buy if admitted at once, else wait.
func (f *fairSale) join(rng *rand.Rand, holder string) {
	since := time.Now()
	t, err := f.eng.Join(f.s.ctx, f.show, holder)
	if err != nil {
		f.res.fail(fmt.Errorf("a join: %w", err))
		return
	}
	if t.Admitted {
		f.res.record(&f.res.waitLat, 0)
		f.buy(rng, holder)
		return
	}
	f.wait(waiter{holder, t.Position + t.AdmittedTotal, rng, since})
}

func (f *fairSale) wait(w waiter) {
	f.wmu.Lock()
	f.waiting = append(f.waiting, w)
	f.wmu.Unlock()
}

// admitWaiting is the room's one reader: it reads the room's state and lets in the
// waiters whose turn has come, until the sale sells out.
func (f *fairSale) admitWaiting(time.Duration) bool {
	select {
	case <-f.s.soldOut:
		return false
	default:
	}
	q, err := f.eng.Queue(f.s.ctx, f.show)
	if err != nil {
		f.res.fail(fmt.Errorf("the room's status: %w", err))
		return true
	}
	f.admittedTotal.Store(q.AdmittedTotal)
	f.queueLen.Store(q.Waiting)
	f.wmu.Lock()
	var due []waiter
	keep := f.waiting[:0]
	for _, w := range f.waiting {
		if w.target <= q.AdmittedTotal {
			due = append(due, w)
		} else {
			keep = append(keep, w)
		}
	}
	f.waiting = keep
	f.wmu.Unlock()
	for _, w := range due {
		f.s.bg.Go(func() { f.enter(w) })
	}
	return true
}

// enter is a waiter whose turn came: it checks its ticket (joining again if it is out
// of the room) until admitted, then buys; or, sold out or after 20 tries, waits again
// at the place the ticket says.
func (f *fairSale) enter(w waiter) {
	for tries := 0; f.s.ctx.Err() == nil; tries++ {
		t, err := f.eng.Ticket(f.s.ctx, f.show, w.holder)
		if errors.Is(err, engine.ErrNotFound) { // out of the room: join again
			t, err = f.eng.Join(f.s.ctx, f.show, w.holder)
		}
		if err != nil {
			f.res.fail(fmt.Errorf("a wait in the room: %w", err))
			return
		}
		if t.Admitted {
			f.res.record(&f.res.waitLat, time.Since(w.since))
			f.buy(w.rng, w.holder)
			return
		}
		if t.SoldOut || tries > 20 {
			f.wait(waiter{w.holder, t.Position + t.AdmittedTotal, w.rng, w.since})
			return
		}
		if !f.s.sleep(50 * time.Millisecond) {
			return
		}
	}
}

// buy is an honest buyer's turn: hold 1–6 seats, think, then confirm (most) or
// release.
func (f *fairSale) buy(rng *rand.Rand, holder string) {
	f.res.admitted.Add(1)
	h, ok := f.hold(rng, holder, 1+rng.IntN(6), true)
	if !ok {
		if f.s.ctx.Err() == nil {
			f.res.wasted.Add(1)
		}
		return
	}
	if !f.s.think(rng, f.p.think) {
		return
	}
	if rng.IntN(100) < 90 {
		if seats, ok := f.confirm(h); ok {
			f.sold(seats)
		}
		return
	}
	if err := f.eng.Release(f.s.ctx, h); err != nil && !errors.Is(err, engine.ErrHoldLost) {
		f.res.fail(fmt.Errorf("a release: %w", err))
	}
}

// bot holds 6 seats under a fresh holder id, never joining the room, and confirms.
func (f *fairSale) bot(rng *rand.Rand) {
	f.res.botAttempts.Add(1)
	h, ok := f.hold(rng, "bot-"+uuid.NewString(), 6, false)
	if !ok {
		return
	}
	f.res.botHolds.Add(1)
	if seats, ok := f.confirm(h); ok {
		f.res.botSeats.Add(int64(seats))
		f.sold(seats)
	}
}

// hold tries to hold n seats for holder, a few times; it returns the hold, or nothing
// when nothing fitted or the holder gave up. A bot takes a fresh id for each try.
func (f *fairSale) hold(rng *rand.Rand, holder string, n int, honest bool) (engine.Hold, bool) {
	for attempt, shed := 0, 0; attempt < 3 && f.s.ctx.Err() == nil; attempt++ {
		t := time.Now()
		h, err := f.tryHold(rng, holder, n, honest)
		if honest {
			f.res.record(&f.res.holdLat, time.Since(t))
			if f.res.arrivalsOver.Load() {
				f.res.record(&f.res.holdLatAfter, time.Since(t))
			}
		}
		var su *engine.SeatsUnavailableError
		switch {
		case err == nil:
			return h, true
		case errors.Is(err, engine.ErrOverloaded), errors.Is(err, engine.ErrUnavailable):
			// Shed, or a 503: the call's bound passed (in the flood without a room the
			// load generator starves the process it shares). A client tries again later.
			if shed == 50 {
				f.res.gaveUp.Add(1)
				return h, false
			}
			if errors.Is(err, engine.ErrUnavailable) {
				f.res.unavailable.Add(1)
			} else {
				f.res.shed.Add(1)
			}
			shed++
			attempt--
			if !f.s.backOff(rng) {
				return h, false
			}
		case errors.Is(err, engine.ErrNotAdmitted):
			if !honest {
				f.res.botRefused.Add(1)
				return h, false
			}
			f.res.fail(fmt.Errorf("an admitted buyer: %w", err))
			return h, false
		case errors.As(err, &su):
			if n = f.refusedSeats(su, n, honest); n == 0 {
				return h, false
			}
		case errors.Is(err, engine.ErrHolderLimit):
			return h, false
		default:
			f.res.fail(fmt.Errorf("a hold of %d seats (honest %v): %w", n, honest, err))
			return h, false
		}
		if !honest {
			holder = "bot-" + uuid.NewString() // a fresh id for each try
		}
	}
	return engine.Hold{}, false
}

// refusedSeats counts a hold refused for its seats and returns how many to ask for next:
// what is left when best-available found nothing to fit n (0: nothing left).
func (f *fairSale) refusedSeats(su *engine.SeatsUnavailableError, n int, honest bool) int {
	if len(su.SeatIDs) > 0 { // named seats taken
		if honest {
			f.res.taken.Add(1)
		}
		return n
	}
	if honest {
		f.res.short.Add(1)
	}
	return min(n, su.Available) // take what is left
}

// tryHold is one try: some honest buyers pick seats on the map; the rest, and those who
// see nothing free, ask for the best.
func (f *fairSale) tryHold(rng *rand.Rand, holder string, n int, honest bool) (engine.Hold, error) {
	var free []int
	if honest && rng.IntN(100) >= 80 {
		var err error
		if free, err = f.hf.seatMap(f.s.ctx, 64); err != nil {
			return engine.Hold{}, err
		}
	}
	if len(free) == 0 {
		return f.eng.HoldBest(f.s.ctx, engine.BestRequest{ShowID: f.show, Count: n, TTL: f.p.holdTTL, HolderID: holder})
	}
	pick := slices.Clone(free)
	rng.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
	ids := make([]string, min(n, len(pick)))
	for i := range ids {
		ids[i] = f.hf.ids[pick[i]]
	}
	return f.eng.Hold(f.s.ctx, engine.HoldRequest{ShowID: f.show, SeatIDs: ids, TTL: f.p.holdTTL, HolderID: holder})
}

// confirm confirms h, trying again after a shed or a 503 while the sale lasts, under
// one idempotency key (a 503 may come after the booking committed); the seats booked.
func (f *fairSale) confirm(h engine.Hold) (int, bool) {
	key := uuid.NewString()
	for f.s.ctx.Err() == nil {
		b, err := f.eng.Confirm(f.s.ctx, h, engine.ConfirmOptions{IdempotencyKey: key})
		switch {
		case err == nil:
			return len(b.SeatIDs), true
		case errors.Is(err, engine.ErrOverloaded), errors.Is(err, engine.ErrUnavailable):
			if errors.Is(err, engine.ErrUnavailable) {
				f.res.unavailable.Add(1)
			}
			if !f.s.sleep(100 * time.Millisecond) {
				return 0, false
			}
		case errors.Is(err, engine.ErrHoldLost), errors.Is(err, engine.ErrStaleGeneration), errors.Is(err, engine.ErrSeatsUnavailable):
			return 0, false
		default:
			f.res.fail(fmt.Errorf("a confirmation: %w", err))
			return 0, false
		}
	}
	return 0, false
}
