package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/engine"
)

const (
	saleHoldTTL  = 2 * time.Second
	saleRefusedC = 200 * time.Millisecond // how long a buyer avoids seats it was refused
)

// design is one way to sell seats: hold some, then confirm them.
type design interface {
	hold(ctx context.Context, buyer string, seats []string) (any, error)
	confirm(ctx context.Context, buyer string, seats []string, h any) error
	doubleBooked(ctx context.Context) (int, error)
	soldSeats(ctx context.Context) (int, error)
}

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

// saleResult is one design's sale.
type saleResult struct {
	elapsed          time.Duration
	holdAttempts     int64
	confirms         int64
	holdLat, confLat []time.Duration
	soldOut          bool
}

// sell runs the flash sale on one design: buyers hold 1–4 seats and confirm (90%) or
// abandon (10%) until every seat is sold or the timeout.
func (e *env) sell(ctx context.Context, d design, seats []string) saleResult {
	c := newChooser(seats)
	ctx, cancel := context.WithTimeout(ctx, e.o.SaleTimeout)
	defer cancel()
	var attempts, confirms atomic.Int64
	var mu sync.Mutex
	var holdLat, confLat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { // the seat map refreshes every 100ms
		for ctx.Err() == nil && c.left.Load() > 0 {
			time.Sleep(100 * time.Millisecond)
			c.refresh()
		}
	})
	for b := range e.o.SaleBuyers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(b), uint64(start.UnixNano())))
			buyer := fmt.Sprintf("buyer%05d", b)
			var hl, cl []time.Duration
			defer func() {
				mu.Lock()
				holdLat, confLat = append(holdLat, hl...), append(confLat, cl...)
				mu.Unlock()
			}()
			for ctx.Err() == nil && c.left.Load() > 0 {
				idx := c.pick(rng, 1+rng.IntN(4))
				if len(idx) == 0 {
					time.Sleep(20 * time.Millisecond) // nothing looks free: wait for the next seat map
					continue
				}
				want := make([]string, len(idx))
				for i, j := range idx {
					want[i] = seats[j]
				}
				t := time.Now()
				h, err := d.hold(ctx, buyer, want)
				hl = append(hl, time.Since(t))
				attempts.Add(1)
				if err != nil {
					c.avoid(idx, saleRefusedC)
					continue
				}
				if rng.IntN(100) < 10 { // abandons: the hold expires by itself
					c.avoid(idx, saleHoldTTL)
					continue
				}
				t = time.Now()
				err = d.confirm(ctx, buyer, want, h)
				cl = append(cl, time.Since(t))
				if err == nil {
					confirms.Add(1)
					c.markSold(idx)
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(holdLat)
	slices.Sort(confLat)
	return saleResult{elapsed: time.Since(start), holdAttempts: attempts.Load(), confirms: confirms.Load(),
		holdLat: holdLat, confLat: confLat, soldOut: c.left.Load() == 0}
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

func (e *env) flashSale(ctx context.Context, r *Report) error {
	seats := make([]string, e.o.SaleSeats)
	for i := range seats {
		seats[i] = fmt.Sprintf("B%03dR%02dS%02d", i/1000, (i/40)%25, i%40)
	}
	eng, err := e.engine(engine.Config{MaxSeatsPerHold: 4})
	if err != nil {
		return err
	}
	if err := eng.CreateShow(ctx, "stadium", seats); err != nil {
		return err
	}
	hf := &holdfastDesign{e: eng, env: e}
	dbo, err := newDBOnly(ctx, e, seats)
	if err != nil {
		return err
	}
	results := map[string]saleResult{}
	for _, c := range []struct {
		name string
		d    design
	}{{"holdfast (Redis holds)", hf}, {"database-only (UPDATE holds)", dbo}} {
		e.progress("   %s: %d buyers, %d seats", c.name, e.o.SaleBuyers, len(seats))
		res := e.sell(ctx, c.d, seats)
		double, err := c.d.doubleBooked(ctx)
		if err != nil {
			return err
		}
		sold, err := c.d.soldSeats(ctx)
		if err != nil {
			return err
		}
		if double != 0 {
			return fmt.Errorf("%s booked %d seats twice", c.name, double)
		}
		note := fmt.Sprintf("sold %d/%d in %.2fs, %.0f confirms/s, confirm p99 %.1fms, double bookings %d",
			sold, len(seats), res.elapsed.Seconds(), float64(res.confirms)/res.elapsed.Seconds(), p99(res.confLat), double)
		if !res.soldOut {
			note += " (NOT sold out before the timeout)"
		}
		results[c.name] = res
		r.Rows = append(r.Rows, Row{Workload: "flash sale: hold attempts", Variant: c.name, Clients: e.o.SaleBuyers,
			OpsPerS: float64(res.holdAttempts) / res.elapsed.Seconds(), P50ms: p50(res.holdLat), P99ms: p99(res.holdLat), Note: note})
		e.progress("   %s", note)
	}
	h, d := results["holdfast (Redis holds)"], results["database-only (UPDATE holds)"]
	hRate := float64(h.holdAttempts) / h.elapsed.Seconds()
	dRate := float64(d.holdAttempts) / d.elapsed.Seconds()
	r.Rows[len(r.Rows)-2].Ratio = hRate / dRate
	r.goal("flash sale hold attempts/s, holdfast / database-only", ">= 3.00", hRate/dRate, hRate/dRate >= 3)
	r.goal("flash sale time to sell out, database-only / holdfast", "> 1.00", d.elapsed.Seconds()/h.elapsed.Seconds(),
		h.soldOut && d.elapsed > h.elapsed)
	return nil
}

// holdfastDesign sells through the engine.
type holdfastDesign struct {
	e   *engine.Engine
	env *env
}

func (h *holdfastDesign) hold(ctx context.Context, buyer string, seats []string) (any, error) {
	return h.e.Hold(ctx, engine.HoldRequest{ShowID: "stadium", SeatIDs: seats, TTL: saleHoldTTL, HolderID: buyer})
}

func (h *holdfastDesign) confirm(ctx context.Context, _ string, _ []string, v any) error {
	_, err := h.e.Confirm(ctx, v.(engine.Hold), engine.ConfirmOptions{})
	return err
}

func (h *holdfastDesign) doubleBooked(ctx context.Context) (n int, err error) {
	err = h.env.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT bs.seat_id FROM booking_seats bs JOIN bookings b USING (show_id, booking_id)
		WHERE bs.show_id = 'stadium' AND b.status = 'confirmed'
		GROUP BY bs.seat_id HAVING count(*) > 1) d`).Scan(&n)
	return
}

func (h *holdfastDesign) soldSeats(ctx context.Context) (n int, err error) {
	err = h.env.pool.QueryRow(ctx, "SELECT count(*) FROM seat_claims WHERE show_id = 'stadium'").Scan(&n)
	return
}

// dbOnly is the design the seat-hold articles describe: a row per seat with held_by and
// held_until, holds by conditional UPDATE, confirms in the same database. It exists
// only inside the bench, as the baseline.
type dbOnly struct{ env *env }

func newDBOnly(ctx context.Context, e *env, seats []string) (*dbOnly, error) {
	_, err := e.pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS dbonly_seats (
    show_id    text NOT NULL,
    seat_id    text NOT NULL,
    held_by    text,
    held_until timestamptz,
    booking_id uuid,
    PRIMARY KEY (show_id, seat_id)
);
CREATE TABLE IF NOT EXISTS dbonly_bookings (
    booking_id uuid PRIMARY KEY,
    show_id    text NOT NULL,
    seat_ids   text[] NOT NULL,
    holder     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return nil, err
	}
	_, err = e.pool.Exec(ctx, "INSERT INTO dbonly_seats (show_id, seat_id) SELECT 'stadium', s FROM unnest($1::text[]) s ON CONFLICT DO NOTHING", seats)
	return &dbOnly{env: e}, err
}

var errRefused = errors.New("refused")

func (d *dbOnly) hold(ctx context.Context, buyer string, seats []string) (any, error) {
	token := uuid.NewString()
	err := pgx.BeginFunc(ctx, d.env.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE dbonly_seats SET held_by = $2, held_until = now() + $3 * interval '1 millisecond'
			WHERE show_id = 'stadium' AND seat_id = ANY($1) AND booking_id IS NULL
			  AND (held_until IS NULL OR held_until < now())`, seats, token, saleHoldTTL.Milliseconds())
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(seats)) {
			return errRefused // all or nothing: roll back
		}
		return nil
	})
	return token, err
}

func (d *dbOnly) confirm(ctx context.Context, buyer string, seats []string, v any) error {
	return pgx.BeginFunc(ctx, d.env.pool, func(tx pgx.Tx) error {
		id := uuid.New()
		tag, err := tx.Exec(ctx, `UPDATE dbonly_seats SET booking_id = $2
			WHERE show_id = 'stadium' AND seat_id = ANY($1) AND held_by = $3 AND held_until > now() AND booking_id IS NULL`,
			seats, id, v.(string))
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(seats)) {
			return errRefused
		}
		_, err = tx.Exec(ctx, "INSERT INTO dbonly_bookings (booking_id, show_id, seat_ids, holder) VALUES ($1, 'stadium', $2, $3)", id, seats, buyer)
		return err
	})
}

func (d *dbOnly) doubleBooked(ctx context.Context) (n int, err error) {
	err = d.env.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT s FROM dbonly_bookings, unnest(seat_ids) s GROUP BY s HAVING count(*) > 1) d`).Scan(&n)
	return
}

func (d *dbOnly) soldSeats(ctx context.Context) (n int, err error) {
	err = d.env.pool.QueryRow(ctx, "SELECT count(*) FROM dbonly_seats WHERE booking_id IS NOT NULL").Scan(&n)
	return
}
