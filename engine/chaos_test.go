package engine

// The fault suite: a mixed workload of many holders (keyed holds, extend, release,
// confirm with idempotent retries, cancel, abandon, pay late, reclaim on another device,
// transfer to a friend; on a venue, places of a standing area and confirmations of part
// of a hold) runs while a fault is injected;
// afterwards the invariants are checked. make chaos runs it longer
// (HOLDFAST_CHAOS_SCALE); make test runs a bounded version.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/holdfast/holdfast/migrations"
)

// chaosScale multiplies the workload's duration: 1 in make test, more in make chaos.
func chaosScale() time.Duration {
	if k, err := strconv.Atoi(os.Getenv("HOLDFAST_CHAOS_SCALE")); err == nil && k > 0 {
		return time.Duration(k)
	}
	return 1
}

// chaosStats counts what a workload saw, for the report.
type chaosStats struct {
	ops      atomic.Int64
	holds    atomic.Int64 // Hold calls
	confirms atomic.Int64 // acknowledged confirmations
	refused  atomic.Int64 // definite refusals
	unavail  atomic.Int64 // ErrUnavailable answers
	swaps    atomic.Int64 // acknowledged exchanges
	joins    atomic.Int64 // waitlist joins acknowledged
	offers   atomic.Int64 // waitlist offers seen
}

// chaosWorkload is the mixed workload and what it was told.
type chaosWorkload struct {
	v     *env
	show  string
	seats []string
	stats chaosStats

	mu          sync.Mutex
	acked       map[uuid.UUID]bool // acknowledged bookings -> cancelled (acknowledged)
	refusedKeys []string           // holder|key of confirmations definitely refused
	mismatches  int                // idempotent retries that returned another booking
	unexpected  []error
	races       int      // confirmations raced by a release and another holder's hold
	moves       int      // holds reclaimed or transferred, then confirmed with the old hold too
	violations  []string // what those races and moves must never show
	// keysLost: the scenario destroys hold keys (a restart without persistence, a clock
	// jump), so another holder may hold a seat whose booking is still committing.
	keysLost bool
	// wd, when set, watches every confirmation (confirmWatched).
	wd *testsvc.Watchdog
	// places is the capacity of the show's standing area FLOOR (newChaosVenue; 0: none),
	// and placed the places each acknowledged booking confirmed.
	places int
	placed map[uuid.UUID]int
}

// confirmCall is one Confirm of the workload, under its watchdog when it has one (a
// call without a deadline then gets one of 30 s).
func (w *chaosWorkload) confirmCall(ctx context.Context, e *Engine, h Hold, opts ConfirmOptions) (Booking, error) {
	if w.wd == nil {
		return e.Confirm(ctx, h, opts)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	return confirmWatched(ctx, w.wd, e, h, opts)
}

func newChaosWorkload(v *env, show string, seats int) *chaosWorkload {
	w := &chaosWorkload{v: v, show: show, seats: seatNames(seats), acked: map[uuid.UUID]bool{}, placed: map[uuid.UUID]int{}}
	v.show(show, w.seats...)
	return w
}

// newChaosVenue is newChaosWorkload on a venue: the seats and a standing area FLOOR of
// places, which a quarter of the holds ask for (with a seat or alone).
func newChaosVenue(v *env, show string, seats, places int) *chaosWorkload {
	w := &chaosWorkload{v: v, show: show, seats: seatNames(seats), acked: map[uuid.UUID]bool{}, placed: map[uuid.UUID]int{}, places: places}
	layout := make([]Seat, seats)
	for i, id := range w.seats {
		layout[i] = Seat{ID: id, Position: i + 1}
	}
	if err := v.e.CreateShowVenue(v.t.Context(), show, Venue{Seats: layout, Areas: []Area{{ID: "FLOOR", Capacity: places}}}); err != nil {
		v.t.Fatalf("CreateShowVenue(%s): %v", show, err)
	}
	return w
}

// firstConfirmWait is how long past its duration a workload that has confirmed
// nothing yet goes on, for its first confirmation: a machine busy enough (make
// test-busy, other tests beside it) can spend a short scenario's whole duration on
// holds that lapse before their confirmation is scheduled.
const firstConfirmWait = 30 * time.Second

// run drives workers holders for d against the engines (several engines share the
// database and Redis, as several processes would), and past d until the first
// confirmation, for up to firstConfirmWait: a scenario whose engines never confirm
// again after its fault then fails (check: "confirmed nothing").
func (w *chaosWorkload) run(engines []*Engine, workers int, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d+firstConfirmWait)
	defer cancel()
	go func() {
		defer cancel()
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
		for w.stats.confirms.Load() == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	w.runCtx(ctx, engines, workers)
}

// runCtx is run until ctx ends.
func (w *chaosWorkload) runCtx(ctx context.Context, engines []*Engine, workers int) {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { w.worker(ctx, engines[i%len(engines)], fmt.Sprintf("h%02d", i), uint64(i)) })
	}
	wg.Wait()
}

func (w *chaosWorkload) note(err error) {
	w.stats.ops.Add(1)
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		w.stats.unavail.Add(1)
	case errors.Is(err, ErrSeatsUnavailable), errors.Is(err, ErrHoldLost), errors.Is(err, ErrStaleGeneration),
		errors.Is(err, ErrHolderLimit), errors.Is(err, ErrExtendLimit), errors.Is(err, ErrIdempotencyKeyReused),
		errors.Is(err, ErrOverloaded):
		w.stats.refused.Add(1)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
	default:
		w.mu.Lock()
		w.unexpected = append(w.unexpected, err)
		w.mu.Unlock()
	}
}

func (w *chaosWorkload) worker(ctx context.Context, e *Engine, holder string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	var mine []uuid.UUID
	waiting := false
	for n := 0; ctx.Err() == nil; n++ {
		if w.places > 0 && (waiting || rng.IntN(100) < 3) { // waits for what others give back
			waiting = w.waitlist(ctx, e, holder, fmt.Sprintf("%s-w%d", holder, n), &mine, rng)
		}
		if len(mine) > 0 && rng.IntN(100) < 30 { // seats come back, so the sale goes on
			id := mine[0]
			mine = mine[1:]
			err := e.Cancel(ctx, id)
			w.note(err)
			if err == nil {
				w.mu.Lock()
				w.acked[id] = true
				w.mu.Unlock()
			}
		}
		k := 1 + rng.IntN(2)
		perm := rng.Perm(len(w.seats))[:k]
		want := make([]string, k)
		for i, j := range perm {
			want[i] = w.seats[j]
		}
		ttl := time.Duration(200+rng.IntN(400)) * time.Millisecond
		key := fmt.Sprintf("%s-%d", holder, n)
		req := HoldRequest{ShowID: w.show, SeatIDs: want, TTL: ttl, HolderID: holder, IdempotencyKey: key}
		if w.places > 0 && rng.IntN(4) == 0 {
			req.Places = []Places{{AreaID: "FLOOR", Count: 1 + rng.IntN(3)}}
			if rng.IntN(2) == 0 {
				req.SeatIDs = nil
			}
		}
		h, err := w.hold(ctx, e, req)
		if err != nil {
			time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			continue
		}
		switch r := rng.IntN(100); {
		case r < 5: // reclaims it on another device, and pays there
			w.moved(ctx, e, h, key, &mine, func() (Hold, error) {
				hs, err := e.Reclaim(ctx, w.show, holder)
				for _, x := range hs {
					if slices.Equal(x.SeatIDs, h.SeatIDs) {
						return x, err
					}
				}
				return Hold{}, cmp.Or(err, ErrHoldLost)
			})
		case r < 8: // hands it to a friend, who pays
			w.moved(ctx, e, h, key, &mine, func() (Hold, error) { return e.Transfer(ctx, h, holder+"-friend") })
		case r < 9: // abandons
		case r < 15 && len(mine) > 0: // exchanges part of a booking for it
			w.exchange(ctx, e, h, key, mine[len(mine)-1])
		case r < 10:
		case r < 20:
			w.note(e.Release(ctx, h))
		case r < 30:
			h2, err := e.Extend(ctx, h, ttl)
			w.note(err)
			if err == nil {
				h = h2
			}
			w.confirm(ctx, e, h, key, &mine)
		case r < 40: // pays late
			time.Sleep(ttl + 20*time.Millisecond)
			w.confirm(ctx, e, h, key, &mine)
		case r < 50: // confirms and releases at once, while another holder tries the seats
			w.raceConfirm(ctx, e, h, key, &mine)
		default:
			w.confirm(ctx, e, h, key, &mine)
		}
	}
}

// hold holds under an idempotency key, retrying under it while the answer is
// ErrUnavailable (a retry gets the first call's hold if that one was granted).
func (w *chaosWorkload) hold(ctx context.Context, e *Engine, req HoldRequest) (Hold, error) {
	for attempt := 0; ; attempt++ {
		w.stats.holds.Add(1)
		h, err := e.Hold(ctx, req)
		w.note(err)
		if err == nil || !errors.Is(err, ErrUnavailable) || attempt == 2 || ctx.Err() != nil {
			return h, err
		}
		time.Sleep(time.Duration(20*(attempt+1)) * time.Millisecond)
	}
}

// moved moves h to a new hold (move: a reclaim on another device or a transfer) and
// confirms the new one; once the move has succeeded, a confirmation with h, the old
// hold, is refused (its token no longer owns the seats in Redis, and its generation is
// below the new one at PostgreSQL's fence) — unless the scenario makes Redis forget
// writes (keysLost), where the fence alone cannot know a move it never saw.
func (w *chaosWorkload) moved(ctx context.Context, e *Engine, h Hold, key string, mine *[]uuid.UUID, move func() (Hold, error)) {
	moved, err := move()
	w.note(err)
	if err != nil {
		return
	}
	late, err := w.confirmCall(ctx, e, h, ConfirmOptions{IdempotencyKey: key + "-old"})
	w.note(err)
	w.mu.Lock()
	w.moves++
	if err == nil && !w.keysLost {
		w.violations = append(w.violations, fmt.Sprintf("hold %v: moved to generation %d, then booked with the old hold (booking %s)", h.SeatIDs, moved.Generation, late.ID))
	}
	w.mu.Unlock()
	w.confirm(ctx, e, moved, key, mine)
}

// raceConfirm confirms h while releasing it and while another holder tries to hold its
// seats, all at once: the confirmation and the release never both succeed, and, unless
// the scenario destroys hold keys, no other hold is granted on the seats of a hold whose
// confirmation succeeded.
func (w *chaosWorkload) raceConfirm(ctx context.Context, e *Engine, h Hold, key string, mine *[]uuid.UUID) {
	var confirmed bool
	var relErr, otherErr error
	var wg sync.WaitGroup
	wg.Go(func() { confirmed = w.confirm(ctx, e, h, key, mine) })
	wg.Go(func() {
		relErr = e.Release(ctx, h)
		w.note(relErr)
	})
	otherErr = errors.New("no seats to try") // a hold of places alone: another holder's places are others
	if len(h.SeatIDs) > 0 {
		wg.Go(func() {
			_, otherErr = e.Hold(ctx, HoldRequest{ShowID: w.show, SeatIDs: h.SeatIDs, TTL: 200 * time.Millisecond, HolderID: h.HolderID + "-rival"})
			w.note(otherErr)
		})
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.races++
	if confirmed && relErr == nil {
		w.violations = append(w.violations, fmt.Sprintf("hold %v: released and confirmed", h.SeatIDs))
	}
	if confirmed && otherErr == nil && !w.keysLost {
		w.violations = append(w.violations, fmt.Sprintf("hold %v: confirmed while another holder was granted its seats", h.SeatIDs))
	}
}

// waitlist joins holder to the show's waitlist (category "": the seats and FLOOR) for 1
// or 2, or, on it already, looks at their entry: an offer is confirmed (three times in
// four; else left to expire) while another holder tries its seats, which must be
// refused while the offer lives. It reports whether holder is still waiting.
func (w *chaosWorkload) waitlist(ctx context.Context, e *Engine, holder, key string, mine *[]uuid.UUID, rng *rand.Rand) bool {
	entry, err := e.WaitEntry(ctx, w.show, holder, "")
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrOfferExpired) {
		entry, err = e.JoinWaitlist(ctx, WaitRequest{ShowID: w.show, HolderID: holder, Count: 1 + rng.IntN(2), OfferTTL: 300 * time.Millisecond})
		if err == nil {
			w.stats.joins.Add(1)
		}
	}
	w.note(err)
	if err != nil || entry.Offer == nil {
		return err == nil
	}
	o := *entry.Offer
	w.stats.offers.Add(1)
	if rng.IntN(4) == 0 {
		return false // lets it expire: it goes to the next
	}
	var rivalErr error = errors.New("no seats to try")
	var wg sync.WaitGroup
	if len(o.SeatIDs) > 0 {
		wg.Go(func() {
			_, rivalErr = e.Hold(ctx, HoldRequest{ShowID: w.show, SeatIDs: o.SeatIDs, TTL: 200 * time.Millisecond, HolderID: holder + "-rival"})
			w.note(rivalErr)
		})
	}
	confirmed := w.confirm(ctx, e, o, key, mine)
	wg.Wait()
	if confirmed && rivalErr == nil && !w.keysLost {
		w.mu.Lock()
		w.violations = append(w.violations, fmt.Sprintf("offer %v: confirmed while another holder was granted its seats", o.SeatIDs))
		w.mu.Unlock()
	}
	return false
}

// confirm confirms with an idempotency key, retrying with the same key while the
// answer is ErrUnavailable, and sometimes once more after a success (a lost response).
// It reports whether the hold was confirmed.
func (w *chaosWorkload) confirm(ctx context.Context, e *Engine, h Hold, key string, mine *[]uuid.UUID) bool {
	opts := partOf(h)
	opts.IdempotencyKey = key
	for attempt := 0; attempt < 4 && ctx.Err() == nil; attempt++ {
		b, err := w.confirmCall(ctx, e, h, opts)
		w.note(err)
		switch {
		case err == nil:
			w.stats.confirms.Add(1)
			w.mu.Lock()
			w.acked[b.ID] = false
			w.placed[b.ID] = placesTotal(b.Places)
			w.mu.Unlock()
			*mine = append(*mine, b.ID)
			if rand.IntN(5) == 0 {
				again, err := w.confirmCall(ctx, e, h, opts)
				w.note(err)
				if err == nil && again.ID != b.ID {
					w.mu.Lock()
					w.mismatches++
					w.mu.Unlock()
				}
			}
			return true
		case errors.Is(err, ErrUnavailable), errors.Is(err, ErrOverloaded):
			time.Sleep(time.Duration(20*(attempt+1)) * time.Millisecond)
		default:
			if errors.Is(err, ErrHoldLost) || errors.Is(err, ErrStaleGeneration) || errors.Is(err, ErrSeatsUnavailable) {
				w.mu.Lock()
				w.refusedKeys = append(w.refusedKeys, h.HolderID+"|"+key)
				w.mu.Unlock()
			}
			return false
		}
	}
	return false
}

// exchange gives back a seat (or a place) of booking id for hold h, under an
// idempotency key, retrying under it while the answer is ErrUnavailable. The booking's
// places are what the last definite answer says; one left unknown is not checked
// (placed -1).
func (w *chaosWorkload) exchange(ctx context.Context, e *Engine, h Hold, key string, id uuid.UUID) {
	b, err := e.Booking(ctx, id)
	if err != nil || b.Status != BookingConfirmed || b.HolderID != h.HolderID { // a friend's, moved to them
		return
	}
	var give []string
	var givePlaces []Places
	switch {
	case len(b.SeatIDs) > 0:
		give = b.SeatIDs[:1]
	case len(b.Places) > 0:
		givePlaces = []Places{{AreaID: b.Places[0].AreaID, Count: 1}}
	}
	opts := ConfirmOptions{IdempotencyKey: key + "-x"}
	for attempt := 0; attempt < 4 && ctx.Err() == nil; attempt++ {
		after, err := e.Exchange(ctx, id, give, givePlaces, h, opts)
		w.note(err)
		switch {
		case err == nil:
			w.stats.swaps.Add(1)
			w.mu.Lock()
			w.placed[id] = placesTotal(after.Places)
			w.mu.Unlock()
			return
		case errors.Is(err, ErrHoldLost), errors.Is(err, ErrStaleGeneration), errors.Is(err, ErrSeatsUnavailable),
			errors.Is(err, ErrHolderLimit), errors.Is(err, ErrIdempotencyKeyReused):
			return // refused: the booking is as it was
		}
		// Unknown (unavailable, overloaded, the caller gone): it may have committed.
		w.mu.Lock()
		w.placed[id] = -1
		w.mu.Unlock()
		time.Sleep(time.Duration(20*(attempt+1)) * time.Millisecond)
	}
}

// partOf is, for a third of the holds that have more than one seat or place, the
// options of a confirmation of part of the hold (the rest is released with it).
func partOf(h Hold) ConfirmOptions {
	if rand.IntN(3) != 0 {
		return ConfirmOptions{}
	}
	switch {
	case len(h.Places) == 1 && h.Places[0].Count > 1:
		return ConfirmOptions{Places: []Places{{AreaID: h.Places[0].AreaID, Count: h.Places[0].Count - 1}}, SeatIDs: h.SeatIDs}
	case len(h.SeatIDs) > 1:
		return ConfirmOptions{SeatIDs: h.SeatIDs[:1], Places: h.Places}
	}
	return ConfirmOptions{}
}

// placesTotal is the places of ps.
func placesTotal(ps []Places) int {
	n := 0
	for _, p := range ps {
		n += p.Count
	}
	return n
}

// check asserts the invariants after the faults healed.
func (w *chaosWorkload) check(t *testing.T, e *Engine) {
	t.Helper()
	v := w.v
	ctx := context.Background()
	for _, err := range w.unexpected {
		t.Errorf("unexpected error kind: %v", err)
	}
	if n := v.doubleBookings(); n != 0 {
		t.Errorf("%d seats booked twice", n)
	}
	// Every confirmation and exchange was accepted above the fence it met: per seat, the
	// generations of the confirmed and exchanged events rise strictly in commit order.
	if n := v.count(`SELECT count(*) FROM (
		SELECT generation, lag(generation) OVER (PARTITION BY show_id, s ORDER BY event_id) AS prev
		FROM booking_events, unnest(seat_ids) s WHERE kind IN ('confirmed', 'exchanged')) x
		WHERE prev IS NOT NULL AND generation <= prev`); n != 0 {
		t.Errorf("%d confirmations accepted at or below the fence they met", n)
	}
	w.mu.Lock()
	for _, s := range w.violations {
		t.Errorf("race: %s", s)
	}
	races, moves := w.races, w.moves
	acked := maps.Clone(w.acked)
	refused := append([]string(nil), w.refusedKeys...)
	mismatches := w.mismatches
	w.mu.Unlock()
	if mismatches != 0 {
		t.Errorf("%d idempotent retries returned another booking", mismatches)
	}
	for id, cancelled := range acked {
		b, err := e.Booking(ctx, id)
		switch {
		case err != nil:
			t.Errorf("acknowledged booking %s: %v", id, err)
		case cancelled && b.Status != BookingCancelled:
			t.Errorf("acknowledged cancellation of %s, status %s", id, b.Status)
		}
	}
	q := db.New(v.pool)
	for _, hk := range refused {
		holder, key, _ := strings.Cut(hk, "|")
		_, err := q.BookingGetByIdempotencyKey(ctx, db.BookingGetByIdempotencyKeyParams{ShowID: w.show, HolderID: holder, IdempotencyKey: key})
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Errorf("a refused confirmation (%s) has a booking: %v", hk, err)
		}
	}
	// Redis's sold markers equal the database's claims after Resync.
	if err := e.Resync(ctx, w.show); err != nil {
		t.Fatalf("resync: %v", err)
	}
	if got, want := v.soldMarkers(w.show), v.claimMarks(w.show); !maps.Equal(got, want) {
		t.Errorf("sold markers after Resync %v, claims %v", got, want)
	}
	w.checkPlaces(t, e)
	t.Logf("ops %d, holds %d, confirms %d, exchanges %d, waitlist joins %d and offers %d, refusals %d, unavailable %d, bookings %d, confirm/release/hold races %d, holds reclaimed or transferred %d, violations 0 if no error above",
		w.stats.ops.Load(), w.stats.holds.Load(), w.stats.confirms.Load(), w.stats.swaps.Load(), w.stats.joins.Load(), w.stats.offers.Load(),
		w.stats.refused.Load(), w.stats.unavail.Load(), len(acked), races, moves)
	if w.stats.confirms.Load() == 0 {
		t.Error("the workload confirmed nothing: the scenario tested nothing")
	}
}

// checkPlaces asserts, on a venue, that the area never sold past its capacity, that the
// database's count of it is its claimed places (areaSold) and at least the places of
// the acknowledged bookings that stand, each of which has the places it confirmed, and
// that Redis counts the same places sold after Resync.
func (w *chaosWorkload) checkPlaces(t *testing.T, e *Engine) {
	t.Helper()
	if w.places == 0 {
		return
	}
	sold := w.v.areaSold(w.show, "FLOOR")
	if sold > w.places {
		t.Errorf("FLOOR sold %d places of %d", sold, w.places)
	}
	w.mu.Lock()
	acked, placed := maps.Clone(w.acked), maps.Clone(w.placed)
	w.mu.Unlock()
	standing := 0
	for id, cancelled := range acked {
		if cancelled {
			continue
		}
		// A cancellation whose answer was ErrUnavailable may have committed: the booking's
		// status says.
		b, err := e.Booking(context.Background(), id)
		if err != nil || b.Status != BookingConfirmed {
			continue
		}
		if placed[id] < 0 { // an exchange of it left unknown
			continue
		}
		if placesTotal(b.Places) != placed[id] {
			t.Errorf("booking %s has %d places, confirmed with %d", id, placesTotal(b.Places), placed[id])
		}
		standing += placed[id]
	}
	if standing > sold {
		t.Errorf("the acknowledged bookings that stand have %d places, the database counts %d sold", standing, sold)
	}
	if c, _, s := w.v.areaState(w.show, "FLOOR"); c != w.places || s != sold {
		t.Errorf("Redis's FLOOR after Resync: capacity %d, sold %d; want %d and %d", c, s, w.places, sold)
	}
	t.Logf("FLOOR: %d of %d places sold, %d of them by acknowledged bookings that stand", sold, w.places, standing)
}

// noLeak waits until the goroutine count is back near its baseline.
func noLeak(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines leaked: %d now, %d before\n%s", runtime.NumGoroutine(), baseline, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestChaos runs the mixed workload under each Redis-side fault. Not parallel: the
// goroutine count must mean something.
func TestChaos(t *testing.T) {
	d := 1500 * time.Millisecond * chaosScale()
	scenarios := []struct {
		name     string
		extra    []string
		keysLost bool
		fault    func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{})
	}{
		{name: "redis restarted without persistence", keysLost: true, fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			sleepOr(stop, d/3)
			srv.Restart()
		}},
		{name: "redis frozen past the TTL and the client timeout", fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			sleepOr(stop, d/4)
			srv.Pause()
			sleepOr(stop, 900*time.Millisecond) // holds live 200-600ms; calls time out at 500ms
			srv.Resume()
		}},
		{name: "forward clock jump (every hold's PTTL cut)", keysLost: true, fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			for {
				if sleepOr(stop, 30*time.Millisecond) {
					return
				}
				ctx := context.Background()
				keys, _ := v.rdb.Keys(ctx, v.cfg.KeyPrefix+":*:hold:*").Result()
				for _, k := range keys {
					v.rdb.PExpire(ctx, k, time.Millisecond)
				}
			}
		}},
		{name: "redis out of memory", fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			sleepOr(stop, d/4)
			v.rdb.ConfigSet(context.Background(), "maxmemory", "1")
			sleepOr(stop, d/3)
			v.rdb.ConfigSet(context.Background(), "maxmemory", "0")
		}},
		{name: "function flush between calls", fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			for !sleepOr(stop, 10*time.Millisecond) {
				v.rdb.FunctionFlush(context.Background())
			}
		}},
		{name: "redis maxclients far below the concurrency", fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			// A connection of its own, opened first, sets and lifts the limit.
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1, MaxIdleConns: 1, ConnMaxIdleTime: -1})
			defer admin.Close()
			admin.Ping(context.Background())
			sleepOr(stop, d/4)
			admin.ConfigSet(context.Background(), "maxclients", "4")
			srv.KillClients(t)
			sleepOr(stop, d/3)
			if err := admin.ConfigSet(context.Background(), "maxclients", "10000").Err(); err != nil {
				t.Errorf("lift maxclients: %v", err)
			}
		}},
		{name: "postgres connection limit far below the concurrency", fault: func(t *testing.T, v *env, srv *testsvc.RedisServer, stop <-chan struct{}) {
			sleepOr(stop, d/4)
			var name string
			v.pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name)
			admin, err := pgx.Connect(context.Background(), v.pool.Config().ConnString())
			if err != nil {
				t.Errorf("admin connection: %v", err)
				return
			}
			defer admin.Close(context.Background())
			admin.Exec(context.Background(), "ALTER DATABASE "+name+" CONNECTION LIMIT 3")
			v.pool.Reset() // drop pooled connections: new ones meet the limit
			sleepOr(stop, d/3)
			if _, err := admin.Exec(context.Background(), "ALTER DATABASE "+name+" CONNECTION LIMIT -1"); err != nil {
				t.Errorf("lift the connection limit: %v", err)
			}
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			srv := testsvc.StartRedis(t, sc.extra...)
			opt := testsvc.RedisOptions(t, srv.URL())
			opt.ReadTimeout, opt.WriteTimeout, opt.DialTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			v := newEnvWith(t, testsvc.Database(t), rdb, func(c *Config) { c.LockTimeout = 500 * time.Millisecond })
			w := newChaosVenue(v, "chaos", 30, 24)
			w.keysLost = sc.keysLost
			baseline := runtime.NumGoroutine()
			stop := make(chan struct{})
			var fault sync.WaitGroup
			fault.Go(func() { sc.fault(t, v, srv, stop) })
			twin := v.twin()
			w.run([]*Engine{v.e, twin}, 16, d)
			close(stop)
			fault.Wait()
			srv.Resume()
			w.check(t, v.e)
			twin.Close() // started after the baseline: its loops are not a leak
			noLeak(t, baseline)
		})
	}
}

// sleepOr sleeps for d or until stop closes; it reports whether stop closed.
func sleepOr(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return true
	case <-time.After(d):
		return false
	}
}

// TestChaosHoldReplyLost: a proxy in front of Redis drops the reply of the hold script
// now and then, so go-redis retries it. The counter moves at most once per logical hold,
// and every granted hold's seats hold its token.
func TestChaosHoldReplyLost(t *testing.T) {
	srv := testsvc.StartRedis(t)
	proxy := testsvc.StartProxy(t, srv.Addr())
	fn := []byte(lua.Hold.Name())
	var n atomic.Int64
	proxy.SetCut(func(chunk []byte) bool { return bytes.Contains(chunk, fn) && n.Add(1)%4 == 0 })
	opt := testsvc.RedisOptions(t, "redis://"+proxy.Addr()+"/0")
	opt.MaxRetries = 5
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	v := newEnvWith(t, testsvc.Database(t), rdb)
	w := newChaosVenue(v, "cut", 30, 24)
	w.run([]*Engine{v.e}, 8, 1500*time.Millisecond*chaosScale())
	if proxy.Cuts.Load() == 0 {
		t.Fatal("the proxy cut no reply: the scenario tested nothing")
	}
	if c := v.counter("cut"); c > w.stats.holds.Load() {
		t.Fatalf("counter %d after %d hold calls: a retried script moved it twice", c, w.stats.holds.Load())
	}
	t.Logf("%d replies cut", proxy.Cuts.Load())
	w.check(t, v.e)
}

// TestChaosBackendTerminatedBeforeCommit: the PostgreSQL backend running a confirmation
// is terminated just before COMMIT: ErrUnavailable, no claim, no fence moved; a retry
// with the same key books once.
// terminateIdleInTransaction ends the server process of the connection idle in its
// transaction: the confirmation's, paused in a hook.
func terminateIdleInTransaction(t *testing.T, pool *pgxpool.Pool) {
	if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`); err != nil {
		t.Errorf("terminate: %v", err)
	}
}

func TestChaosBackendTerminatedBeforeCommit(t *testing.T) {
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	h := v.hold("s1", time.Minute, "alice", "A1", "A2")
	armed := true
	v.e.hooks.beforeCommit = func(ctx context.Context) {
		if !armed {
			return
		}
		armed = false
		terminateIdleInTransaction(t, v.pool)
	}
	_, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "k"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm on a terminated backend: %v, want ErrUnavailable", err)
	}
	if n := v.count("SELECT count(*) FROM seat_claims") + v.count("SELECT count(*) FROM seat_fences WHERE generation > 0"); n != 0 {
		t.Fatalf("a failed commit left %d claims or fences", n)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "k"})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	again, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "k"})
	if err != nil || again.ID != b.ID || v.bookings("s1") != 1 {
		t.Fatalf("second retry %v %v; %d bookings", again.ID, err, v.bookings("s1"))
	}
}

// TestChaosCommitReplyLost: a proxy in front of PostgreSQL forwards COMMIT and drops
// the connection before the reply. The engine settles the outcome before answering: the
// booking it reports exists, and a retry with the same key returns that one booking.
func TestChaosCommitReplyLost(t *testing.T) {
	base, pool, proxy := proxiedDatabase(t)
	var dbName string
	if err := base.QueryRow(t.Context(), "SELECT current_database()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	armed := cutAtCommit(proxy)
	v := newEnvWith(t, pool, testsvc.Redis(t))
	for i, seat := range []string{"A1", "A2", "A3"} {
		if i == 0 {
			v.show("s1", "A1", "A2", "A3")
		}
		h := v.hold("s1", time.Minute, "alice", seat)
		armed.Store(true)
		start := time.Now()
		b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "k-" + seat})
		t.Logf("confirm with the COMMIT reply lost: %v after %v", err, time.Since(start))
		if armed.Load() {
			t.Fatal("the proxy never saw the COMMIT")
		}
		switch {
		case err == nil:
			if got, err := v.e.Booking(t.Context(), b.ID); err != nil || got.Status != BookingConfirmed {
				t.Fatalf("reported booking %s is not in the database: %v", b.ID, err)
			}
		case errors.Is(err, ErrUnavailable):
		default:
			t.Fatalf("confirm with the COMMIT reply lost: %v", err)
		}
		again, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "k-" + seat})
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		if b.ID != uuid.Nil && again.ID != b.ID {
			t.Fatalf("retry returned %s, first %s", again.ID, b.ID)
		}
	}
	if n := v.bookings("s1"); n != 3 || v.doubleBookings() != 0 {
		t.Fatalf("%d bookings, want 3", n)
	}
	if proxy.Cuts.Load() != 3 {
		t.Fatalf("%d COMMIT replies cut, want 3", proxy.Cuts.Load())
	}
}

// TestChaosPostgresCrash: PostgreSQL is stopped with -m immediate under load and
// restarted. Every acknowledged booking is there afterwards; confirmations in flight
// converge through their idempotent retries.
func TestChaosPostgresCrash(t *testing.T) {
	pg := testsvc.StartPostgres(t)
	cfg, err := pgxpool.ParseConfig(pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxNewPool(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	v := newEnvWith(t, pool, testsvc.Redis(t), func(c *Config) { c.StatementTimeout = time.Second })
	w := newChaosVenue(v, "crash", 30, 24)
	d := 2 * time.Second * chaosScale()
	var fault sync.WaitGroup
	fault.Go(func() {
		time.Sleep(d / 3)
		pg.StopImmediate()
		time.Sleep(300 * time.Millisecond)
		pg.Start()
	})
	w.run([]*Engine{v.e, v.twin()}, 16, d)
	fault.Wait()
	if w.stats.unavail.Load() == 0 {
		t.Error("no call saw PostgreSQL down: the crash tested nothing")
	}
	w.check(t, v.e)
}
