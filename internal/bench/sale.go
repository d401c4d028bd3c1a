package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// saleRun is what every simulated sale shares (the on-sale, the fair on-sale): its
// clock and its end (ctx: the sale's timeout), its sell-out, the buyers in flight, and
// the background work that samples it. A workload's file is its buyers' model on it.
type saleRun struct {
	ctx     context.Context
	cancel  context.CancelFunc
	start   time.Time
	soldOut chan struct{}
	once    sync.Once
	soldAt  time.Duration // when it sold out (0: not); read it after finish
	buyers  sync.WaitGroup
	bg      sync.WaitGroup
}

// newSaleRun starts a sale's clock; it ends at timeout, or when finish is called.
func newSaleRun(ctx context.Context, timeout time.Duration) *saleRun {
	s := &saleRun{start: time.Now(), soldOut: make(chan struct{})}
	s.ctx, s.cancel = context.WithTimeout(ctx, timeout)
	return s
}

// since is the time into the sale.
func (s *saleRun) since() time.Duration { return time.Since(s.start) }

// markSoldOut records the sell-out, once.
func (s *saleRun) markSoldOut() {
	s.once.Do(func() { s.soldAt = s.since(); close(s.soldOut) })
}

// over reports whether the sale sold out or ended.
func (s *saleRun) over() bool {
	select {
	case <-s.soldOut:
		return true
	case <-s.ctx.Done():
		return true
	default:
		return false
	}
}

// sleep waits d, or less when the sale ends: false then.
func (s *saleRun) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-s.ctx.Done():
		return false
	}
}

// think sleeps a buyer's think time, a sixth of longest to all of it.
func (s *saleRun) think(rng *rand.Rand, longest time.Duration) bool {
	return s.sleep(longest/6 + time.Duration(rng.Int64N(int64(longest)*5/6+1)))
}

// backOff sleeps 100-300 ms, as a shed client does before it tries again.
func (s *saleRun) backOff(rng *rand.Rand) bool {
	return s.sleep(100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond))))
}

// every runs fn every d, in the background, until the sale ends or fn returns false.
func (s *saleRun) every(d time.Duration, fn func(at time.Duration) bool) {
	s.bg.Go(func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case now := <-tick.C:
				if !fn(now.Sub(s.start)) {
					return
				}
			}
		}
	})
}

// arrive lets buyers in, checking every 5 ms, until the sale is over or due returns
// false: due says how many buyers are due by a time into the sale in all (arrived of
// them so far); admit(id), id from 0, returns each one's turn, started among the sale's
// buyers, or nil for one turned away.
func (s *saleRun) arrive(due func(at time.Duration, arrived int) (int, bool), admit func(id int) func()) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	arrived := 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.soldOut:
			return
		case now := <-tick.C:
			n, more := due(now.Sub(s.start), arrived)
			for ; arrived < n; arrived++ {
				if buyer := admit(arrived); buyer != nil {
					s.buyers.Go(buyer)
				}
			}
			if !more {
				return
			}
		}
	}
}

// waitUntil waits for the sale to sell out, to end, or for done to close.
func (s *saleRun) waitUntil(done <-chan struct{}) {
	select {
	case <-s.soldOut:
	case <-s.ctx.Done():
	case <-done:
	}
}

// buyersDone is closed once every buyer in flight has finished.
func (s *saleRun) buyersDone() <-chan struct{} {
	done := make(chan struct{})
	go func() { s.buyers.Wait(); close(done) }()
	return done
}

// finish ends the sale: buyers still in flight and the background work stop, and it
// returns how long the sale ran.
func (s *saleRun) finish() time.Duration {
	s.cancel()
	s.buyers.Wait()
	s.bg.Wait()
	return s.since()
}
