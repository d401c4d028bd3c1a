package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// The faults of group commit, the marker outbox, the seat-map view, fence locks and the
// best-available index (docs/RELIABILITY.md), one test each: each fails without the
// mechanism it names.

// TestReleaseWaitsForACommittingConfirmation: once a batch has checked a hold in Redis it
// has it reserved: a Release of it waits for the batch's outcome instead of answering OK
// (and then ErrHoldLost, the hold made a booking), and no other hold is granted on its
// seats in the meantime; in both isolation modes.
func TestReleaseWaitsForACommittingConfirmation(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, func(t *testing.T, savepoints bool) {
		v := newEnv(t, func(c *Config) { c.ConfirmSavepoints = savepoints })
		v.show("rc", "A1", "A2")
		h := v.hold("rc", time.Minute, "", "A1", "A2")
		reserved, proceed := make(chan struct{}), make(chan struct{})
		var once sync.Once
		v.e.hooks.afterReserve = func(context.Context) {
			once.Do(func() {
				close(reserved)
				<-proceed
			})
		}
		confirmed := make(chan error, 1)
		go func() {
			_, err := v.e.Confirm(context.Background(), h, ConfirmOptions{})
			confirmed <- err
		}()
		<-reserved

		released := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			released <- v.e.Release(ctx, h)
		}()
		_, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "rc", SeatIDs: []string{"A2"}, TTL: time.Minute, HolderID: "other"})
		if !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("hold on a seat whose hold a batch is committing: %v, want ErrSeatsUnavailable", err)
		}
		select {
		case err := <-released:
			t.Fatalf("release answered (%v) while a batch was committing the hold", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(proceed)
		if err := <-confirmed; err != nil {
			t.Fatalf("confirm: %v", err)
		}
		if err := <-released; !errors.Is(err, ErrHoldLost) {
			t.Fatalf("release of a hold that made a booking: %v, want ErrHoldLost", err)
		}
		if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "rc", SeatIDs: []string{"A1"}, TTL: time.Minute}); !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("hold on a sold seat: %v", err)
		}
	})
}

// TestHoldGivenBackWhenItsBatchFails: a hold whose batch reserved it and then failed
// before COMMIT is the owner's again, as it was: it extends, confirms and keeps its
// value; nothing of the batch is in the database.
func TestHoldGivenBackWhenItsBatchFails(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("gb", "A1")
	h := v.hold("gb", time.Minute, "", "A1")
	before := v.holdValue("gb", "A1")
	var once sync.Once
	v.e.hooks.afterReserve = func(context.Context) {
		once.Do(func() { terminateIdleInTransaction(t, v.pool) })
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm whose transaction was cut: %v, want ErrUnavailable", err)
	}
	if got := v.holdValue("gb", "A1"); got != before {
		t.Fatalf("hold value after the failed batch %q, before %q", got, before)
	}
	if n := v.bookings("gb"); n != 0 {
		t.Fatalf("%d bookings after a failed batch", n)
	}
	h2, err := v.e.Extend(t.Context(), h, 2*time.Minute)
	if err != nil {
		t.Fatalf("extend after the failed batch: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm again: %v", err)
	}
}

// TestReleaseConfirmAndHoldRace: 200 holds, each confirmed, released and held by
// someone else at the same moment. Exactly one of the confirmation and the release wins
// each time, and no other hold is granted on a seat whose confirmation succeeded.
func TestReleaseConfirmAndHoldRace(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	const n = 200
	seats := seatNames(n)
	v.show("race", seats...)
	holds := make([]Hold, n)
	for i, s := range seats {
		holds[i] = v.hold("race", time.Minute, "", s)
	}
	type outcome struct{ confirm, release, other error }
	out := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		ctx := t.Context()
		wg.Go(func() { <-start; _, out[i].confirm = v.e.Confirm(ctx, holds[i], ConfirmOptions{}) })
		wg.Go(func() { <-start; out[i].release = v.e.Release(ctx, holds[i]) })
		wg.Go(func() {
			<-start
			_, out[i].other = v.e.Hold(ctx, HoldRequest{ShowID: "race", SeatIDs: []string{seats[i]}, TTL: time.Minute, HolderID: "other"})
		})
	}
	close(start)
	wg.Wait()
	confirms, releases := 0, 0
	for i, o := range out {
		for _, err := range []error{o.confirm, o.release} {
			if err != nil && !errors.Is(err, ErrHoldLost) {
				t.Fatalf("seat %s: unexpected error %v", seats[i], err)
			}
		}
		if (o.confirm == nil) == (o.release == nil) {
			t.Errorf("seat %s: confirm %v and release %v: want exactly one to succeed", seats[i], o.confirm, o.release)
		}
		if o.confirm == nil {
			confirms++
			if o.other == nil {
				t.Errorf("seat %s: a hold was granted on it and its confirmation succeeded", seats[i])
			}
		} else {
			releases++
		}
	}
	if got := v.bookings("race"); got != confirms {
		t.Errorf("%d bookings, %d confirmations succeeded", got, confirms)
	}
	t.Logf("%d pairs: %d confirmations won, %d releases won", n, confirms, releases)
}

// TestMarkerRepairDrainsBacklog: 4,000 owed marker writes and two engines. One pass of
// each drains everything due (not a page per tick), the two split the rows (none is
// written twice), and every sold seat is refused to holds after. Then the same again
// with the background loops, from the moment Redis takes writes: how long until every
// seat is refused is logged (the bound is stated in docs/RELIABILITY.md).
func TestMarkerRepairDrainsBacklog(t *testing.T) {
	t.Parallel()
	const rows = 4000
	owe := func(v *env, show string) {
		t.Helper()
		if _, err := v.pool.Exec(t.Context(), `INSERT INTO marker_outbox (show_id, generation, sold, seat_ids, created_at)
			SELECT $1, 1000 + n, true, ARRAY['S' || lpad(n::text, 5, '0')], now() - interval '5 seconds'
			FROM generate_series(0, $2 - 1) n`, show, rows); err != nil {
			t.Fatal(err)
		}
	}
	soldSeats := func(v *env, show string) int {
		n := 0
		for _, m := range v.soldMarkers(show) {
			if !strings.HasPrefix(m, "-") {
				n++
			}
		}
		return n
	}
	refusedAll := func(v *env, e *Engine, show string, seats []string) {
		t.Helper()
		for _, s := range []string{seats[0], seats[rows/2], seats[rows-1]} {
			if _, err := e.Hold(t.Context(), HoldRequest{ShowID: show, SeatIDs: []string{s}, TTL: time.Minute}); !errors.Is(err, ErrSeatsUnavailable) {
				t.Fatalf("hold on sold seat %s after the repair: %v", s, err)
			}
		}
	}

	t.Run("one pass each", func(t *testing.T) {
		v := newEnv(t, func(c *Config) { c.MarkerRepairInterval = time.Hour }) // no background rounds
		seats := seatNames5(rows)
		v.show("backlog", seats...)
		a, b := v.e, v.twin()
		owe(v, "backlog")
		var na, nb int
		var wg sync.WaitGroup
		start := time.Now()
		wg.Go(func() {
			var err error
			if na, err = a.repayOnce(t.Context()); err != nil {
				t.Errorf("engine a: %v", err)
			}
		})
		wg.Go(func() {
			var err error
			if nb, err = b.repayOnce(t.Context()); err != nil {
				t.Errorf("engine b: %v", err)
			}
		})
		wg.Wait()
		t.Logf("%d rows in %v: engine a wrote %d, engine b %d", rows, time.Since(start), na, nb)
		if left := v.count("SELECT count(*) FROM marker_outbox"); left != 0 {
			t.Fatalf("%d rows left after one pass of each engine", left)
		}
		if na+nb != rows {
			t.Fatalf("the engines wrote %d + %d rows, want %d between them (none twice)", na, nb, rows)
		}
		if got := soldSeats(v, "backlog"); got != rows {
			t.Fatalf("%d seats marked sold, want %d", got, rows)
		}
		refusedAll(v, a, "backlog", seats)
	})

	t.Run("after Redis takes writes again", func(t *testing.T) {
		v, srv := privateEnv(t)
		seats := seatNames5(rows)
		v.show("backlog", seats...)
		b := v.twin()
		srv.Pause() // every repair round fails (or waits) while Redis is frozen
		owe(v, "backlog")
		time.Sleep(300 * time.Millisecond) // the loops try, and fail
		srv.Resume()
		resumed := time.Now()
		deadline := resumed.Add(time.Minute)
		for soldSeats(v, "backlog") < rows {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d seats marked sold a minute after Redis came back", soldSeats(v, "backlog"), rows)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%d owed rows, two engines: every sold seat marked %v after Redis took writes again", rows, time.Since(resumed))
		refusedAll(v, b, "backlog", seats)
	})
}

// TestSeatMapReadsFreeAfterFeedLoss: after Redis lost the show's feed (FLUSHALL) and the
// map was rebuilt, the engine's own earlier writes count as in the map: a read does not
// wait for a feed position that no longer exists.
func TestSeatMapReadsFreeAfterFeedLoss(t *testing.T) {
	t.Parallel()
	v, srv := privateEnv(t)
	v.show("fl", "A1", "A2")
	ctx := t.Context()
	if _, err := v.e.SeatMap(ctx, "fl"); err != nil {
		t.Fatal(err)
	}
	v.hold("fl", time.Minute, "", "A1") // this engine's write: the view waits for it
	if _, err := v.e.SeatMap(ctx, "fl"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Resync(ctx, "fl"); err != nil {
		t.Fatal(err)
	}
	v.e.views.mu.RLock()
	view := v.e.views.m["fl"]
	v.e.views.mu.RUnlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		view.mu.Lock()
		rebuilt := view.lastID == "0-0" && view.built && !view.resync.Load()
		view.mu.Unlock()
		if rebuilt {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the map was not rebuilt after Redis lost the feed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want, applied := view.want.Load(), view.applied.Load(); want > applied {
		t.Fatalf("after the rebuild the view waits for position %d, has %d: every read would wait %v", want, applied, ownWriteWait)
	}
	start := time.Now()
	m, err := v.e.SeatMap(ctx, "fl")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read after the rebuild: %v", time.Since(start))
	if st := m.States[slices.IndexFunc(m.Layout, func(s Seat) bool { return s.ID == "A1" })]; st != SeatFree {
		t.Fatalf("A1 is %v after Redis lost its hold", st)
	}
}

// TestLockedFenceRefusesOnlyItsConfirmations: a fence locked by another transaction (a
// paused engine mid-batch, say) past LockTimeout refuses the confirmations of its batch
// that touch it, ErrUnavailable, and the others commit; in both isolation modes.
func TestLockedFenceRefusesOnlyItsConfirmations(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, func(t *testing.T, savepoints bool) {
		v := newEnv(t, func(c *Config) {
			c.ConfirmConns, c.ConfirmSavepoints, c.LockTimeout = 1, savepoints, 300*time.Millisecond
		})
		v.show("lf", "S0", "A1", "B1", "B2")
		first, ha, hb := v.hold("lf", time.Minute, "", "S0"), v.hold("lf", time.Minute, "", "A1"), v.hold("lf", time.Minute, "", "B1", "B2")
		ctx := t.Context()

		// Another transaction holds A1's fence.
		locker, err := v.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = locker.Rollback(context.Background()) }()
		if _, err := locker.Exec(ctx, "SELECT 1 FROM seat_fences WHERE show_id = 'lf' AND seat_id = 'A1' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		// The only committer is busy with first until ha and hb wait together.
		gate := holdFirstBatch(v.e)
		errs := make(chan error, 3)
		go func() { _, err := v.e.Confirm(ctx, first, ConfirmOptions{}); errs <- err }()
		<-gate.entered
		var ea, eb error
		var wg sync.WaitGroup
		wg.Go(func() { _, ea = v.e.Confirm(ctx, ha, ConfirmOptions{}) })
		waitQueued(t, v.e, 1)
		wg.Go(func() { _, eb = v.e.Confirm(ctx, hb, ConfirmOptions{}) })
		waitQueued(t, v.e, 2)
		close(gate.open)
		wg.Wait()
		if err := <-errs; err != nil {
			t.Fatalf("first: %v", err)
		}
		if eb != nil {
			t.Fatalf("a confirmation whose seats nobody locked: %v", eb)
		}
		if !errors.Is(ea, ErrUnavailable) {
			t.Fatalf("a confirmation whose fence stayed locked: %v, want ErrUnavailable", ea)
		}
		_ = locker.Rollback(ctx)
		if _, err := v.e.Confirm(ctx, ha, ConfirmOptions{}); err != nil {
			t.Fatalf("confirm once the fence is free: %v", err)
		}
		if n := v.bookings("lf"); n != 3 {
			t.Fatalf("%d bookings, want 3", n)
		}
	})
}

// batchGate holds the first batch of an engine in its transaction (beforeCommit) until
// open is closed; entered is closed once it is there.
type batchGate struct{ entered, open chan struct{} }

func holdFirstBatch(e *Engine) batchGate {
	g := batchGate{make(chan struct{}), make(chan struct{})}
	var once sync.Once
	e.hooks.beforeCommit = func(context.Context) {
		once.Do(func() {
			close(g.entered)
			<-g.open
		})
	}
	return g
}

// venue creates a show with a layout and returns it.
func (v *env) venue(id string, layout []Seat) *show {
	v.t.Helper()
	if err := v.e.CreateShowLayout(v.t.Context(), id, layout); err != nil {
		v.t.Fatalf("CreateShowLayout(%s): %v", id, err)
	}
	return v.showOf(id)
}

// holdAll holds seats ten at a time (the most one hold takes by default).
func (v *env) holdAll(show string, ttl time.Duration, seats []string) []Hold {
	v.t.Helper()
	var holds []Hold
	for chunk := range slices.Chunk(seats, 10) {
		holds = append(holds, v.hold(show, ttl, "", chunk...))
	}
	return holds
}

func seatIDs(seats []Seat) []string {
	ids := make([]string, len(seats))
	for i, s := range seats {
		ids[i] = s.ID
	}
	return ids
}

// waitQueued waits until n confirmations wait in e's queue.
func waitQueued(t *testing.T, e *Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(e.gc.queue) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d confirmations queued, want %d", len(e.gc.queue), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestExtendKeepsSoldSeatOutOfIndex: a hold granted while its seat's sold marker was
// owed outlives the marker (mark.lua leaves it to its owner, whose confirmation the
// claim refuses); extending it must not list the sold seat in the best-available index.
func TestExtendKeepsSoldSeatOutOfIndex(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.venue("ex", venueLayout(1, 2, 6))
	seat := "A01-003"
	v.hold("ex", time.Minute, "", "A01-001") // an earlier generation
	h := v.hold("ex", time.Minute, "late", seat)
	// The marker of a booking of an earlier generation arrives now.
	if err := v.e.markBooking(t.Context(), v.showOf("ex"), []string{seat}, marker(h.Generation-1, true)); err != nil {
		t.Fatal(err)
	}
	v.indexConsistent("ex")
	if _, err := v.e.Extend(t.Context(), h, 2*time.Minute); err != nil {
		t.Fatalf("extend: %v", err)
	}
	v.indexConsistent("ex")
}

// TestHoldBestSeesEveryExpiredHold: the best seat's hold expired a little after 150
// others; HoldBest gives the best seat, not the best of the first hundred expired.
func TestHoldBestSeesEveryExpiredHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	sh := v.venue("bx", venueLayout(1, 10, 30))
	byScore := slices.Clone(sh.layout)
	score := func(s Seat) int64 { return int64(s.Rank)*bestScale + int64(sh.index[s.ID]) }
	slices.SortFunc(byScore, func(a, b Seat) int { return int(score(a) - score(b)) })
	best, next := byScore[0], byScore[1:151]
	early := v.holdAll("bx", 50*time.Millisecond, seatIDs(next))
	late := v.hold("bx", 300*time.Millisecond, "", best.ID)
	for _, h := range early {
		v.waitExpired(h)
	}
	v.waitExpired(late)
	h, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "bx", Count: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if h.SeatIDs[0] != best.ID {
		t.Fatalf("HoldBest gave %s while the best seat %s was free", h.SeatIDs[0], best.ID)
	}
}

// TestHoldBestGivesBackLargeBacklogs: more expired holds than one script call gives back
// (best.lua's REAP_MAX): HoldBest calls again until all are back, and picks the best.
func TestHoldBestGivesBackLargeBacklogs(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	sh := v.venue("bl", venueLayout(1, 100, 30))
	for _, h := range v.holdAll("bl", 30*time.Millisecond, seatIDs(sh.layout)) {
		v.waitExpired(h)
	}
	h, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "bl", Count: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := bestOffline(sh, map[string]bool{}, BestRequest{Count: 1})
	if got := sumOf(sh, h.SeatIDs); got != want {
		t.Fatalf("HoldBest after %d expired holds gave %v (score %d), best is %d", len(sh.layout), h.SeatIDs, got, want)
	}
	v.indexConsistent("bl")
}

// TestDefaultQueueAdmitsConcurrentConfirmers: on pgxpool's default pool size for this
// machine (4) and every other default, 200 confirmations made at once, every hold with a
// minute to live, are all queued and committed: none is shed with ErrOverloaded.
func TestDefaultQueueAdmitsConcurrentConfirmers(t *testing.T) {
	t.Parallel()
	v := newEnvWith(t, poolOf(t, 4), testsvc.Redis(t))
	const n = 200
	seats := seatNames(n)
	v.show("dq", seats...)
	holds := make([]Hold, n)
	for i, s := range seats {
		holds[i] = v.hold("dq", time.Minute, "", s)
	}
	var shed, failed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, h := range holds {
		wg.Go(func() {
			<-start
			_, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
			switch {
			case errors.Is(err, ErrOverloaded):
				shed.Add(1)
			case err != nil:
				failed.Add(1)
				t.Errorf("confirm: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if shed.Load() != 0 {
		t.Fatalf("%d of %d confirmations shed with ErrOverloaded (queue %d)", shed.Load(), n, v.e.cfg.MaxConfirmQueue)
	}
	if got := v.bookings("dq"); got != n {
		t.Fatalf("%d bookings, want %d", got, n)
	}
}

// TestRetryRefusedByAdmissionGetsItsBooking: a retried confirmation that admission
// refuses (the queue is full) looks its idempotency key up first: a request that
// committed gets its booking, never a refusal.
func TestRetryRefusedByAdmissionGetsItsBooking(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxConfirmQueue, c.ConfirmConns = 1, 1 })
	v.show("rr", "A1", "A2", "A3", "A4")
	ctx := t.Context()
	h1 := v.hold("rr", time.Minute, "buyer", "A1")
	b, err := v.e.Confirm(ctx, h1, ConfirmOptions{IdempotencyKey: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	// Fill the queue: the committer busy with h2, h3 waiting.
	gate := holdFirstBatch(v.e)
	h2, h3 := v.hold("rr", time.Minute, "", "A2"), v.hold("rr", time.Minute, "", "A3")
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = v.e.Confirm(ctx, h2, ConfirmOptions{}) })
	<-gate.entered
	wg.Go(func() { _, _ = v.e.Confirm(ctx, h3, ConfirmOptions{}) })
	waitQueued(t, v.e, 1)
	defer func() { close(gate.open); wg.Wait() }()

	again, err := v.e.Confirm(ctx, h1, ConfirmOptions{IdempotencyKey: "order-1"})
	if err != nil {
		t.Fatalf("retry of a committed confirmation while the queue is full: %v", err)
	}
	if again.ID != b.ID || !again.Replayed {
		t.Fatalf("retry answered booking %s (replayed %v), want %s", again.ID, again.Replayed, b.ID)
	}
	if _, err := v.e.Confirm(ctx, v.hold("rr", time.Minute, "", "A4"), ConfirmOptions{}); !errors.Is(err, ErrOverloaded) {
		t.Fatal("a new confirmation with the queue full was not refused")
	}
}

// TestHundredThousandSeats: a show of 100,000 seats is created whatever the
// confirmation's statement timeout (its inserts do not run under it), and its seat map,
// rebuilt from scratch by another engine, never shows a hold's expiry before Redis's:
// the holds on the layout's last seats, whose expiries a rebuild reads last, included.
func TestHundredThousandSeats(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.StatementTimeout = 50 * time.Millisecond })
	const n = 100_000
	seats := seatNames5(n)
	start := time.Now()
	if err := v.e.CreateShow(t.Context(), "big", seats); err != nil {
		t.Fatalf("create a show of %d seats with a %v statement timeout: %v", n, v.cfg.StatementTimeout, err)
	}
	t.Logf("created %d seats in %v", n, time.Since(start))
	// Ten seats at every twentieth of the layout, and its last 200.
	var held []string
	for k := 1; k < 20; k++ {
		held = append(held, seats[k*n/20:k*n/20+10]...)
	}
	held = append(held, seats[n-200:]...)
	v.holdAll("big", time.Minute, held)
	m, err := v.twin().SeatMap(t.Context(), "big")
	if err != nil {
		t.Fatal(err)
	}
	sh := v.showOf("big")
	early := 0
	for _, s := range held {
		x, err := v.rdb.PExpireTime(t.Context(), sh.holdKeys[s]).Result()
		if err != nil {
			t.Fatal(err)
		}
		i := sh.index[s]
		if m.States[i] != SeatHeld {
			t.Fatalf("seat %s is %v in the map, held in Redis", s, m.States[i])
		}
		if shown := m.Expires[i].UnixMilli(); shown < x.Milliseconds() {
			early++
			if early <= 5 {
				t.Errorf("seat %s: the map shows its hold expiring at %d, %d ms before Redis's %d", s, shown, x.Milliseconds()-shown, x.Milliseconds())
			}
		}
	}
	if early > 0 {
		t.Fatalf("%d of %d holds shown expiring before Redis expires them", early, len(held))
	}
}

// TestConfirmNeedsRedisWrites: a batch reserves each hold it confirms, a write; while
// Redis refuses writes a confirmation answers ErrUnavailable and writes nothing, and
// once Redis takes writes again the same hold confirms.
func TestConfirmNeedsRedisWrites(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	v.show("nw", "A1")
	h := v.hold("nw", time.Minute, "", "A1")
	refuseWrites(t, v.rdb, true)
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm while Redis refuses writes: %v, want ErrUnavailable", err)
	}
	if n := v.count("SELECT count(*) FROM bookings"); n != 0 {
		t.Fatalf("%d bookings written by a confirmation that answered ErrUnavailable", n)
	}
	refuseWrites(t, v.rdb, false)
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm once Redis takes writes: %v", err)
	}
}
