package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// The group commit's queue and admission (see groupcommit.go). A confirmation joins the
// queue (commit), or is refused at once when it is full (shed), and waits there for a
// committer to take it into a batch (gather); one its hold cannot wait for is refused
// (tooLate). Committers start when confirmations queue and end when the queue is empty.
// A confirmation whose seat's fence another transaction holds goes back to the queue
// (deferFenceBusy).

// committer is the queue and the goroutines that confirm what waits in it: up to
// Config.ConfirmConns, started when confirmations queue and ended when the queue is
// empty, so an idle engine runs none.
type committer struct {
	queue  chan *confirmReq
	onConn atomic.Int64 // moving average of a batch's time on its connection, ns

	// Batches in flight (from gather's end to their answers), and a signal at each
	// one's end: a batch gathered while another is in flight waits for it (siblingWait).
	inFlight atomic.Int32
	ended    chan struct{}

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
				landed := g.flying()
				e.commitBatch(batch)
				landed()
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
	r := e.newConfirmReq(ctx, c, gen, id, expires)
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

// newConfirmReq is a confirmation of the hold (current in Redis, expiring at expires)
// for a batch, queued now.
func (e *Engine) newConfirmReq(ctx context.Context, c *confirmation, gen int64, id uuid.UUID, expires time.Time) *confirmReq {
	now := time.Now()
	r := &confirmReq{ctx: context.WithoutCancel(ctx), c: c, gen: gen, id: id, queued: now, expires: expires, done: make(chan struct{})}
	r.leaves, _ = ctx.Deadline()
	// A batch that takes it later than its expiry less a batch's time could only roll
	// it back at the Redis check; one whose hold has less than that left may still try.
	r.deadline = expires.Add(-e.gc.needs())
	if !r.deadline.After(now) {
		r.deadline = expires
	}
	return r
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
// waiting up to Config.ConfirmBatchWait for more — or, without it, while another batch
// is in flight (siblingWait). Confirmations their callers left, or taken too late for
// their holds, are answered here and left out.
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
	d, ended := e.batchWait()
	if d > 0 {
		t := time.NewTimer(d)
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
		case <-ended:
			return batch
		}
	}
	return batch
}

// batchWait is how long gather may wait for more confirmations, and what ends the wait
// sooner (nil: nothing): Config.ConfirmBatchWait when set; else, while another batch is
// in flight, until it ends or for at most siblingWait — PostgreSQL's commit_delay and
// commit_siblings idea: a busy database gets fewer, larger batches, and a lone
// confirmation on an idle one waits for nothing. The batch in flight would hold this
// one's commit up anyway: a confirmation that joins the wait commits with it instead of
// in a batch of its own after it.
func (e *Engine) batchWait() (time.Duration, <-chan struct{}) {
	if e.cfg.ConfirmBatchWait > 0 {
		return e.cfg.ConfirmBatchWait, nil
	}
	if e.gc.inFlight.Load() == 0 {
		return 0, nil
	}
	select {
	case <-e.gc.ended: // an end signalled before this wait began
	default:
	}
	if e.gc.inFlight.Load() == 0 {
		return 0, nil
	}
	if e.cfg.siblingWait > 0 {
		return e.cfg.siblingWait, e.gc.ended
	}
	return min(siblingWait, e.gc.needs()), e.gc.ended
}

// siblingWait bounds how long a batch waits for one in flight (batchWait): about one
// batch's time on its connection, so that a confirmation pays at most one batch more.
const siblingWait = 5 * time.Millisecond

// flying counts a batch in flight until the returned func is called.
func (g *committer) flying() (landed func()) {
	g.inFlight.Add(1)
	return func() {
		g.inFlight.Add(-1)
		select {
		case g.ended <- struct{}{}:
		default:
		}
	}
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
