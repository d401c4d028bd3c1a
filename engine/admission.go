package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Admission control for confirmations. A confirmation needs a PostgreSQL connection;
// under a sale's load it waits for one in the pool's queue. It is refused before it
// costs the database anything when it could not finish while its hold lives
// (ErrHoldLost: waiting past that would only end in a rollback at the check before
// COMMIT), and when too many confirmations wait already (Config.MaxConfirmQueue,
// ErrOverloaded): the engine sheds load instead of letting every waiter time out.

// admission keeps the queue's length and how long a confirmation holds a connection.
type admission struct {
	waiting atomic.Int64
	hold    atomic.Int64 // moving average of a confirmation's time on its connection, ns
}

// took records how long a confirmation held its connection.
func (a *admission) took(d time.Duration) {
	for {
		old := a.hold.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if a.hold.CompareAndSwap(old, next) {
			return
		}
	}
}

// needs is how long a confirmation is expected to hold its connection (at least 2 ms).
func (a *admission) needs() time.Duration {
	return max(2*time.Millisecond, time.Duration(a.hold.Load()))
}

// admit waits for a connection for a confirmation whose hold has ttl left. It refuses
// with ErrOverloaded when the queue is full (the hold may still be confirmed later), and
// with ErrHoldLost when the connection would come too late for the hold to be
// confirmed. A refusal changes nothing.
func (e *Engine) admit(ctx context.Context, ttl time.Duration) (*pgxpool.Conn, error) {
	if n := e.admission.waiting.Add(1); n > int64(e.cfg.MaxConfirmQueue) {
		e.admission.waiting.Add(-1)
		e.m.admissionRefusals.WithLabelValues("queue_full").Inc()
		return nil, fmt.Errorf("%w: %d confirmations wait for the database already (Config.MaxConfirmQueue)", ErrOverloaded, n-1)
	}
	defer e.admission.waiting.Add(-1)
	start := time.Now()
	expires := start.Add(ttl)
	// Wait until the hold's expiry less the time a confirmation takes; a hold that has
	// less than that left may still try (the check before COMMIT decides), but waits no
	// longer than its expiry.
	until := expires.Add(-e.admission.needs())
	if !until.After(start) {
		until = expires
	}
	actx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	conn, err := e.pool.Acquire(actx)
	e.m.confirmQueueWait.Observe(time.Since(start).Seconds())
	if err == nil {
		return conn, nil
	}
	if ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		// The hold is lost to the queue: it would expire before a confirmation could
		// finish. Said now, before the database does any of the work.
		e.m.admissionRefusals.WithLabelValues("too_late").Inc()
		return nil, fmt.Errorf("%w: its confirmation waited %v for the database and the hold expires in %v, before a confirmation (about %v) could finish",
			ErrHoldLost, time.Since(start).Round(time.Millisecond), max(0, time.Until(expires)).Round(time.Millisecond), e.admission.needs().Round(time.Millisecond))
	}
	return nil, unavailable("postgres", err)
}
