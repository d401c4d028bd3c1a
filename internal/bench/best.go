package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
)

// The best-available workloads: the cost of one HoldBest on a 20,000-seat venue 0%, 50%
// and 95% sold (the index must keep it flat), the index's Redis bytes per seat, and the
// same sale run twice on holdfast — buyers picking seats from a seat map refreshed
// every 100 ms, and buyers asking for "N together, best available" — counting refused
// attempts per seat block won. The sale here is the hold phase (every granted hold
// is kept: confirmation throughput is measured by the flash sale workload).

func (e *env) bestWorkload(ctx context.Context, r *Report) error {
	if err := e.bestCost(ctx, r); err != nil {
		return err
	}
	return e.bestSale(ctx, r)
}

// bestCost measures HoldBest (4 together, and 2 anywhere; each released at once, so the
// show stays as sold as it was) at three levels of sold seats, scattered at random,
// then the expired holds one HoldBest gives back.
func (e *env) bestCost(ctx context.Context, r *Report) error {
	eng, err := e.engine(engine.Config{MaxSeatsPerHolder: 1000, MarkerRepairInterval: 10 * time.Minute})
	if err != nil {
		return err
	}
	venue := demo.Venue(mapSeats)
	if err := eng.CreateShowLayout(ctx, "bestcost", venue); err != nil {
		return err
	}
	// The first HoldBest builds the index: not one of the calls measured.
	h, err := eng.HoldBest(ctx, engine.BestRequest{ShowID: "bestcost", Count: 1, TTL: time.Minute})
	if err != nil {
		return err
	}
	if err := eng.Release(ctx, h); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(7, 7))
	order := rng.Perm(len(venue))
	sold := 0
	base := map[string]float64{}
	for _, pct := range []int{0, 50, 95} {
		target := len(venue) * pct / 100
		if err := parallel(ctx, 16, target-sold, func(ctx context.Context, i int) error {
			seat := venue[order[sold+i]].ID
			h, err := eng.Hold(ctx, engine.HoldRequest{ShowID: "bestcost", SeatIDs: []string{seat}, TTL: holdTTL})
			if err != nil {
				return err
			}
			_, err = eng.Confirm(ctx, h, engine.ConfirmOptions{})
			return err
		}); err != nil {
			return err
		}
		sold = target
		for _, v := range []struct {
			name string
			req  engine.BestRequest
		}{
			{"2 anywhere", engine.BestRequest{ShowID: "bestcost", Count: 2, TTL: time.Minute}},
			{"4 together", engine.BestRequest{ShowID: "bestcost", Count: 4, Adjacent: true, TTL: time.Minute}},
		} {
			row, err := e.bestCalls(ctx, eng, v.req)
			if err != nil {
				return err
			}
			row.Variant = fmt.Sprintf("%s, %d%% sold", v.name, pct)
			if pct == 0 {
				base[v.name] = row.P50ms
			} else {
				row.Ratio = row.P50ms / base[v.name]
			}
			r.Rows = append(r.Rows, row)
			if pct == 95 {
				r.goal("best-available: HoldBest p50 at 95% sold / at 0%, "+v.name, "<= 2.00", row.Ratio, row.Ratio <= 2)
			}
		}
	}
	if err := e.bestReap(ctx, eng, r); err != nil {
		return err
	}
	return e.bestIndexBytes(ctx, r, len(venue))
}

// bestCalls drives HoldBest req and a Release of each hold from 8 callers: its row, with
// the Redis CPU of a call (a HoldBest and its Release).
func (e *env) bestCalls(ctx context.Context, eng *engine.Engine, req engine.BestRequest) (Row, error) {
	var refused, calls atomic.Int64
	cpu0, err := e.redisCPU(ctx)
	if err != nil {
		return Row{}, err
	}
	s := drive(ctx, 8, e.o.Warmup, e.o.Duration, func(ctx context.Context, _ int64) error {
		calls.Add(1)
		h, err := eng.HoldBest(ctx, req)
		if errors.Is(err, engine.ErrSeatsUnavailable) {
			refused.Add(1) // nothing fits: answered, and counted as a call
			return nil
		}
		if err != nil {
			return err
		}
		return eng.Release(ctx, h)
	})
	cpu1, err := e.redisCPU(ctx)
	if err != nil {
		return Row{}, err
	}
	return Row{Workload: "best-available: HoldBest+Release", Clients: 8, OpsPerS: s.rate(), P50ms: s.pct(.5), P99ms: s.pct(.99),
		Note: fmt.Sprintf("%d refused (nothing fits); Redis CPU %.1f µs a call (warm-up included)%s",
			refused.Load(), (cpu1-cpu0)*1e6/float64(max(1, calls.Load())), errNote(s))}, nil
}

// bestReaped is how many expired holds bestReap has one HoldBest give back.
const bestReaped = 500

// bestReap: bestReaped one-seat holds of 100 ms expire, then one HoldBest gives them back
// to the index before it chooses; the row is that call's time and its Redis CPU per hold
// given back.
func (e *env) bestReap(ctx context.Context, eng *engine.Engine, r *Report) error {
	const ttl = 100 * time.Millisecond
	var holds []engine.Hold
	for range bestReaped {
		h, err := eng.HoldBest(ctx, engine.BestRequest{ShowID: "bestcost", Count: 1, TTL: ttl})
		if err != nil {
			return err
		}
		holds = append(holds, h)
	}
	time.Sleep(time.Until(holds[len(holds)-1].ExpiresAt) + 50*time.Millisecond)
	cpu0, err := e.redisCPU(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	h, err := eng.HoldBest(ctx, engine.BestRequest{ShowID: "bestcost", Count: 1, TTL: time.Minute})
	took := time.Since(start)
	if err != nil {
		return err
	}
	cpu1, err := e.redisCPU(ctx)
	if err != nil {
		return err
	}
	r.Rows = append(r.Rows, Row{Workload: "best-available: expired holds given back", Variant: fmt.Sprintf("%d, by one HoldBest", bestReaped),
		Clients: 1, P50ms: ms(took), Note: fmt.Sprintf("Redis CPU %.1f µs per hold given back", (cpu1-cpu0)*1e6/bestReaped)})
	return eng.Release(ctx, h)
}

// bestIndexBytes is the index's bytes per seat: the show's index keys, summed.
func (e *env) bestIndexBytes(ctx context.Context, r *Report, seats int) error {
	var idx int64
	prefix := e.prefixes[len(e.prefixes)-1]
	for _, pattern := range []string{"mt:*", "fr:*", "rn:*", "rd:*", "sg"} {
		keys, err := e.rdb.Keys(ctx, showBase(prefix, "bestcost")+pattern).Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			n, _ := e.rdb.MemoryUsage(ctx, k, 0).Result()
			idx += n
		}
	}
	r.Memory.RedisIndexBytesPerSeat = float64(idx) / float64(seats)
	return nil
}

// bestSale sells a 20,000-seat venue's seats to 2,000 buyers wanting 1-4 seats
// together, twice: picking from the seat map, and best-available.
func (e *env) bestSale(ctx context.Context, r *Report) error {
	venue := demo.Venue(e.o.SaleSeats)
	var refusalsPer [2]float64
	for k, variant := range []string{"pick-your-seat (seat map, 100 ms old)", "best available, N together"} {
		eng, err := e.engine(engine.Config{MaxSeatsPerHold: 4, MaxSeatsPerHolder: 1000})
		if err != nil {
			return err
		}
		if err := eng.CreateShowLayout(ctx, "bestsale", venue); err != nil {
			return err
		}
		e.progress("   %s: %d buyers, %d seats", variant, e.o.SaleBuyers, len(venue))
		s := newBestSale(eng, venue, k == 0)
		sctx, cancel := context.WithTimeout(ctx, e.o.SaleTimeout)
		stopRefresh := s.refreshEvery(100 * time.Millisecond)
		rngs := make([]*rand.Rand, e.o.SaleBuyers)
		for b := range rngs {
			rngs[b] = rand.New(rand.NewPCG(uint64(b), uint64(k)))
		}
		lat, elapsed := crowd(sctx, e.o.SaleBuyers, func(ctx context.Context, b int) (time.Duration, bool) {
			if s.left.Load() <= 0 {
				return 0, false
			}
			return s.attempt(ctx, rngs[b]), true
		})
		stopRefresh()
		cancel()
		refusalsPer[k] = float64(s.refused.Load()) / float64(max(1, s.won.Load()))
		held := int64(len(venue)) - max(0, s.left.Load())
		r.Rows = append(r.Rows, Row{Workload: "best-available: the sale (holds)", Variant: variant, Clients: e.o.SaleBuyers,
			OpsPerS: float64(s.attempts.Load()) / elapsed.Seconds(), P50ms: p50(lat), P99ms: p99(lat),
			Note: fmt.Sprintf("%.2f refused attempts per block won (%d won, %d refused, of which %d errors%s); %.2fs until no block fits; ~%d seats held",
				refusalsPer[k], s.won.Load(), s.refused.Load(), s.failed.Load(), errText(s.firstErr.Load()), elapsed.Seconds(), held)})
	}
	r.goal("best-available: refused attempts per block won", "<= 1.10", refusalsPer[1], refusalsPer[1] <= 1.1)
	return nil
}

// bestSaleRun is one sale of the best-available workload: buyers pick blocks of 1-4
// seats from a seat map refreshed every 100 ms (pick), or ask for the best available.
type bestSaleRun struct {
	eng  *engine.Engine
	ids  []string
	pick bool
	c    *chooser

	attempts, refused, won, failed atomic.Int64
	left                           atomic.Int64 // seats not yet held
	firstErr                       atomic.Value
}

func newBestSale(eng *engine.Engine, venue []engine.Seat, pick bool) *bestSaleRun {
	ids := make([]string, len(venue))
	for i, s := range venue {
		ids[i] = s.ID
	}
	s := &bestSaleRun{eng: eng, ids: ids, pick: pick, c: newChooser(ids)}
	s.left.Store(int64(len(ids)))
	return s
}

// refreshEvery refreshes the buyers' seat map every d until the returned func is called.
func (s *bestSaleRun) refreshEvery(d time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(d):
				s.c.refresh()
			}
		}
	}()
	return func() { close(done) }
}

// attempt is one buyer's try for a block of 1-4 seats, timed (0: no try, nothing to
// pick from the map).
func (s *bestSaleRun) attempt(ctx context.Context, rng *rand.Rand) time.Duration {
	n := 1 + rng.IntN(4)
	t := time.Now() // a pick from the map is part of the attempt
	var idx []int
	if s.pick {
		if idx = s.c.pick(rng, n); len(idx) == 0 {
			time.Sleep(20 * time.Millisecond)
			return 0
		}
	}
	h, err := s.hold(ctx, idx, n)
	d := time.Since(t)
	s.attempts.Add(1)
	var sue *engine.SeatsUnavailableError
	switch {
	case err == nil:
		s.won.Add(1)
		s.left.Add(-int64(len(h.SeatIDs)))
		if s.pick {
			s.c.markSold(idx)
		}
	case errors.As(err, &sue):
		s.refused.Add(1)
		if s.pick {
			s.c.avoid(idx, saleRefusedC)
		} else if sue.Available == 0 {
			s.left.Store(0) // no free seat anywhere: the hold phase is over
		}
	case ctx.Err() == nil:
		s.refused.Add(1)
		s.failed.Add(1)
		s.firstErr.CompareAndSwap(nil, err.Error())
	}
	return d
}

// hold holds the seats idx of the map, or the best n together.
func (s *bestSaleRun) hold(ctx context.Context, idx []int, n int) (engine.Hold, error) {
	if !s.pick {
		return s.eng.HoldBest(ctx, engine.BestRequest{ShowID: "bestsale", Count: n, Adjacent: true, TTL: holdTTL})
	}
	want := make([]string, len(idx))
	for i, j := range idx {
		want[i] = s.ids[j]
	}
	return s.eng.Hold(ctx, engine.HoldRequest{ShowID: "bestsale", SeatIDs: want, TTL: holdTTL})
}

// errText is ", the first: <err>" for a recorded error, else "".
func errText(v any) string {
	if s, ok := v.(string); ok {
		return ", the first: " + s
	}
	return ""
}
