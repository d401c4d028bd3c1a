package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/db"
)

// The batch's transaction (steps 1 and 3–5 of groupcommit.go): the fences locked and the
// claims read, each confirmation decided in Go, the accepted ones written, COMMIT; or,
// with Config.ConfirmSavepoints, each confirmation in a savepoint of its own.

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
	shows, seats := batchSeats(batch)
	// Deciding in Go needs the fences the lock read and the claims; savepoints let the
	// statements decide.
	guard.step()
	locked, claimed, err := e.lockFences(ctx, tx, batch, shows, seats, !e.cfg.ConfirmSavepoints)
	if err != nil {
		return false, err
	}
	if err := e.lockAreas(ctx, tx, batch); err != nil {
		return false, err
	}
	var fence map[seatKey]int64
	if !e.cfg.ConfirmSavepoints {
		fence = fences(locked)
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
		accepted, err = e.decideAndWrite(ctx, guard, tx, batch, fence, claimed, perBooking)
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
		// The reply is lost: settle the outcome, once for the whole batch (settle.go).
		return e.settleLostCommit(ctx, ran, accepted, err, still, sent), nil
	}
	return true, nil
}

// batchSeats are the (show, seat) pairs of batch, sorted and distinct, as two columns:
// the order every batch locks fences in.
func batchSeats(batch []*confirmReq) (shows, seats []string) {
	var keys []seatKey
	for _, r := range batch {
		for _, s := range r.c.fenced {
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
	shows, seats = make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		shows[i], seats[i] = k.show, k.seat
	}
	return shows, seats
}

// fences are the generations of the fences the batch locked, by seat.
func fences(locked []db.SeatFencesLockSkipRow) map[seatKey]int64 {
	fence := make(map[seatKey]int64, len(locked))
	for _, f := range locked {
		fence[seatKey{f.ShowID, f.SeatID}] = f.Generation
	}
	return fence
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
			if slices.ContainsFunc(r.c.fenced, func(s string) bool { return !have[seatKey{r.c.sh.id, s}] }) {
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

// decideAndWrite is steps 3 and 4 of the batch: it decides each confirmation in queue
// order from the batch's locked fences and claims, and writes the accepted ones, which
// it returns: each table in one statement (BookingCreateMany), or, with perBooking, a
// statement per booking (pipelined), which tells whose write a violation was.
//
// The batch's exchanges (exchange.go) come after, each in a savepoint of its own, where
// the database decides them against what the batch wrote before.
func (e *Engine) decideAndWrite(ctx context.Context, guard *stallGuard, tx pgx.Tx, batch []*confirmReq, fence map[seatKey]int64, claimed map[seatKey]bool, perBooking bool) ([]*confirmReq, error) {
	accepted := decide(batch, fence, claimed)
	if len(accepted) > 0 {
		guard.step()
		var err error
		if perBooking {
			err = e.writePerBooking(ctx, guard, db.New(tx), accepted)
		} else {
			err = e.writeMany(ctx, db.New(tx), accepted)
		}
		if err != nil {
			return nil, err
		}
	}
	if !slices.ContainsFunc(batch, func(r *confirmReq) bool { return r.c.swap != nil }) {
		return accepted, nil // the usual batch: no exchange, nothing more to allocate
	}
	swaps := slices.DeleteFunc(slices.Clone(batch), func(r *confirmReq) bool { return r.c.swap == nil })
	exchanged, err := e.writeInSavepoints(ctx, guard, tx, swaps)
	if err != nil {
		return nil, err
	}
	return append(accepted, exchanged...), nil
}

// decide is step 3: it decides each confirmation of batch in queue order, as lone
// transactions would have one after the other, and returns the accepted ones. A
// confirmation is refused by a fence that has seen its generation, by a seat claimed
// (before, or by an earlier confirmation of the batch), or by an idempotency key an
// earlier confirmation of the batch used. fence and claimed are left as the accepted
// ones leave them.
func decide(batch []*confirmReq, fence map[seatKey]int64, claimed map[seatKey]bool) []*confirmReq {
	type idemKey struct{ show, holder, key string }
	usedKeys := map[idemKey]bool{}
	var accepted []*confirmReq
	for _, r := range batch {
		if r.err != nil || r.c.swap != nil { // an exchange is written after (decideAndWrite)
			continue
		}
		sh := r.c.sh.id
		stale, taken := false, false
		for _, s := range r.c.fenced {
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
		for _, s := range r.c.fenced {
			fence[seatKey{sh, s}], claimed[seatKey{sh, s}] = r.gen, true
		}
		accepted = append(accepted, r)
	}
	return accepted
}

// advanceParams are step 4's fence write of accepted: each seat's fence to its
// confirmation's generation, in one statement.
func advanceParams(accepted []*confirmReq) db.SeatFencesAdvanceManyParams {
	var p db.SeatFencesAdvanceManyParams
	for _, r := range accepted {
		for _, s := range r.c.fenced {
			p.ShowIds, p.SeatIds, p.Generations = append(p.ShowIds, r.c.sh.id), append(p.SeatIds, s), append(p.Generations, r.gen)
		}
	}
	return p
}

// allAdvanced checks that the fence write p advanced every fence (n of them did).
func allAdvanced(n int64, p db.SeatFencesAdvanceManyParams) error {
	if n != int64(len(p.SeatIds)) {
		// Cannot happen under the locks; if it does, nothing of the batch commits.
		return fmt.Errorf("%w: %d of %d fences advanced under their locks", ErrUnavailable, n, len(p.SeatIds))
	}
	return nil
}

// bookings are the rows accepted's confirmations write.
func bookings(accepted []*confirmReq) []db.BookingCreateParams {
	params := make([]db.BookingCreateParams, len(accepted))
	for i, r := range accepted {
		params[i] = r.booking()
	}
	return params
}

// writeMany is step 4 in one round trip: the fences in one statement, the bookings in
// another (BookingCreateMany); a refused fence rolls both back. A violation that belongs
// to one confirmation is errWhoseWrite: the batch runs again with writePerBooking.
func (e *Engine) writeMany(ctx context.Context, q *db.Queries, accepted []*confirmReq) error {
	p, m := advanceParams(accepted), createManyParams(bookings(accepted))
	var n int64
	var rows []db.BookingCreateManyRow
	err := q.Pipelined(ctx, func(q *db.Queries) (err error) {
		n, err = q.SeatFencesAdvanceMany(ctx, p)
		return err
	}, func(q *db.Queries) (err error) {
		rows, err = q.BookingCreateMany(ctx, m)
		return err
	})
	switch {
	case err != nil && claimErr(err) != nil:
		return fmt.Errorf("%w: %w", errWhoseWrite, err)
	case err != nil:
		return e.txErr(err)
	}
	if err := allAdvanced(n, p); err != nil {
		return err
	}
	return created(accepted, rows)
}

// writePerBooking is step 4 with a statement per booking (pipelined), after the fences'
// one: a violation names its confirmation (a *memberErr), which the batch then runs
// again without.
func (e *Engine) writePerBooking(ctx context.Context, guard *stallGuard, q *db.Queries, accepted []*confirmReq) error {
	p := advanceParams(accepted)
	n, err := q.SeatFencesAdvanceMany(ctx, p)
	if err != nil {
		return e.txErr(err)
	}
	if err := allAdvanced(n, p); err != nil {
		return err
	}
	guard.step()
	var failed *memberErr
	var firstErr error
	q.BookingCreate(ctx, bookings(accepted)).QueryRow(func(i int, row db.BookingCreateRow, err error) {
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
		return failed
	}
	if firstErr != nil {
		return e.txErr(firstErr)
	}
	return nil
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
		m.Offers = append(m.Offers, p.Offer)
		for _, s := range p.SeatIds {
			m.SeatBookings = append(m.SeatBookings, int64(i+1))
			m.SeatIds = append(m.SeatIds, s)
		}
		placesMany(&m, i, p)
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
	write := writeOne
	if r.c.swap != nil {
		write = e.exchangeTx
	}
	res, err := write(ctx, q, r)
	var rf *refusal
	switch {
	case errors.As(err, &rf):
		return refuse(rf.err)
	case claimErr(err) != nil:
		return refuse(claimErr(err))
	case err != nil:
		return false, e.txErr(err)
	}
	if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
		return false, e.txErr(err)
	}
	r.res = res
	return true, nil
}

// writeOne is a lone confirmation's statements: the fence, then the booking. A fence
// that has seen its generation is a refusal (errStale).
func writeOne(ctx context.Context, q *db.Queries, r *confirmReq) (committed, error) {
	adv, err := q.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: r.c.sh.id, SeatIds: r.c.fenced, Generation: r.gen})
	if err != nil {
		return committed{}, err
	}
	if len(adv) != len(r.c.fenced) {
		return committed{}, &refusal{errStale}
	}
	var res committed
	q.BookingCreate(ctx, []db.BookingCreateParams{r.booking()}).QueryRow(func(_ int, row db.BookingCreateRow, cerr error) {
		res, err = committed{at: row.ConfirmedAt, seq: row.MarkerSeq}, cerr
	})
	return res, err
}

// booking is the row r's confirmation writes.
func (r *confirmReq) booking() db.BookingCreateParams {
	p := db.BookingCreateParams{ShowID: r.c.sh.id, BookingID: r.id, Generation: r.gen, HolderID: r.c.h.HolderID,
		Fingerprint: r.c.fp, HoldHash: r.c.hold, SeatIds: r.c.fenced, Offer: r.offer}
	r.placeParams(&p)
	if r.c.key != "" {
		p.IdempotencyKey.String, p.IdempotencyKey.Valid = r.c.key, true
	}
	return p
}
