package engine

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// Group commit. Confirmations do not each run a transaction: they join a queue, and a
// few committers (Config.ConfirmConns) each take what waits there — up to
// Config.ConfirmBatch confirmations, without waiting for more unless
// Config.ConfirmBatchWait says so — and confirm it in one PostgreSQL transaction on one
// connection. Alone, a confirmation is a batch of one and waits for nothing; under
// load, confirmations arriving while the committers are busy make the next batches,
// so the batch size follows the load and one COMMIT (and its fsync) serves many.
//
// A batch's transaction, each step one round trip:
//  1. lock the fences of every seat of the batch, in (show, seat) order, skipping those
//     another transaction has locked: the confirmations that touch one leave the batch
//     and go back to the queue (past Config.LockTimeout of that, ErrUnavailable), the
//     others go on; a batch never waits for a lock, so batches never wait for each
//     other. Then read which of the seats are claimed (a statement of its own);
//  2. ask Redis, in one pipeline, whether each confirmation's hold is still current, and
//     reserve it for the batch (reserve.lua): one that is not leaves the batch
//     (ErrHoldLost) before anything of it is written; one that is can no longer be
//     released, extended or expire until the batch has decided;
//  3. decide each remaining confirmation in Go, in queue order, as the single
//     transactions would have one after the other: refused by a fence that has seen its
//     generation, by a seat claimed (before, or by an earlier confirmation of the
//     batch), by an idempotency key an earlier confirmation of the batch used;
//  4. write the accepted ones: every fence in one statement, the bookings pipelined;
//  5. COMMIT. A lost reply is settled (resolveCommit) for the whole batch at once.
//
// Statements write only what was decided, so a refusal costs the others nothing. A
// write that fails anyway — a unique violation the reads cannot see, such as an
// idempotency key a concurrent batch is inserting — rolls the transaction back; the
// confirmation it belongs to gets its refusal and the rest run again without it. Then
// the sold markers of every booking go to Redis in one pipeline (they replace the
// reserved hold keys), the holds of confirmations that did not commit are given back as
// they were (unreserve.lua), and each caller gets its answer. A caller's context ends its wait only while its confirmation is still
// queued; once taken, the batch answers it within the batch's own bounds.
//
// With Config.ConfirmSavepoints, step 1 reads no claims and steps 3 and 4 are instead,
// for each confirmation, the statements of a lone confirmation in a savepoint of its own
// (writeInSavepoints): the database decides, a refusal rolls back to the savepoint, and
// it costs a round trip per statement.

// confirmReq is one confirmation, queued or in a batch.
type confirmReq struct {
	ctx      context.Context // the caller's, never cancelled: its trace
	c        *confirmation
	gen      int64
	id       uuid.UUID
	queued   time.Time
	expires  time.Time    // its hold's expiry
	leaves   time.Time    // its caller's context's deadline, if it has one
	deadline time.Time    // taken later than this, its hold would expire before a commit
	state    atomic.Int32 // reqQueued, then reqTaken or reqAbandoned
	done     chan struct{}

	// The outcome, set before done is closed.
	res      committed
	err      error
	marked   bool // its sold markers are in Redis
	reserved bool // its hold is reserved for its batch in Redis (reserve.lua)
	// its reservation's reply was lost: its hold may be reserved for its batch, by a
	// check Redis ran before the batch stopped waiting (reserve.lua refuses a later one)
	unanswered bool
	nonce      string // its last check's (nonce.go): a give-back names it

	// Set while a seat's fence is locked elsewhere (deferFenceBusy).
	busySince  time.Time
	busyRounds int
}

const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// answer gives r its outcome.
func (r *confirmReq) answer(err error) {
	r.err = err
	close(r.done)
}

// committer is the queue and the goroutines that confirm what waits in it: up to
// Config.ConfirmConns, started when confirmations queue and ended when the queue is
// empty, so an idle engine runs none.
type committer struct {
	queue  chan *confirmReq
	onConn atomic.Int64 // moving average of a batch's time on its connection, ns

	mu      sync.Mutex
	running int  // committers running
	closed  bool // the engine is closed: start no more
	wg      sync.WaitGroup
}

// took records how long a batch held its connection.
func (g *committer) took(d time.Duration) {
	for {
		old := g.onConn.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if g.onConn.CompareAndSwap(old, next) {
			return
		}
	}
}

// needs is how long a batch is expected to hold its connection (at least 2 ms).
func (g *committer) needs() time.Duration {
	return max(2*time.Millisecond, time.Duration(g.onConn.Load()))
}

// wakeCommitter starts a committer unless Config.ConfirmConns run already. It reports
// false when the engine is closed (no committer will take what is queued).
func (e *Engine) wakeCommitter() bool {
	g := e.gc
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if g.running < e.cfg.ConfirmConns {
		g.running++
		g.wg.Add(1)
		go e.commitLoop()
	}
	return true
}

// commitLoop is one committer: it takes a batch from the queue and confirms it, until
// the queue is empty.
func (e *Engine) commitLoop() {
	g := e.gc
	defer g.wg.Done()
	for {
		select {
		case first := <-g.queue:
			if batch := e.gather(first); len(batch) > 0 {
				e.commitBatch(batch)
			}
			continue
		default:
		}
		// A confirmation queued after the look above and before this lock finds this
		// committer still counted, so it is taken here; one queued after it starts a
		// committer of its own.
		g.mu.Lock()
		if len(g.queue) == 0 || g.closed {
			g.running--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
	}
}

// stopCommitters lets the running batches finish and answers what is left queued.
func (e *Engine) stopCommitters() {
	g := e.gc
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
	for {
		select {
		case r := <-g.queue:
			if r.state.CompareAndSwap(reqQueued, reqTaken) {
				r.answer(errClosed)
			}
		default:
			return
		}
	}
}

// commit queues a confirmation of the hold (current in Redis, expiring at expires) and
// waits for its batch. It refuses at once with ErrOverloaded when the queue is full, and
// with ErrHoldLost when no batch takes it while its hold could still be confirmed. A
// refusal changes nothing.
func (e *Engine) commit(ctx context.Context, c *confirmation, gen int64, id uuid.UUID, expires time.Time) (*confirmReq, error) {
	now := time.Now()
	r := &confirmReq{ctx: context.WithoutCancel(ctx), c: c, gen: gen, id: id, queued: now, expires: expires, done: make(chan struct{})}
	r.leaves, _ = ctx.Deadline()
	// A batch that takes it later than its expiry less a batch's time could only roll
	// it back at the Redis check; one whose hold has less than that left may still try.
	r.deadline = expires.Add(-e.gc.needs())
	if !r.deadline.After(now) {
		r.deadline = expires
	}
	select {
	case e.gc.queue <- r:
	default:
		return nil, e.shed()
	}
	if !e.wakeCommitter() && r.state.CompareAndSwap(reqQueued, reqAbandoned) {
		return nil, errClosed
	}
	timer := time.NewTimer(time.Until(r.deadline))
	defer timer.Stop()
	select {
	case <-r.done:
		return r, nil
	case <-timer.C:
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return nil, e.tooLate(r)
		}
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return nil, unavailable("postgres", ctx.Err())
		}
	}
	<-r.done // taken: its batch answers within its own bounds
	return r, nil
}

// queueFull reports whether Config.MaxConfirmQueue confirmations wait already: a
// confirmation now would be shed.
func (e *Engine) queueFull() bool { return len(e.gc.queue) >= cap(e.gc.queue) }

// shed counts and returns the refusal of a confirmation the full queue has no room for.
func (e *Engine) shed() error {
	e.m.admissionRefusals.WithLabelValues("queue_full").Inc()
	return fmt.Errorf("%w: %d confirmations wait for the database already (Config.MaxConfirmQueue)", ErrOverloaded, len(e.gc.queue))
}

// errTooLate marks the refusal of a confirmation that its hold could not wait for.
var errTooLate = errors.New("too late for its hold")

// errClosed refuses confirmations once the engine is closed.
var errClosed = fmt.Errorf("%w: the engine is closed", ErrUnavailable)

// tooLate returns the refusal of a confirmation whose hold would expire
// before its batch could commit it.
func (e *Engine) tooLate(r *confirmReq) error {
	return fmt.Errorf("%w: %w: its confirmation waited %v for the database and the hold expires in %v, before a confirmation (about %v) could finish",
		ErrHoldLost, errTooLate, time.Since(r.queued).Round(time.Millisecond), max(0, time.Until(r.expires)).Round(time.Millisecond), e.gc.needs().Round(time.Millisecond))
}

// gather takes first and what else waits in the queue, up to Config.ConfirmBatch,
// waiting up to Config.ConfirmBatchWait for more. Confirmations their callers left, or
// taken too late for their holds, are answered here and left out.
func (e *Engine) gather(first *confirmReq) []*confirmReq {
	var batch []*confirmReq
	take := func(r *confirmReq) {
		if !r.state.CompareAndSwap(reqQueued, reqTaken) {
			return // its caller left
		}
		now := time.Now()
		e.m.confirmQueueWait.Observe(now.Sub(r.queued).Seconds())
		if now.After(r.deadline) {
			r.answer(e.tooLate(r))
			return
		}
		batch = append(batch, r)
	}
	take(first)
	var wait <-chan time.Time
	if e.cfg.ConfirmBatchWait > 0 {
		t := time.NewTimer(e.cfg.ConfirmBatchWait)
		defer t.Stop()
		wait = t.C
	}
	for len(batch) < e.cfg.ConfirmBatch {
		select {
		case r := <-e.gc.queue:
			take(r)
			continue
		default:
		}
		if wait == nil {
			return batch
		}
		select {
		case r := <-e.gc.queue:
			take(r)
		case <-wait:
			return batch
		}
	}
	return batch
}

// batchTimeout bounds a batch, from taking a connection to its answers.
func (e *Engine) batchTimeout() time.Duration {
	return e.cfg.LockTimeout + 2*e.cfg.StatementTimeout
}

// confirmOverrun is how much longer than its caller's deadline a Confirm may take: a
// confirmation a batch has taken is answered by the batch, within the batch's bound —
// the fences busy elsewhere (LockTimeout), the transaction (batchTimeout), the
// settlement of a lost COMMIT reply (resolveTimeout), the rollback's bound and the
// Redis writes after it — and a booking then tries its sold markers for up to
// markSoldTimeout. With the defaults 33 s; with the tests' 1 s statements, 21 s.
func (e *Engine) confirmOverrun() time.Duration {
	return e.cfg.LockTimeout + e.batchTimeout() + resolveTimeout + e.cfg.StatementTimeout + stallGrace + 4*markSoldTimeout
}

// commitBatch confirms batch in one transaction and answers every confirmation in it.
func (e *Engine) commitBatch(batch []*confirmReq) {
	e.m.confirmBatchSize.Observe(float64(len(batch)))
	ctx, cancel := context.WithTimeout(context.Background(), e.batchTimeout())
	defer cancel()

	// Wait for a connection no longer than the last hold of the batch can use one.
	latest := slices.MaxFunc(batch, func(a, b *confirmReq) int { return a.deadline.Compare(b.deadline) }).deadline
	actx, acancel := context.WithDeadline(ctx, latest)
	conn, err := e.pool.Acquire(actx)
	acancel()
	if err != nil {
		late := ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
		for _, r := range batch {
			if late {
				r.answer(e.tooLate(r))
			} else {
				r.answer(unavailable("postgres", err))
			}
		}
		return
	}
	acquired := time.Now()
	// Those whose holds ran out while the batch waited leave it now.
	pending := batch[:0:0]
	for _, r := range batch {
		if acquired.After(r.deadline) {
			r.answer(e.tooLate(r))
			continue
		}
		pending = append(pending, r)
	}

	// Every step of the batch is bounded on the client side too (stallGuard): a server
	// that stops answering costs one step's bound, and the pool is then dialled again.
	gctx, guard, gcancel := guardStalls(ctx, e.cfg.StatementTimeout+stallGrace, e.stalled)
	committedOK := e.runBatch(gctx, guard, conn, pending)
	gcancel()
	conn.Release()
	e.gc.took(time.Since(acquired))
	if committedOK {
		e.markBatch(ctx, pending)
	}
	e.unreserveBatch(pending, committedOK)
	for _, r := range pending {
		if errors.Is(r.err, errFenceBusy) && e.deferFenceBusy(r) {
			continue
		}
		close(r.done)
	}
}

// memberErr is a write of one confirmation that failed in a way the reads could not
// foresee: that confirmation gets err, and the batch runs again without it.
type memberErr struct {
	r   *confirmReq
	err error
}

func (m *memberErr) Error() string { return m.err.Error() }

// runBatch runs the batch's transaction, again whole on a serialization failure or
// deadlock (retryTx), and again without a confirmation whose write failed. It sets every
// confirmation's outcome (r.err, r.res) and reports whether a COMMIT happened.
func (e *Engine) runBatch(ctx context.Context, guard *stallGuard, conn *pgxpool.Conn, batch []*confirmReq) bool {
	pending := slices.Clone(batch)
	guard.step()
	ran, err := e.backendOf(ctx, conn)
	if err != nil {
		err = unavailable("postgres", err)
		for _, r := range pending {
			r.err = err
		}
		return false
	}
	perBooking := false
	for len(pending) > 0 {
		ok, err := retryTx(ctx, func() (bool, error) { return e.batchOnce(ctx, guard, ran, conn, pending, perBooking) })
		var me *memberErr
		switch {
		case err == nil:
			return ok
		case errors.Is(err, errWhoseWrite) && !perBooking:
			perBooking = true // again, a statement per booking: the failing one names its confirmation
			e.m.batchRewrites.Inc()
		case errors.As(err, &me):
			me.r.err = me.err
			pending = slices.DeleteFunc(pending, func(r *confirmReq) bool { return r == me.r })
		default:
			if !errors.Is(err, ErrUnavailable) {
				err = unavailable("postgres", err)
			}
			for _, r := range pending {
				r.err = err
			}
			return false
		}
	}
	return false
}

// seatKey names a seat of a show in a batch.
type seatKey struct{ show, seat string }

// batchOnce is one attempt at the batch's transaction (see the top of this file). It
// sets the outcome of each confirmation of batch and reports whether it committed.
func (e *Engine) batchOnce(ctx context.Context, guard *stallGuard, ran serverIdentity, conn *pgxpool.Conn, batch []*confirmReq, perBooking bool) (bool, error) {
	for _, r := range batch {
		r.err, r.res = nil, committed{}
	}
	guard.step()
	tx, err := conn.BeginTx(ctx, e.txOptions())
	if err != nil {
		return false, unavailable("postgres", err)
	}
	pending := false // the COMMIT is left running (commitUncancelled): the connection is not ours
	defer func() {
		if !pending && !rollback(ctx, tx, guard.d) {
			guard.stall() // the pool is dialled again
		}
	}()
	q := db.New(tx)

	// 1. Lock every fence of the batch in one order, then read the claims.
	var keys []seatKey
	for _, r := range batch {
		for _, s := range r.c.seats {
			keys = append(keys, seatKey{r.c.sh.id, s})
		}
	}
	slices.SortFunc(keys, func(a, b seatKey) int {
		if c := strings.Compare(a.show, b.show); c != 0 {
			return c
		}
		return strings.Compare(a.seat, b.seat)
	})
	keys = slices.Compact(keys)
	shows, seats := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		shows[i], seats[i] = k.show, k.seat
	}
	// Deciding in Go needs the fences the lock read and the claims; savepoints let the
	// statements decide.
	guard.step()
	locked, claimed, err := e.lockFences(ctx, tx, batch, shows, seats, !e.cfg.ConfirmSavepoints)
	if err != nil {
		return false, err
	}
	var fence map[seatKey]int64
	if !e.cfg.ConfirmSavepoints {
		fence = make(map[seatKey]int64, len(locked))
		for _, f := range locked {
			fence[seatKey{f.ShowID, f.SeatID}] = f.Generation
		}
	}
	if e.hooks.beforeCommit != nil {
		e.hooks.beforeCommit(ctx)
	}

	// 2. Which holds are still current, reserved for the batch, in one pipeline.
	guard.step()
	e.reserveBatch(ctx, batch)

	// 3–4. Decide and write, or each in a savepoint.
	var accepted []*confirmReq
	if e.cfg.ConfirmSavepoints {
		accepted, err = e.writeInSavepoints(ctx, guard, tx, batch)
	} else {
		accepted, err = e.decideAndWrite(ctx, guard, q, batch, fence, claimed, perBooking)
	}
	if err != nil || len(accepted) == 0 {
		return false, err
	}
	// The booked seats of holders with a holder limit, as this transaction leaves them
	// (their rows are locked until it ends), for Redis.
	guard.step()
	if err := e.batchCounts(ctx, q, accepted); err != nil {
		return false, e.txErr(err)
	}

	// 5. COMMIT. It may wait for a synchronous standby: it is never cancelled
	// (commitUncancelled), and a COMMIT that did not return is settled, not assumed.
	guard.step()
	if e.hooks.atCommit != nil {
		e.hooks.atCommit(ctx, len(accepted))
	}
	var still <-chan struct{}
	sent := time.Now()
	if err := e.commitUncancelled(ctx, conn, tx, &still); err != nil {
		pending = still != nil
		if pgCode(err) != "" {
			return false, e.txErr(err) // the server answered: nothing committed
		}
		// A COMMIT still running keeps its holds reserved while it is settled, from now:
		// the settlement below may take longer than what is left of the reservations.
		stopKeeping := func() {}
		if still != nil {
			stop, exited := make(chan struct{}), make(chan struct{})
			owners := slices.Clone(accepted)
			go func() {
				defer close(exited)
				e.keepReserved(owners, stop)
			}()
			stopKeeping = func() { close(stop); <-exited }
		}
		// The reply is lost: settle the outcome, once for the whole batch. One that stays
		// unknown is the settler's (settle.go), which keeps the holds reserved from here.
		at, err := e.resolveCommit(ctx, ran, accepted[0].id, err)
		stopKeeping()
		if errors.Is(err, errCommitUnknown) {
			e.unsettle(accepted, ran, still, sent)
		}
		for _, r := range accepted {
			if err != nil {
				r.err = err
			} else {
				r.res.at = at
			}
		}
		return err == nil, nil
	}
	return true, nil
}

// batchCounts sets, for each accepted confirmation of a show with a holder limit, its
// holder's booked-seat count as the transaction leaves it.
func (e *Engine) batchCounts(ctx context.Context, q *db.Queries, accepted []*confirmReq) error {
	pairs := map[*show]map[string]bool{}
	for _, r := range accepted {
		if r.c.limited && r.c.h.HolderID != "" {
			if pairs[r.c.sh] == nil {
				pairs[r.c.sh] = map[string]bool{}
			}
			pairs[r.c.sh][r.c.h.HolderID] = true
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	found, err := e.findCounts(ctx, q, pairs)
	if err != nil {
		return err
	}
	for _, r := range accepted {
		tag := holderTag(r.c.h.HolderID)
		for _, c := range found[r.c.sh.id] {
			if c.tag == tag {
				r.res.counts = []holderCount{c}
			}
		}
	}
	return nil
}

// lockFences locks the fences of the (show, seat) pairs (sorted, distinct) that no
// other transaction holds (SKIP LOCKED) and returns them, and with withClaims which of
// the pairs are claimed. A confirmation touching a fence it skipped gets errFenceBusy:
// it leaves this batch and goes back to the queue (commitBatch). The batch never waits
// for a lock while it holds others, so batches cannot wait for each other in a cycle,
// and one fence held elsewhere holds up only the confirmations that touch it.
//
// The claims are read by a statement of their own after the lock, in the same round
// trip (Queries.Pipelined): its snapshot, taken after the locks, has every claim
// committed before them. A join in the lock's statement would not: its snapshot is
// taken before it locks.
func (e *Engine) lockFences(ctx context.Context, tx pgx.Tx, batch []*confirmReq, shows, seats []string, withClaims bool) ([]db.SeatFencesLockSkipRow, map[seatKey]bool, error) {
	var got []db.SeatFencesLockSkipRow
	var claims []db.SeatClaimsFindRow
	steps := []func(*db.Queries) error{func(q *db.Queries) (err error) {
		got, err = q.SeatFencesLockSkip(ctx, db.SeatFencesLockSkipParams{ShowIds: shows, SeatIds: seats})
		return err
	}}
	if withClaims {
		steps = append(steps, func(q *db.Queries) (err error) {
			claims, err = q.SeatClaimsFind(ctx, db.SeatClaimsFindParams{ShowIds: shows, SeatIds: seats})
			return err
		})
	}
	if err := db.New(tx).Pipelined(ctx, steps...); err != nil {
		return nil, nil, e.txErr(err)
	}
	have := make(map[seatKey]bool, len(got))
	for _, f := range got {
		have[seatKey{f.ShowID, f.SeatID}] = true
	}
	if len(got) < len(shows) {
		for _, r := range batch {
			if slices.ContainsFunc(r.c.seats, func(s string) bool { return !have[seatKey{r.c.sh.id, s}] }) {
				r.err = errFenceBusy
			}
		}
	}
	claimed := make(map[seatKey]bool, len(claims))
	for _, c := range claims {
		claimed[seatKey{c.ShowID, c.SeatID}] = true
	}
	return got, claimed, nil
}

// errFenceBusy: a seat's fence is locked by another transaction; the confirmation goes
// back to the queue (deferFenceBusy).
var errFenceBusy = errors.New("a seat's fence is locked by another transaction")

// deferFenceBusy puts a confirmation whose fence was busy back in the queue after a
// short pause, or, once it has been put back for longer than Config.LockTimeout (the
// fence stayed locked: a paused engine mid-batch, a slow session), answers it
// ErrUnavailable. It reports whether r was put back (and must not be answered now).
func (e *Engine) deferFenceBusy(r *confirmReq) bool {
	now := time.Now()
	if r.busySince.IsZero() {
		r.busySince = now
	}
	if now.Sub(r.busySince) > e.cfg.LockTimeout {
		r.err = unavailable("postgres", fmt.Errorf("%w for %v (Config.LockTimeout)", errFenceBusy, now.Sub(r.busySince).Round(time.Millisecond)))
		return false
	}
	r.busyRounds++
	r.err = nil
	r.state.Store(reqQueued)
	time.AfterFunc(time.Duration(min(r.busyRounds, 10))*time.Duration(1+rand.IntN(5))*time.Millisecond, func() {
		select {
		case e.gc.queue <- r:
			if e.wakeCommitter() {
				return
			}
		default:
		}
		// Closed, or the queue is full: answer it here unless a committer took it.
		if r.state.CompareAndSwap(reqQueued, reqTaken) {
			r.answer(unavailable("postgres", errFenceBusy))
		}
	})
	return true
}

// decideAndWrite is steps 3 and 4 of the batch: it decides each confirmation in queue
// order from the batch's locked fences and claims, and writes the accepted ones, which
// it returns: each table in one statement (BookingCreateMany), or, with perBooking, a
// statement per booking (pipelined), which tells whose write a violation was.
func (e *Engine) decideAndWrite(ctx context.Context, guard *stallGuard, q *db.Queries, batch []*confirmReq, fence map[seatKey]int64, claimed map[seatKey]bool, perBooking bool) ([]*confirmReq, error) {

	// 3. Decide, in queue order.
	type idemKey struct{ show, holder, key string }
	usedKeys := map[idemKey]bool{}
	var accepted []*confirmReq
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		sh := r.c.sh.id
		stale, taken := false, false
		for _, s := range r.c.seats {
			stale = stale || fence[seatKey{sh, s}] >= r.gen
			taken = taken || claimed[seatKey{sh, s}]
		}
		switch {
		case stale:
			r.err = errStale
			continue
		case taken:
			r.err = errSeatClaimed
			continue
		}
		if r.c.key != "" {
			k := idemKey{sh, r.c.h.HolderID, r.c.key}
			if usedKeys[k] {
				r.err = errKeyConflict
				continue
			}
			usedKeys[k] = true
		}
		for _, s := range r.c.seats {
			fence[seatKey{sh, s}], claimed[seatKey{sh, s}] = r.gen, true
		}
		accepted = append(accepted, r)
	}
	if len(accepted) == 0 {
		return nil, nil
	}

	// 4. Write what was decided: the fences in one statement, the bookings pipelined.
	var fShows, fSeats []string
	var fGens []int64
	params := make([]db.BookingCreateParams, len(accepted))
	for i, r := range accepted {
		for _, s := range r.c.seats {
			fShows, fSeats, fGens = append(fShows, r.c.sh.id), append(fSeats, s), append(fGens, r.gen)
		}
		params[i] = r.booking()
	}
	guard.step()
	var n int64
	advance := func(q *db.Queries) (err error) {
		n, err = q.SeatFencesAdvanceMany(ctx, db.SeatFencesAdvanceManyParams{ShowIds: fShows, SeatIds: fSeats, Generations: fGens})
		return err
	}
	advanced := func() error {
		if n != int64(len(fSeats)) {
			// Cannot happen under the locks; if it does, nothing of the batch commits.
			return fmt.Errorf("%w: %d of %d fences advanced under their locks", ErrUnavailable, n, len(fSeats))
		}
		return nil
	}
	if !perBooking {
		// The fences and the bookings in one round trip; a refused fence rolls both back.
		var rows []db.BookingCreateManyRow
		m := createManyParams(params)
		err := q.Pipelined(ctx, advance, func(q *db.Queries) (err error) {
			rows, err = q.BookingCreateMany(ctx, m)
			return err
		})
		switch {
		case err != nil && claimErr(err) != nil:
			return nil, fmt.Errorf("%w: %w", errWhoseWrite, err)
		case err != nil:
			return nil, e.txErr(err)
		}
		if err := advanced(); err != nil {
			return nil, err
		}
		return accepted, created(accepted, rows)
	}
	if err := advance(q); err != nil {
		return nil, e.txErr(err)
	}
	if err := advanced(); err != nil {
		return nil, err
	}
	guard.step()
	var failed *memberErr
	var firstErr error
	q.BookingCreate(ctx, params).QueryRow(func(i int, row db.BookingCreateRow, err error) {
		switch {
		case err == nil:
			accepted[i].res = committed{at: row.ConfirmedAt, seq: row.MarkerSeq}
		case firstErr == nil:
			firstErr = err
			if cerr := claimErr(err); cerr != nil {
				failed = &memberErr{r: accepted[i], err: cerr}
			}
		}
	})
	if failed != nil {
		return nil, failed
	}
	if firstErr != nil {
		return nil, e.txErr(firstErr)
	}
	return accepted, nil
}

// markGroupSeats bounds the seats of one mark.lua call of a batch: a script runs alone in
// Redis, so one call's time is bounded too.
const markGroupSeats = 256

// markGroup is one mark.lua call of a batch: seats of one show, each with the sold
// marker of its confirmation's generation, and the confirmations whose seats they are.
type markGroup struct {
	sh           *show
	seats, marks []string
	owners       []*confirmReq
}

func (g *markGroup) add(r *confirmReq) {
	for _, s := range r.c.seats {
		g.seats, g.marks = append(g.seats, s), append(g.marks, marker(r.gen, true))
	}
	g.owners = append(g.owners, r)
}

// errWhoseWrite: a write of the batch's one statement failed in a way that belongs to
// one confirmation (claimErr); the batch runs again with a statement per booking, which
// tells whose it was.
var errWhoseWrite = errors.New("a booking of the batch was refused by the database")

// createManyParams are the bookings of params as BookingCreateMany takes them: one
// statement per table.
func createManyParams(params []db.BookingCreateParams) db.BookingCreateManyParams {
	var m db.BookingCreateManyParams
	for i, p := range params {
		m.ShowIds = append(m.ShowIds, p.ShowID)
		m.BookingIds = append(m.BookingIds, p.BookingID)
		m.Generations = append(m.Generations, p.Generation)
		m.HolderIds = append(m.HolderIds, p.HolderID)
		m.IdempotencyKeys = append(m.IdempotencyKeys, p.IdempotencyKey.String) // '' for none
		m.Fingerprints = append(m.Fingerprints, p.Fingerprint)
		m.HoldHashes = append(m.HoldHashes, p.HoldHash)
		for _, s := range p.SeatIds {
			m.SeatBookings = append(m.SeatBookings, int64(i+1))
			m.SeatIds = append(m.SeatIds, s)
		}
	}
	return m
}

// created sets each accepted confirmation's outcome from the rows BookingCreateMany
// returned for it.
func created(accepted []*confirmReq, rows []db.BookingCreateManyRow) error {
	if len(rows) != len(accepted) {
		return fmt.Errorf("%w: %d of %d bookings written", ErrUnavailable, len(rows), len(accepted))
	}
	for i, row := range rows {
		if row.BookingID != accepted[i].id {
			return fmt.Errorf("%w: booking %d came back as %s, not %s", ErrUnavailable, i, row.BookingID, accepted[i].id)
		}
		accepted[i].res = committed{at: row.ConfirmedAt, seq: row.MarkerSeq}
	}
	return nil
}

// writeInSavepoints is steps 3 and 4 of the batch with savepoints
// (Config.ConfirmSavepoints): each confirmation, in queue order, runs the statements of
// a lone confirmation — the fence, then the booking — in a savepoint of its own, and a
// refusal rolls back to it. The batch's ordered lock came first: without it, batches
// deadlock on each other's claims. It returns the confirmations that wrote.
func (e *Engine) writeInSavepoints(ctx context.Context, guard *stallGuard, tx pgx.Tx, batch []*confirmReq) ([]*confirmReq, error) {
	var accepted []*confirmReq
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		guard.step()
		ok, err := e.inSavepoint(ctx, tx, r)
		if err != nil {
			return nil, err
		}
		if ok {
			accepted = append(accepted, r)
		}
	}
	return accepted, nil
}

// inSavepoint writes r's confirmation in a savepoint of tx, or rolls back to it and
// sets r's refusal. An error is the batch's.
func (e *Engine) inSavepoint(ctx context.Context, tx pgx.Tx, r *confirmReq) (bool, error) {
	sp, err := tx.Begin(ctx) // SAVEPOINT
	if err != nil {
		return false, e.txErr(err)
	}
	refuse := func(refusal error) (bool, error) {
		if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT
			return false, e.txErr(err)
		}
		r.err = refusal
		return false, nil
	}
	q := db.New(sp)
	adv, err := q.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: r.c.sh.id, SeatIds: r.c.seats, Generation: r.gen})
	if err != nil {
		return false, e.txErr(err)
	}
	if len(adv) != len(r.c.seats) {
		return refuse(errStale)
	}
	var res committed
	var cerr error
	q.BookingCreate(ctx, []db.BookingCreateParams{r.booking()}).QueryRow(func(_ int, row db.BookingCreateRow, err error) {
		res, cerr = committed{at: row.ConfirmedAt, seq: row.MarkerSeq}, err
	})
	if cerr != nil {
		if refusal := claimErr(cerr); refusal != nil {
			return refuse(refusal)
		}
		return false, e.txErr(cerr)
	}
	if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
		return false, e.txErr(err)
	}
	r.res = res
	return true, nil
}

// booking is the row r's confirmation writes.
func (r *confirmReq) booking() db.BookingCreateParams {
	p := db.BookingCreateParams{ShowID: r.c.sh.id, BookingID: r.id, Generation: r.gen, HolderID: r.c.h.HolderID,
		Fingerprint: r.c.fp, HoldHash: r.c.hold, SeatIds: r.c.seats}
	if r.c.key != "" {
		p.IdempotencyKey.String, p.IdempotencyKey.Valid = r.c.key, true
	}
	return p
}

// reserveBatch asks Redis, in one pipeline, whether each confirmation's hold is still
// current, and reserves the current ones for the batch (reserve.lua): until the batch
// has decided, they cannot be released, extended, reserved by another batch or expire.
// One that is not current gets errLostBeforeCommit, one another batch has reserved
// errCommitting, one Redis could not answer its error.
func (e *Engine) reserveBatch(ctx context.Context, batch []*confirmReq) {
	batch = slices.DeleteFunc(slices.Clone(batch), func(r *confirmReq) bool { return r.err != nil })
	if len(batch) == 0 {
		return
	}
	// A Redis that does not answer (frozen, down) is waited for no longer than the
	// step's bound (stallGuard), nor than the last of the callers would when each has a
	// deadline; a check Redis runs after that reserves nothing (reserve.lua).
	by := time.Now().Add(e.cfg.StatementTimeout + stallGrace)
	if d, ok := ctx.Deadline(); ok && d.Before(by) {
		by = d
	}
	if !slices.ContainsFunc(batch, func(r *confirmReq) bool { return r.leaves.IsZero() }) {
		if latest := slices.MaxFunc(batch, func(a, b *confirmReq) int { return a.leaves.Compare(b.leaves) }).leaves; latest.Before(by) {
			by = latest
		}
	}
	ctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	spans := e.steps(batch, "holdfast.confirm.verify")
	for _, r := range batch {
		r.nonce = newNonce()
	}
	for i, cmd := range e.runScripts(ctx, e.reserveCalls(batch, by)) {
		r := batch[i]
		cur, _, err := e.verifyReply(cmd)
		switch {
		case err != nil:
			// Unless Redis answered (an error reply: the script did not run), it may have
			// run the check and reserved the hold: given back once Redis answers
			// (unreserveBatch), it lapses by itself otherwise.
			var answered redis.Error
			r.err, r.unanswered = err, !errors.As(err, &answered)
		case cur == holdLate:
			r.err = unavailable("redis", errors.New("Redis ran the hold's check after its batch stopped waiting for it"))
		case cur == holdCommitting:
			r.err = errCommitting
		case cur <= 0:
			r.err = errLostBeforeCommit
		case cur != r.gen:
			// Reserved, but under another generation than the batch's (re-issued by
			// regen.lua): given back (unreserveBatch), and refused.
			r.reserved, r.err = true, errLostBeforeCommit
		default:
			r.reserved = true
		}
		endStep(spans[i], r.err)
	}
	if e.hooks.afterReserve != nil {
		e.hooks.afterReserve(ctx)
	}
}

// reserveCalls are the reserve.lua calls of batch's holds, each under its confirmation's
// nonce: a first reservation, or, for a hold reserved by the same confirmation already,
// one that renews it. by is when the caller stops waiting for the replies: a call Redis
// runs later reserves nothing.
func (e *Engine) reserveCalls(batch []*confirmReq, by time.Time) []scriptCall {
	life := e.reserveLife().Milliseconds()
	calls := make([]scriptCall, len(batch))
	for i, r := range batch {
		calls[i] = scriptCall{lua.Reserve, r.c.ks, scriptArgs(r.c.tag, []any{r.c.h.Token, r.gen, commitID(r.id), r.nonce, life, by.UnixMilli()}, r.c.seats)}
	}
	return calls
}

// keepReserved keeps the holds of batch — whose COMMIT is still pending on the server
// (commitUncancelled left it there, waiting for a synchronous standby, say) — reserved
// while the batch settles its outcome, until stop: were the reservations to end first,
// a retry would find the hold gone and no booking yet, and be refused for good while
// its booking may still commit. An outcome the batch cannot settle is the settler's,
// which keeps them reserved from then on.
func (e *Engine) keepReserved(batch []*confirmReq, stop <-chan struct{}) {
	t := time.NewTicker(e.reserveLife() / 3)
	defer t.Stop()
	lengthen := func() {
		by := time.Now().Add(markSoldTimeout)
		ctx, cancel := context.WithDeadline(context.Background(), by)
		e.runScripts(ctx, e.reserveCalls(batch, by))
		cancel()
	}
	lengthen()
	for {
		select {
		case <-stop:
			return
		case <-e.viewCtx.Done():
			return
		case <-t.C:
			lengthen()
		}
	}
}

// reserveLife is how long a reservation lasts (reserve.lua), from the batch's check or
// its last renewal, and how long a reserved hold lives at least: the batch's bound, then
// the batch's marker write, then — should the process die after COMMIT — the marker
// repair of another engine (markerRepairAge and two of its rounds). The sold markers
// replace the hold's keys before they can expire, so no hold is granted on a seat whose
// booking committed; and past it the reservation lapses by itself, so none outlives its
// batch by more, whatever the hold's TTL and whatever reply was lost.
func (e *Engine) reserveLife() time.Duration {
	return e.batchTimeout() + markSoldTimeout + markerRepairAge + 2*e.cfg.MarkerRepairInterval
}

// commitID is a confirmation's id in its hold's reservation: its booking id's 32 hex digits.
func commitID(id uuid.UUID) string { return hex.EncodeToString(id[:]) }

// unreserveBatch gives back, as they were, the holds the batch reserved and did not
// commit (refused, rolled back), in one pipeline, so that their owners may release,
// extend or confirm them again. Those whose reservation's reply was lost are given back
// in the background (giveBackLater: Redis was not answering), as are those whose give-back
// got no answer. Holds whose COMMIT's outcome is unknown stay reserved: their bookings
// may exist; their reservations lapse after reserveLife, and the marker repair writes
// the sold markers of a booking that does.
func (e *Engine) unreserveBatch(batch []*confirmReq, committedOK bool) {
	var now, later []giveBack
	for _, r := range batch {
		switch {
		case !r.reserved && !r.unanswered, errors.Is(r.err, errCommitUnknown), committedOK && r.err == nil:
		case r.unanswered:
			later = append(later, giveBack{r, r.nonce})
		default:
			now = append(now, giveBack{r, r.nonce})
		}
	}
	failed := e.unreserve(now)
	if len(failed) > 0 {
		e.log.Warn("give back holds their batch did not commit: Redis did not answer; trying again in the background", "holds", len(failed))
	}
	e.giveBackLater(append(later, failed...))
}

// unreserve gives back the reservations owners name, in one pipeline, and returns those
// Redis did not answer for. Each frees only a reservation its check (or an earlier one
// of its confirmation) made: the settler may have reserved the hold again since under
// the same commit id, with a later nonce (nonce.go).
func (e *Engine) unreserve(owners []giveBack) []giveBack {
	if len(owners) == 0 {
		return nil
	}
	calls := make([]scriptCall, len(owners))
	for i, o := range owners {
		r := o.r
		calls[i] = scriptCall{lua.Unreserve, r.c.ks, scriptArgs(r.c.tag, []any{commitID(r.id), o.nonce}, r.c.seats)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), markSoldTimeout)
	defer cancel()
	var failed []giveBack
	for i, cmd := range e.runScripts(ctx, calls) {
		res, err := cmd.Slice()
		if err == nil && len(res) == 2 {
			e.wrote(owners[i].r.c.sh, res[1])
			continue
		}
		failed = append(failed, owners[i])
	}
	return failed
}

// giveBackLater gives back, in the background, the holds of owners that Redis did not
// answer for: again every Config.MarkerRepairInterval until it does, until their
// reservations have lapsed by themselves (reserveLife), or until the engine closes.
// Meanwhile Release and Extend of them wait (ErrUnavailable when their context ends
// first).
func (e *Engine) giveBackLater(owners []giveBack) {
	if len(owners) == 0 {
		return
	}
	lapsed := time.Now().Add(e.reserveLife())
	go func() {
		for len(owners) > 0 {
			t := time.NewTimer(e.cfg.MarkerRepairInterval)
			select {
			case <-e.viewCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if time.Now().After(lapsed) {
				e.log.Warn("holds their batch did not commit were not given back; their reservations lapsed", "holds", len(owners))
				return
			}
			owners = e.unreserve(owners)
		}
	}()
}

// steps starts a span named name in the trace of each confirmation of batch (a batch
// serves several traces).
func (e *Engine) steps(batch []*confirmReq, name string) []trace.Span {
	spans := make([]trace.Span, len(batch))
	for i, r := range batch {
		_, spans[i] = e.step(r.ctx, name)
	}
	return spans
}

// markBatch writes the sold markers of the batch's bookings to Redis in one pipeline.
// A confirmation whose markers did not make it writes them itself (afterCommit, with
// its retries), as does every one while a test hook stands in for the write.
func (e *Engine) markBatch(ctx context.Context, batch []*confirmReq) {
	if e.hooks.afterCommit != nil {
		return
	}
	var calls []scriptCall
	var owners []*confirmReq
	// The holder counts go first: a seat leaves its holder's holds (mark.lua) only once
	// it is counted as booked.
	counts := map[*show][]holderCount{}
	for _, r := range batch {
		if r.err == nil && len(r.res.counts) > 0 {
			counts[r.c.sh] = append(counts[r.c.sh], r.res.counts...)
		}
	}
	var countShows []*show
	for sh, cs := range counts {
		calls, countShows = append(calls, countsCall(sh, cs)), append(countShows, sh)
	}
	// The sold markers: one mark.lua call for the batch's confirmations of a show (each
	// seat with its own booking's generation), up to markGroupSeats seats a call, so a
	// batch of one show pays one script call and one feed entry, not one per booking.
	var groups []markGroup
	open := map[*show]int{} // the show's group still taking seats
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		g, ok := open[r.c.sh]
		if !ok || len(groups[g].seats)+len(r.c.seats) > markGroupSeats {
			g = len(groups)
			groups = append(groups, markGroup{sh: r.c.sh})
			open[r.c.sh] = g
		}
		groups[g].add(r)
	}
	var called []markGroup
	for _, g := range groups {
		ks, err := g.sh.scriptKeys("", g.seats)
		if err != nil {
			continue // its confirmations write their markers themselves (confirm)
		}
		calls = append(calls, scriptCall{lua.Mark, ks, markArgs("-", g.seats, g.marks)})
		owners, called = append(owners, g.owners...), append(called, g)
	}
	if len(calls) == 0 {
		return
	}
	spans := e.steps(owners, "holdfast.markers")
	mctx, cancel := context.WithTimeout(ctx, markSoldTimeout)
	defer cancel()
	cmds := e.runScripts(mctx, calls)
	uncounted := map[*show]bool{} // its counts did not make it: its confirmations write them again
	for i, sh := range countShows {
		if cmds[i].Err() != nil {
			uncounted[sh] = true
		}
	}
	k := 0 // owners[k], spans[k]: the confirmation, in the order the groups were called
	for i, cmd := range cmds[len(countShows):] {
		_, _, markErr := e.markReply(called[i].sh, cmd)
		for _, r := range called[i].owners {
			err := markErr
			if err == nil && uncounted[r.c.sh] && len(r.res.counts) > 0 {
				err = fmt.Errorf("%w: holder counts not written", ErrUnavailable)
			}
			endStep(spans[k], err)
			k++
			if err == nil {
				e.outbox.applied(r.c.sh.id, r.res.seq)
				r.marked = true
			}
		}
	}
}

// scriptCall is one script call of a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runScripts sends calls in one pipeline (on a Cluster, go-redis splits it by node) and
// returns their replies in order. A call Redis refused with NOSCRIPT — its script cache
// was flushed — is run again on its own, which loads the script.
func (e *Engine) runScripts(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := e.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range calls {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmds[i] = c.script.Run(ctx, e.rdb, c.keys, c.args...)
		}
	}
	return cmds
}
