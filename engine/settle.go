package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Settlement after a lost COMMIT (see failover.go). A batch whose COMMIT's reply never
// came and whose outcome it could not settle (errCommitUnknown: the server that ran it
// does not answer, waits for a synchronous standby, or is no longer the one the pool
// reaches) answers its callers ErrUnavailable and hands its confirmations to the
// engine's settler. The settler keeps their holds reserved (reserve.lua with their own
// commit id lengthens a reservation) and settles them as soon as it can on the server
// the pool reaches — at once when the engine finds PostgreSQL to be another server,
// else every settleEvery — where settleOn says what that server has:
//
//   - the booking: it is booked (the durability barrier passed there); its sold markers
//     are written, and a retry of it is answered with it;
//   - not the booking, and the server that ran the COMMIT can no longer put it in this
//     history (its backend ended, it restarted, or a standby of it was promoted to a
//     later timeline): the confirmation is committed again there, in a batch like any
//     other, with the same booking id, hold and generation — booked, or refused for good
//     with its hold given back.
//
// Anything else (another cluster, an older timeline, a server that does not answer, a
// COMMIT still waiting for a synchronous standby) leaves the outcome unknown: the hold
// stays reserved and the retries ErrUnavailable. A batch whose COMMIT is no longer
// running and that stays unknown for longer than Config.MaxHoldTTL is given up: its
// reservations run out, as a hold's would.

// settleLostCommit settles, once for the whole batch (resolveCommit), a COMMIT of
// accepted whose reply was lost (commitErr, sent at sent, on the server ran): it sets
// each confirmation's outcome and reports whether the batch committed. still, when not
// nil, ends when the COMMIT left running on the server (commitUncancelled) does.
func (e *Engine) settleLostCommit(ctx context.Context, ran serverIdentity, accepted []*confirmReq, commitErr error, still <-chan struct{}, sent time.Time) bool {
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
	// One that stays unknown is the settler's, which keeps the holds reserved from here.
	at, err := e.resolveCommit(ctx, ran, witnessOf(accepted[0]), commitErr)
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
	return err == nil
}

// settleEvery is how often the settler tries what it holds.
const settleEvery = 100 * time.Millisecond

// settler holds the batches whose COMMIT's outcome is unknown.
type settler struct {
	mu      sync.Mutex
	batches []*unsettled
	running bool          // its loop runs
	wake    chan struct{} // the engine found another server: try now
	wg      sync.WaitGroup
}

// unsettled is a batch whose COMMIT's outcome is unknown: all of its confirmations
// committed, or none did.
type unsettled struct {
	members []*confirmReq
	ran     serverIdentity // the server its COMMIT ran on
	// commit is closed when its COMMIT, left running (commitUncancelled), returns; nil
	// when it had returned when the batch answered.
	commit <-chan struct{}
	since  time.Time // when its COMMIT was sent
	// lengthened is when its holds' reservations were last lengthened; busy is set
	// while a settlement of it runs (under settler.mu): only that one touches it.
	lengthened time.Time
	busy       bool
}

// running reports whether its COMMIT still runs on the server.
func (u *unsettled) running() bool {
	if u.commit == nil {
		return false
	}
	select {
	case <-u.commit:
		return false
	default:
		return true
	}
}

// unsettle hands the settler the confirmations of a batch whose COMMIT ran on ran, was
// sent at since and has an unknown outcome; commit is closed when that COMMIT returns
// (nil: it has).
func (e *Engine) unsettle(members []*confirmReq, ran serverIdentity, commit <-chan struct{}, since time.Time) {
	s := &e.settling
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, &unsettled{members: slices.Clone(members), ran: ran, commit: commit, since: since})
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	if !s.running && e.viewCtx.Err() == nil {
		s.running = true
		s.wg.Add(1)
		go e.settleLoop()
	}
	s.poke()
}

// settleSoon has the settler try now (the engine found another server).
func (e *Engine) settleSoon() {
	s := &e.settling
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poke()
}

// poke wakes the loop, if there is one (under mu).
func (s *settler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// settleLoop starts a settlement of every unsettled batch none runs for, every
// settleEvery and when woken, until none is left or the engine closes.
func (e *Engine) settleLoop() {
	s := &e.settling
	defer s.wg.Done()
	t := time.NewTicker(settleEvery)
	defer t.Stop()
	for {
		todo, more := e.dueSettlements()
		if len(todo) > 0 {
			s.wg.Go(func() { e.settleBatches(todo) })
		}
		if !more {
			return
		}
		select {
		case <-e.viewCtx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// dueSettlements marks busy and returns the unsettled batches no settlement runs for,
// dropping those given up; more is false when none is left (the loop then ends).
func (e *Engine) dueSettlements() (todo []*unsettled, more bool) {
	s := &e.settling
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := s.batches[:0]
	for _, u := range s.batches {
		if !u.busy && !u.running() && time.Since(u.since) > e.cfg.MaxHoldTTL {
			e.m.settled.WithLabelValues("given_up").Add(float64(len(u.members)))
			e.log.Warn("commit reply lost; its outcome is still unknown after Config.MaxHoldTTL: its holds' reservations are left to run out",
				"booking_id", u.members[0].id, "confirmations", len(u.members))
			continue
		}
		keep = append(keep, u)
		if !u.busy {
			u.busy = true
			todo = append(todo, u)
		}
	}
	clear(s.batches[len(keep):])
	s.batches = keep
	if len(keep) == 0 {
		s.running = false
	}
	return todo, len(keep) > 0
}

// finished ends a settlement of u: u leaves the settler when settled, else waits for
// the next round.
func (s *settler) finished(u *unsettled, settled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u.busy = false
	if settled {
		s.batches = slices.DeleteFunc(s.batches, func(b *unsettled) bool { return b == u })
	}
}

// settleBatches is one try at settling the batches todo on the server the pool reaches
// (see the top of this file): their reservations lengthened first where due, each
// batch's outcome read there on one connection (a failover leaves every batch to
// settle at once: one connection, not one each, from a pool the retries also use),
// then the bookings found marked sold and those absent committed again, all at once.
func (e *Engine) settleBatches(todo []*unsettled) {
	for _, u := range todo {
		e.lengthen(u)
	}
	ctx, cancel := context.WithTimeout(e.viewCtx, resolveTimeout)
	defer cancel()
	outs := e.outcomes(ctx, todo)
	// Each batch leaves the pass as soon as its own part is done: one still unknown is
	// tried again on the next round, not after the others' re-commits. Those absent are
	// committed again together, in as few transactions as recommitBatch allows: after
	// a failover every batch is absent at once, on a server whose pool is dialled anew.
	var wg sync.WaitGroup
	var absent []*unsettled
	for i, u := range todo {
		switch outs[i] {
		case outcomeBooked:
			wg.Go(func() { e.bookedAfterAll(ctx, u); e.settling.finished(u, true) })
		case outcomeAbsent:
			absent = append(absent, u)
		default:
			e.settling.finished(u, false)
		}
	}
	for len(absent) > 0 {
		n, size := 0, 0
		for n < len(absent) && (n == 0 || size+len(absent[n].members) <= recommitBatch) {
			size += len(absent[n].members)
			n++
		}
		group := absent[:n]
		absent = absent[n:]
		wg.Go(func() {
			e.commitAgain(group)
			for _, u := range group {
				e.settling.finished(u, true)
			}
		})
	}
	wg.Wait()
}

// recommitBatch bounds the confirmations the settler commits again in one transaction.
const recommitBatch = 64

// outcomes reads what the server the pool reaches has of each batch, on one
// connection (every one unknown when none could be acquired).
func (e *Engine) outcomes(ctx context.Context, todo []*unsettled) []outcome {
	outs := make([]outcome, len(todo))
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return outs
	}
	defer conn.Release()
	for i, u := range todo {
		_, outs[i], _, _ = e.settleOn(ctx, conn, u.ran, witnessOf(u.members[0]), false)
	}
	return outs
}

// lengthen lengthens u's holds' reservations when a third of their life has passed
// since it last did: the settler's own checks, each under a nonce later than any check
// of u's so far (a give-back still owed for one of those, its reply lost, leaves the
// reservation alone).
func (e *Engine) lengthen(u *unsettled) {
	if time.Since(u.lengthened) < e.reserveLife()/3 {
		return
	}
	for _, r := range u.members {
		r.nonce = newNonce()
	}
	by := time.Now().Add(markSoldTimeout)
	lctx, cancel := context.WithDeadline(e.viewCtx, by)
	e.runScripts(lctx, e.reserveCalls(u.members, by))
	cancel()
	u.lengthened = time.Now()
}

// bookedAfterAll writes the sold markers of u's bookings, which the server has: they
// replace the reserved holds (a marker the repair loop writes again is harmless).
func (e *Engine) bookedAfterAll(ctx context.Context, u *unsettled) {
	for _, r := range u.members {
		e.m.settled.WithLabelValues("booked").Inc()
		e.log.WarnContext(r.ctx, "commit reply lost; settled on the server the pool reaches: the booking is there", "show_id", r.c.sh.id, "booking_id", r.id)
		mctx, cancel := context.WithTimeout(ctx, markSoldTimeout)
		if err := e.markBooking(mctx, r.c.sh, r.c.sold, marker(r.gen, true)); err != nil {
			e.log.WarnContext(r.ctx, "sold markers of a settled booking left to the background repair", "show_id", r.c.sh.id, "error", err)
		} else {
			e.giveRest(mctx, r.c, r.id)
			e.gaveBack(mctx, r.c.sh, r.res.swap)
		}
		cancel()
	}
}

// commitAgain commits the confirmations of group's batches again, in one batch of the
// settler's own (it waits for no committer: those may still be settling their own lost
// COMMITs), with the same booking ids, holds and generations (each hold is reserved for
// its id, and reserve.lua only lengthens the reservation), and settles each by its
// answer.
func (e *Engine) commitAgain(group []*unsettled) {
	// The holds live as long as their reservations: that is their expiry here.
	expires := time.Now().Add(e.reserveLife())
	var again []*confirmReq
	for _, u := range group {
		for _, r := range u.members {
			a := e.newConfirmReq(r.ctx, r.c, r.gen, r.id, expires)
			a.state.Store(reqTaken)
			again = append(again, a)
		}
	}
	e.commitBatch(again)
	i := 0
	for _, u := range group {
		for _, r := range u.members {
			<-again[i].done // answered within the batch's bounds (or a fence busy elsewhere's)
			e.settledAgain(u, r, again[i])
			i++
		}
	}
}

// settledAgain settles r, committed again as again: booked, refused for good (its batch
// gave its hold back), its outcome unknown again (its batch handed it to the settler),
// or not tried (the engine closed, the server failed before COMMIT): then it is the
// settler's again.
func (e *Engine) settledAgain(u *unsettled, r, again *confirmReq) {
	ctx, cancel := context.WithTimeout(r.ctx, markSoldTimeout)
	defer cancel()
	switch err := again.err; {
	case err == nil:
		e.owed(ctx, r.c, r.id, r.gen, again.res, again.marked)
		e.m.settled.WithLabelValues("committed_again").Inc()
		e.log.WarnContext(r.ctx, "commit reply lost; the booking was not on the server the pool reaches, and was committed again there",
			"show_id", r.c.sh.id, "booking_id", r.id)
	case errors.Is(err, errCommitUnknown):
		// Its new batch handed it to the settler.
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrOverloaded):
		if !errors.Is(err, errClosed) {
			e.unsettle([]*confirmReq{r}, u.ran, nil, u.since)
		}
	default:
		e.m.settled.WithLabelValues("refused").Inc()
		e.log.WarnContext(r.ctx, "commit reply lost; the booking was not on the server the pool reaches, and committing it again there was refused",
			"show_id", r.c.sh.id, "booking_id", r.id, "error", err)
	}
}
