package engine

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Group commit. Confirmations do not each run a transaction: they join a queue, and a
// few committers (Config.ConfirmConns) each take what waits there — up to
// Config.ConfirmBatch confirmations, waiting for more only while another batch is in
// flight (batchWait) or as Config.ConfirmBatchWait says — and confirm it in one
// PostgreSQL transaction on one connection. Alone, a confirmation is a batch of one
// and waits for nothing; under load, confirmations arriving while the committers are
// busy make the next batches, so the batch size follows the load and one COMMIT (and
// its fsync) serves many.
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
//
// This file holds a confirmation of the group commit (confirmReq) and a batch's course
// (commitBatch); each step has a file of its own:
//   - groupcommit_queue.go: the queue and admission (commit, gather, the committers,
//     deferFenceBusy);
//   - groupcommit_tx.go: the batch's transaction, steps 1 and 3–5 (runBatch, batchOnce);
//   - groupcommit_reserve.go: the Redis reservation, step 2 (reserveBatch, keepReserved);
//   - settle.go, with resolveCommit in failover.go: settlement after a lost COMMIT;
//   - groupcommit_markers.go: the sold markers of what committed (markBatch);
//   - groupcommit_giveback.go: the give-back of what did not (unreserveBatch).

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
	marked   bool   // its sold markers are in Redis
	reserved bool   // its hold is reserved for its batch in Redis (reserve.lua)
	offer    string // its hold's offer, as reserve.lua read it: its booking's
	// its reservation's reply was lost: its hold may be reserved for its batch, by a
	// check Redis runs until checkBy (reserve.lua refuses a later one), which may be
	// after the batch stopped waiting for it
	unanswered bool
	nonce      string    // its last check's (nonce.go): a give-back names it
	checkBy    time.Time // its last check's late-check bound (reserveBatch)

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
		e.giveRests(ctx, pending)
	}
	e.unreserveBatch(pending, committedOK)
	for _, r := range pending {
		if errors.Is(r.err, errFenceBusy) && e.deferFenceBusy(r) {
			continue
		}
		close(r.done)
	}
}
