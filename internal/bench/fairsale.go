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
	gaveUp                atomic.Int64 // buyers shed 50 times
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

// fairParamsFor is the fair on-sale's shape: the (100,000 arrivals in 10 s for
// 20,000 seats, 20% bots, limit 6), or a small one for the quick run.
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
		"honest buyers %d, got to hold %d, refused seats-taken %.3f per buyer who held (and %d best-available asks too big for what was left), found nothing %d, shed %d, still waiting at the end %d",
		fr.seatsSold.Load(), p.seats, soldOutText(fr.at99()), soldOutText(fr.soldOutAfter), fr.botSeats.Load(), fr.botHolds.Load(), fr.botAttempts.Load(), fr.botRefused.Load(),
		fr.buyers.Load(), fr.admitted.Load(), float64(fr.taken.Load())/float64(adm), fr.short.Load(), fr.wasted.Load(), fr.shed.Load(), fr.stillWaiting)
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
	res := &fairResult{}
	rules := engine.SaleRules{HolderLimit: p.limit}
	start := time.Now()
	if room {
		rules.Queue = &engine.WaitingRoom{OpensAt: start}
	}
	if err := eng.SetSaleRules(ctx, show, rules); err != nil {
		return nil, err
	}
	hf, err := newOnsaleHoldfast(ctx, e, eng, show, p.holdTTL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	soldOut := make(chan struct{})
	var once, once99 sync.Once
	sold := func(n int) {
		total := res.seatsSold.Add(int64(n))
		if total*100 >= int64(p.seats)*99 {
			once99.Do(func() { res.at99ns.Store(int64(time.Since(start))) })
		}
		if total >= int64(p.seats) {
			once.Do(func() { res.soldOutAfter = time.Since(start); close(soldOut) })
		}
	}
	var wg sync.WaitGroup
	sleep := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}

	// hold tries to hold n seats for holder, a few times; it returns the hold, or
	// nothing when nothing fitted (found) or the holder gave up.
	hold := func(rng *rand.Rand, holder string, n int, honest bool) (h engine.Hold, ok bool) {
		for attempt, shed := 0, 0; attempt < 3 && ctx.Err() == nil; attempt++ {
			t := time.Now()
			var err error
			var free []int
			if honest && rng.IntN(100) >= 80 { // some pick seats on the map
				var merr error
				if free, merr = hf.seatMap(ctx, 64); merr != nil {
					res.fail(merr)
					return h, false
				}
			}
			if len(free) == 0 { // the rest, and those who see nothing free, ask for the best
				h, err = eng.HoldBest(ctx, engine.BestRequest{ShowID: show, Count: n, TTL: p.holdTTL, HolderID: holder})
			} else {
				pick := slices.Clone(free)
				rng.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
				ids := make([]string, min(n, len(pick)))
				for i := range ids {
					ids[i] = hf.ids[pick[i]]
				}
				h, err = eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: ids, TTL: p.holdTTL, HolderID: holder})
			}
			if honest {
				res.record(&res.holdLat, time.Since(t))
				if res.arrivalsOver.Load() {
					res.record(&res.holdLatAfter, time.Since(t))
				}
			}
			var su *engine.SeatsUnavailableError
			switch {
			case err == nil:
				return h, true
			case errors.Is(err, engine.ErrOverloaded):
				if shed == 50 {
					res.gaveUp.Add(1)
					return h, false
				}
				res.shed.Add(1)
				shed++
				attempt--
				if !sleep(100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond)))) {
					return h, false
				}
			case errors.Is(err, engine.ErrNotAdmitted):
				if !honest {
					res.botRefused.Add(1)
					return h, false
				}
				res.fail(fmt.Errorf("an admitted buyer: %w", err))
				return h, false
			case errors.As(err, &su):
				if len(su.SeatIDs) == 0 { // best available: nothing fits n
					if honest {
						res.short.Add(1)
					}
					if su.Available == 0 {
						return h, false
					}
					n = min(n, su.Available) // take what is left
				} else if honest {
					res.taken.Add(1)
				}
			case errors.Is(err, engine.ErrHolderLimit):
				return h, false
			default:
				res.fail(err)
				return h, false
			}
			if !honest {
				holder = "bot-" + uuid.NewString() // a fresh id for each try
			}
		}
		return h, false
	}

	confirm := func(h engine.Hold) (int, bool) {
		for ctx.Err() == nil {
			b, err := eng.Confirm(ctx, h, engine.ConfirmOptions{IdempotencyKey: uuid.NewString()})
			switch {
			case err == nil:
				return len(b.SeatIDs), true
			case errors.Is(err, engine.ErrOverloaded):
				if !sleep(100 * time.Millisecond) {
					return 0, false
				}
			case errors.Is(err, engine.ErrHoldLost), errors.Is(err, engine.ErrStaleGeneration), errors.Is(err, engine.ErrSeatsUnavailable):
				return 0, false
			default:
				res.fail(err)
				return 0, false
			}
		}
		return 0, false
	}

	// buy is an honest buyer's turn: hold 1–6 seats, think, then confirm (most) or
	// release.
	buy := func(rng *rand.Rand, holder string) {
		res.admitted.Add(1)
		n := 1 + rng.IntN(6)
		h, ok := hold(rng, holder, n, true)
		if !ok {
			if ctx.Err() == nil {
				res.wasted.Add(1)
			}
			return
		}
		if !sleep(p.think/6 + time.Duration(rng.Int64N(int64(p.think)*5/6+1))) {
			return
		}
		if rng.IntN(100) < 90 {
			if seats, ok := confirm(h); ok {
				sold(seats)
			}
			return
		}
		if err := eng.Release(ctx, h); err != nil && !errors.Is(err, engine.ErrHoldLost) {
			res.fail(err)
		}
	}

	bot := func(rng *rand.Rand) {
		res.botAttempts.Add(1)
		h, ok := hold(rng, "bot-"+uuid.NewString(), 6, false)
		if !ok {
			return
		}
		res.botHolds.Add(1)
		if seats, ok := confirm(h); ok {
			res.botSeats.Add(int64(seats))
			sold(seats)
		}
	}

	// The room: buyers wait for their turn on the room's state, read by one reader.
	type waiter struct {
		holder string
		target int64 // admitted_total at which it is their turn
		rng    *rand.Rand
		since  time.Time
	}
	var wmu sync.Mutex
	var waiting []waiter
	var admittedTotal, queueLen atomic.Int64
	var enter func(w waiter)
	enter = func(w waiter) {
		defer wg.Done()
		for tries := 0; ctx.Err() == nil; tries++ {
			t, err := eng.Ticket(ctx, show, w.holder)
			switch {
			case errors.Is(err, engine.ErrNotFound): // out of the room: join again
				t, err = eng.Join(ctx, show, w.holder)
			case err != nil:
				res.fail(err)
				return
			}
			if err != nil {
				res.fail(err)
				return
			}
			if t.Admitted {
				res.record(&res.waitLat, time.Since(w.since))
				buy(w.rng, w.holder)
				return
			}
			if t.SoldOut || tries > 20 {
				// Back to waiting, at the place the ticket says.
				wmu.Lock()
				waiting = append(waiting, waiter{w.holder, t.Position + t.AdmittedTotal, w.rng, w.since})
				wmu.Unlock()
				return
			}
			if !sleep(50 * time.Millisecond) {
				return
			}
		}
	}
	if room {
		wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-soldOut:
					return
				case <-tick.C:
				}
				q, err := eng.Queue(ctx, show)
				if err != nil {
					res.fail(err)
					continue
				}
				admittedTotal.Store(q.AdmittedTotal)
				queueLen.Store(q.Waiting)
				wmu.Lock()
				var due []waiter
				keep := waiting[:0]
				for _, w := range waiting {
					if w.target <= q.AdmittedTotal {
						due = append(due, w)
					} else {
						keep = append(keep, w)
					}
				}
				waiting = keep
				wmu.Unlock()
				for _, w := range due {
					wg.Add(1)
					go enter(w)
				}
			}
		})
	}

	// The timeline, every 250 ms.
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				res.mu.Lock()
				res.timeline = append(res.timeline, fairPoint{now.Sub(start), queueLen.Load(), admittedTotal.Load(), res.seatsSold.Load()})
				res.mu.Unlock()
				select {
				case <-soldOut:
					return
				default:
				}
			}
		}
	})

	// Arrivals, evenly over p.over.
	every := p.over / time.Duration(p.arrivals)
	tick := time.NewTicker(5 * time.Millisecond)
	var buyers sync.WaitGroup
	arrived := 0
arrivals:
	for arrived < p.arrivals {
		select {
		case <-ctx.Done():
			break arrivals
		case <-soldOut:
			break arrivals
		case now := <-tick.C:
			for due := int(now.Sub(start) / every); arrived < min(due, p.arrivals); arrived++ {
				id := arrived
				rng := rand.New(rand.NewPCG(seed, uint64(id)))
				if rng.Float64() < p.bots {
					buyers.Go(func() { bot(rng) })
					continue
				}
				res.buyers.Add(1)
				holder := "buyer-" + strconv.FormatUint(seed, 36) + "-" + strconv.Itoa(id)
				if !room {
					buyers.Go(func() { buy(rng, holder) })
					continue
				}
				buyers.Go(func() {
					since := time.Now()
					t, err := eng.Join(ctx, show, holder)
					if err != nil {
						res.fail(err)
						return
					}
					if t.Admitted {
						res.record(&res.waitLat, 0)
						buy(rng, holder)
						return
					}
					wmu.Lock()
					waiting = append(waiting, waiter{holder, t.Position + t.AdmittedTotal, rng, since})
					wmu.Unlock()
				})
			}
		}
	}
	tick.Stop()
	res.arrivalsOver.Store(true)
	// Arrivals are over: the sale runs until it sells out, times out, or is 99% sold
	// for fairSaleTail (the last seats may never sell: buyers who found nothing left).
	tail := time.NewTicker(100 * time.Millisecond)
wait:
	for {
		select {
		case <-soldOut:
			break wait
		case <-ctx.Done():
			break wait
		case <-tail.C:
			if at := res.at99(); at > 0 && time.Since(start) > at+fairSaleTail {
				break wait
			}
		}
	}
	tail.Stop()
	cancel()
	buyers.Wait()
	wg.Wait()
	res.elapsed = time.Since(start)
	wmu.Lock()
	res.stillWaiting = int64(len(waiting))
	wmu.Unlock()
	slices.Sort(res.holdLat)
	slices.Sort(res.holdLatAfter)
	slices.Sort(res.waitLat)
	return res, nil
}
