package bench

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// saleRefusedC is how long a buyer avoids seats it was refused.
const saleRefusedC = 200 * time.Millisecond

// chooser is the buyers' shared view of the stadium, as a seat map a client refreshes
// now and then: which seats are known sold, and which to avoid for a while. Buyers aim
// at the best 10% of seats 80% of the time.
type chooser struct {
	seats []string
	best  int
	sold  []atomic.Bool
	busy  []atomic.Int64 // avoid until (unix nanoseconds)
	left  atomic.Int64
	avail atomic.Pointer[[]int] // unsold seats at the last refresh, best first
}

func newChooser(seats []string) *chooser {
	c := &chooser{seats: seats, best: max(1, len(seats)/10), sold: make([]atomic.Bool, len(seats)), busy: make([]atomic.Int64, len(seats))}
	c.left.Store(int64(len(seats)))
	c.refresh()
	return c
}

// refresh rebuilds the list of unsold seats (the seat map a buyer's page reloads).
func (c *chooser) refresh() {
	avail := make([]int, 0, c.left.Load())
	for i := range c.seats {
		if !c.sold[i].Load() {
			avail = append(avail, i)
		}
	}
	c.avail.Store(&avail)
}

func (c *chooser) pick(rng *rand.Rand, k int) []int {
	now := time.Now().UnixNano()
	avail := *c.avail.Load()
	if len(avail) == 0 {
		return nil
	}
	hi := len(avail)
	if nb, _ := slices.BinarySearch(avail, c.best); nb > 0 && rng.IntN(100) < 80 {
		hi = nb // avail is sorted: the first nb entries are the best seats
	}
	out := make([]int, 0, k)
	for try := 0; try < 16 && len(out) < k; try++ {
		i := avail[rng.IntN(hi)]
		if !c.sold[i].Load() && c.busy[i].Load() < now && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

func (c *chooser) avoid(idx []int, d time.Duration) {
	until := time.Now().Add(d).UnixNano()
	for _, i := range idx {
		c.busy[i].Store(until)
	}
}

func (c *chooser) markSold(idx []int) {
	for _, i := range idx {
		if !c.sold[i].Swap(true) {
			c.left.Add(-1)
		}
	}
}

func p99(l []time.Duration) float64 {
	if len(l) == 0 {
		return 0
	}
	return float64(l[min(len(l)-1, len(l)*99/100)].Microseconds()) / 1000
}

func p50(l []time.Duration) float64 {
	if len(l) == 0 {
		return 0
	}
	return float64(l[len(l)/2].Microseconds()) / 1000
}
