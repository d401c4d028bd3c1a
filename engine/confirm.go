package engine

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// Outcomes of one confirmation transaction, internal to Confirm.
var (
	errStale       = errors.New("fence refused the generation")
	errSeatClaimed = errors.New("a seat is claimed already")
	errKeyConflict = errors.New("idempotency key used already")
	errSpent       = errors.New("the hold made a booking already")
	// errOverLimit: the database refused the booking past the show's holder limit
	// (holder_seats_within_limit, migration 00006).
	errOverLimit        = errors.New("the holder's booked seats would pass the show's holder limit")
	errLostBeforeCommit = errors.New("hold lost before commit")
	// errCommitting: another batch has the hold reserved (reserve.lua) and has not
	// decided yet.
	errCommitting = errors.New("the hold is being confirmed")
	// errCommitUnknown: a COMMIT's reply was lost and its outcome could not be settled.
	errCommitUnknown = errors.New("commit outcome unknown")
)

// holdCommitting is what verify.lua and reserve.lua answer for a hold that a batch has
// reserved and not yet decided; holdBooked is verifyDecided's word for a reserved hold
// whose booking the database has (its sold markers are owed); holdLate is reserve.lua's
// for a check it ran past its late-check bound (nothing reserved).
const (
	holdCommitting = -2
	holdBooked     = -3
	holdLate       = -4
)

// resolveTimeout bounds the look-up that settles a COMMIT whose reply was lost.
const resolveTimeout = 5 * time.Second

// Confirm turns a current hold into a booking, in one PostgreSQL transaction that
// advances each seat's fence (only for a strictly larger generation) and claims the
// seats. The hold is checked in Redis in the transaction, once the fences are locked and
// before anything is written, and before it is queued too unless h.ExpiresAt says it
// has longer than a batch's time left (h.ExpiresAt is a hint: out of date or left out,
// the answer is the same). After the commit its keys are replaced by the sold marker. A
// hold makes at most one booking, ever: confirming it again (other seats, another
// generation, after the booking was cancelled) is refused with a [*HoldSpentError].
//
// Refusals: ErrHoldLost (the hold is not current; a [*HoldLostError] says why, as far
// as the caller may know), ErrStaleGeneration (the database has
// accepted this generation or a larger one for a seat), ErrSeatsUnavailable (a seat is
// claimed), ErrIdempotencyKeyReused. A backend failure is ErrUnavailable; when the
// commit's outcome is unknown, Confirm settles it before answering, so success is never
// reported for a booking that does not exist, and a booking that exists is reported.
func (e *Engine) Confirm(ctx context.Context, h Hold, opts ConfirmOptions) (Booking, error) {
	ctx, o := e.begin(ctx, "confirm", h.ShowID, len(h.SeatIDs))
	b, err := e.confirm(ctx, h, opts)
	result := ""
	if err == nil && b.Replayed {
		result = "replay"
	}
	o.end(err, result)
	return b, err
}

// confirmation is one Confirm call's validated request, and the hold as its next batch
// is to confirm it.
type confirmation struct {
	sh    *show
	seats []string // its hold's script seat arguments: seats, then place keys
	// sold is what its booking sells, as script seat arguments: the hold's, or a part of
	// it (ConfirmOptions.SeatIDs / Places) whose rest — the hold keys it does not sell
	// whole — is given back after the commit (partial.go)
	sold, rest []string
	// fenced is sold's seats alone (fenced and claimed seat by seat); places its places
	fenced []string
	places []Places
	ks     []string
	tag    string
	h      Hold
	key    string
	fp     []byte // the request's fingerprint, for its idempotency key
	hold   []byte // the hold's hash: one booking per hold
	// limited: the show's rules have a holder limit (as the engine knew when it queued)
	limited bool
	// swap, for an exchange (exchange.go): its booking and what it gives back
	swap *swap

	// gen is the hold's generation as the next batch is to confirm it, and expires when
	// the hold expires: its caller's copy (optimistic) or Redis's word (verified).
	gen     int64
	expires time.Time
}

// confirm checks the request, sends the hold to a batch (confirmTx) — unasked when its
// caller's copy has time enough left (optimistic), else once Redis has it as current
// (verified) — and answers what the batch decided: the booking, or a refusal, after
// which a retry of a request that committed gets its booking (replay). A batch that
// found the hold other than presented sends it again, once Redis has been asked.
func (e *Engine) confirm(ctx context.Context, h Hold, opts ConfirmOptions) (Booking, error) {
	c, err := e.newConfirmation(ctx, h, opts)
	if err != nil {
		return Booking{}, err
	}
	return e.confirmOf(ctx, c)
}

// confirmOf is confirm of a checked request (an exchange's too: exchange.go).
func (e *Engine) confirmOf(ctx context.Context, c *confirmation) (Booking, error) {
	h := c.h
	// With the queue full it would be shed after its check: shed it before, so that
	// under overload a refusal costs Redis nothing either.
	if e.queueFull() {
		return e.admission(ctx, c, e.shed())
	}
	// A hold whose caller's copy has longer than a batch's time left goes to the queue
	// unasked (optimistic): the batch's own check (reserve.lua) is the one that counts
	// either way, and one that does not find the hold as presented — not current,
	// re-issued, reserved by another batch, or taken too late for the expiry its caller
	// gave — changes nothing, and the confirmation starts again from verified. So the
	// usual confirmation costs Redis one script call before its batch writes, not two.
	optimistic := e.optimistic(h)
	if optimistic {
		c.gen, c.expires = h.Generation, h.ExpiresAt
		if latest := time.Now().Add(e.cfg.MaxHoldTTL); c.expires.After(latest) {
			c.expires = latest // no hold lives longer
		}
	} else if answered, b, err := e.verified(ctx, c, nil); answered {
		return b, err
	}
	// The transaction is a batch's (groupcommit.go): queued until a committer takes it,
	// refused there rather than let wait past what its hold has left.
	if e.hooks.beforeWrite != nil {
		e.hooks.beforeWrite(ctx)
	}

	regenerated := false
	for {
		id := newBookingID()
		if c.swap != nil { // an exchange commits into its booking: the id settles it (witness)
			id = c.swap.booking
		}
		r, marked, err := e.confirmTx(ctx, c, c.gen, id, c.expires)
		if optimistic && (errors.Is(err, errLostBeforeCommit) || errors.Is(err, errCommitting) || errors.Is(err, errTooLate)) {
			optimistic = false
			if answered, b, err := e.verified(ctx, c, err); answered {
				return b, err
			}
			continue
		}
		switch {
		case errors.Is(err, errCommitting):
			// Another confirmation of this hold is in a batch: once it has decided, this
			// one starts again from the Redis check (and finds the booking, or the hold).
			if answered, b, err := e.verified(ctx, c, nil); answered {
				return b, err
			}
			continue

		case errors.Is(err, errStale):
			again, b, err := e.refusedStale(ctx, c, !regenerated)
			if again {
				regenerated = true
				continue
			}
			return b, err
		}
		return e.decided(ctx, c, id, r, marked, err)
	}
}

// newConfirmation checks a Confirm call's request and returns it as a confirmation.
func (e *Engine) newConfirmation(ctx context.Context, h Hold, opts ConfirmOptions) (*confirmation, error) {
	sh, seats, ks, tag, err := e.ownedHold(ctx, h)
	if err != nil {
		return nil, err
	}
	key := idempotencyKeyOf(ctx, opts.IdempotencyKey)
	if err := validateIdempotencyKey("ConfirmOptions.IdempotencyKey", key); err != nil {
		return nil, err
	}
	c := &confirmation{sh: sh, seats: seats, sold: seats, fenced: fencedSeats(seats), places: placesOf(seats), ks: ks, tag: tag, h: h, key: key,
		fp: fingerprint(sh.id, seats, h.Token, h.Generation), hold: holdHash(sh.id, h.Token)}
	if err := c.part(opts.SeatIDs, opts.Places); err != nil {
		return nil, err
	}
	// Read here, outside the batch's transaction: whether the batch reads the holder's
	// booked seats for Redis (batchCounts).
	c.limited = e.limited(ctx, sh)
	return c, nil
}

// verified asks Redis (verify.lua) for the hold's generation now, and when it expires,
// and sets them on c: the generation is the one presented, or the one Redis re-issued it
// when an earlier confirmation of it found the counter behind the database; a hold that a
// batch is committing (a concurrent or retried confirmation of it) is asked about again
// once that batch has decided. answered is true when that settles the confirmation.
// refused is what a batch said of the hold as presented, if anything: a hold Redis no
// longer has is then refused as the batch said — lost before commit (once the expiry its
// caller gave has passed; before, it was never current as presented), or taken too late.
func (e *Engine) verified(ctx context.Context, c *confirmation, refused error) (answered bool, b Booking, err error) {
	g, ttl, err := e.verifyDecided(ctx, c, c.h.Generation)
	switch {
	case err != nil:
		return true, Booking{}, err
	case g == holdBooked:
		b, err = e.spentHold(ctx, c)
		return true, b, err
	case g == 0 && errors.Is(refused, errLostBeforeCommit) && !time.Now().Before(c.h.ExpiresAt):
		// Its expiry passed while it waited: a hold its caller presented in time.
		b, err = e.lostBeforeCommit(ctx, c, c.h.Generation, c.h.ExpiresAt)
		return true, b, err
	case g == 0 && errors.Is(refused, errTooLate):
		e.m.admissionRefusals.WithLabelValues("too_late").Inc()
		b, err = e.admission(ctx, c, refused)
		return true, b, err
	case g <= 0:
		b, err = e.notCurrent(ctx, c, g < 0)
		return true, b, err
	}
	c.gen, c.expires = g, time.Now().Add(ttl)
	return false, Booking{}, nil
}

// decided answers what c's batch decided (confirmTx's outcome, other than a hold
// re-issued or reserved elsewhere, and a stale generation): the booking, or the
// refusal a caller may act on.
func (e *Engine) decided(ctx context.Context, c *confirmation, id uuid.UUID, r committed, marked bool, err error) (Booking, error) {
	sh := c.sh
	switch {
	case errors.Is(err, ErrOverloaded):
		return e.admission(ctx, c, err)

	case errors.Is(err, errTooLate):
		e.m.admissionRefusals.WithLabelValues("too_late").Inc()
		return e.admission(ctx, c, err)

	case err == nil:
		return e.booked(ctx, c, id, r, marked), nil

	case errors.Is(err, errSeatClaimed):
		if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
			return b, err
		}
		taken := e.repairMarkers(ctx, c)
		e.event(ctx, e.q, sh.id, "refused_taken", c.gen, c.seats, c.h.HolderID)
		return Booking{}, &SeatsUnavailableError{ShowID: sh.id, SeatIDs: taken}

	case errors.Is(err, errSpent):
		return e.spentHold(ctx, c)

	case errors.Is(err, errAreaFull):
		return e.areaFull(ctx, c, c.gen)

	case errors.Is(err, errOverLimit):
		if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
			return b, err
		}
		return Booking{}, fmt.Errorf("%w: confirm: the holder's booked seats of show %s would pass its holder limit (the database counts them)",
			ErrHolderLimit, sh.id)

	case errors.Is(err, errKeyConflict):
		if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
			return b, err
		}
		return Booking{}, fmt.Errorf("%w: idempotency key conflict but no booking found", ErrUnavailable)

	case errors.Is(err, errLostBeforeCommit):
		return e.lostBeforeCommit(ctx, c, c.gen, c.expires)

	default:
		return Booking{}, err
	}
}

// booked is the booking c's batch committed as id.
func (e *Engine) booked(ctx context.Context, c *confirmation, id uuid.UUID, r committed, marked bool) Booking {
	sh, seats, gen := c.sh, c.sold, c.gen
	e.owed(ctx, c, id, gen, r, marked)
	if r.swap != nil {
		e.log.InfoContext(ctx, "booking exchanged", "show_id", sh.id, "booking_id", id, "generation", gen, "gave", len(r.swap.tombs))
		return r.swap.after
	}
	e.log.InfoContext(ctx, "booking confirmed", "show_id", sh.id, "booking_id", id, "seats", len(seats), "generation", gen)
	return Booking{ID: id, ShowID: sh.id, SeatIDs: c.fenced, Places: c.places, Generation: gen, HolderID: c.h.HolderID,
		Status: BookingConfirmed, ConfirmedAt: r.at, Offer: r.offer}
}

// owed writes what a confirmation its batch committed (as id, at gen: r) still owes
// Redis: when the batch could not write its sold markers (marked false), its holders'
// counts and the markers, tried again for a while and else left to the repair, then the
// rest of a partial confirmation; and, once its markers are in, an exchange's tombstones
// (they come after, so nothing the booking keeps ever looks free).
func (e *Engine) owed(ctx context.Context, c *confirmation, id uuid.UUID, gen int64, r committed, marked bool) {
	if !marked {
		if len(r.counts) > 0 {
			_ = e.writeCounts(ctx, c.sh, r.counts)
		}
		marked = e.afterCommit(ctx, c.sh, c.sold, marker(gen, true), r.seq, markSoldTimeout) == nil
		if marked {
			e.giveRest(ctx, c, id)
		}
	}
	if marked {
		e.gaveBack(ctx, c.sh, r.swap)
	}
}

// gaveBack writes the tombstones of what an exchange (s; nil for none) gave back, once
// its booking's sold markers are in; left to the repair when Redis fails.
func (e *Engine) gaveBack(ctx context.Context, sh *show, s *swapped) {
	if s != nil && len(s.tombs) > 0 {
		_ = e.afterCommit(ctx, sh, s.tombs, tombstone(s.tombGen, s.after.ID), s.tombSeq, 0)
	}
}

// refusedStale answers a batch's stale refusal of c: a fence has seen its generation.
// A retry of a request that committed gets its booking; a hold that made a booking is
// spent. Otherwise, with mayRegenerate, the hold may still be current while the
// database has seen its generation — Redis lost data and its counter went backwards:
// the counter is raised above the database's high-water mark and the hold re-issued
// (c.gen), and again reports that the confirmation should go to a batch again.
func (e *Engine) refusedStale(ctx context.Context, c *confirmation, mayRegenerate bool) (again bool, b Booking, err error) {
	e.m.fenceRefusals.Inc()
	if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
		return false, b, err
	}
	// A hold that made a booking is spent, whatever generation it presents now
	// (its keys can outlive the booking until its sold markers are written).
	if err := e.spent(ctx, c, ErrStaleGeneration); err != nil {
		return false, Booking{}, err
	}
	if mayRegenerate {
		newGen, ok, err := e.regenerate(ctx, c, c.gen)
		if err != nil {
			return false, Booking{}, err
		}
		if ok {
			c.gen = newGen
			return true, Booking{}, nil
		}
	}
	e.event(ctx, e.q, c.sh.id, "refused_stale", c.gen, c.seats, c.h.HolderID)
	return false, Booking{}, fmt.Errorf("%w: confirm: a seat's fence has seen generation %d", ErrStaleGeneration, c.gen)
}

// notCurrent refuses a hold Redis no longer has; sold is Redis's word that its seats
// are sold by a booking of its generation. Only then is the database asked which
// booking: an ordinary lost hold costs it nothing.
func (e *Engine) notCurrent(ctx context.Context, c *confirmation, sold bool) (Booking, error) {
	// A retry whose first call succeeded finds the hold replaced by the sold marker.
	if b, ok, err := e.replay(ctx, c, false); ok || err != nil {
		return b, err
	}
	return Booking{}, e.holdLost(ctx, "confirm", c.sh, c.h, c.tag, sold, time.Time{})
}

// spentHold answers for a hold that made a booking already.
func (e *Engine) spentHold(ctx context.Context, c *confirmation) (Booking, error) {
	if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
		return b, err
	}
	if err := e.spent(ctx, c, ErrStaleGeneration); err != nil {
		return Booking{}, err
	}
	return Booking{}, fmt.Errorf("%w: the hold made a booking already", ErrStaleGeneration)
}

// admission answers a refusal by admission (ErrOverloaded, ErrHoldLost too late):
// a retry of a request that committed gets its booking instead.
func (e *Engine) admission(ctx context.Context, c *confirmation, refusal error) (Booking, error) {
	if b, ok, err := e.replay(ctx, c, true); ok || err != nil {
		return b, err
	}
	if errors.Is(refusal, errTooLate) {
		return Booking{}, &HoldLostError{ShowID: c.sh.id, Cause: HoldExpired, At: c.expires, op: "confirm", err: refusal}
	}
	return Booking{}, refusal
}

// lostBeforeCommit answers for a hold its batch found lost before it could commit.
func (e *Engine) lostBeforeCommit(ctx context.Context, c *confirmation, gen int64, expiredAt time.Time) (Booking, error) {
	if b, ok, err := e.replay(ctx, c, false); ok || err != nil {
		return b, err
	}
	e.event(ctx, e.q, c.sh.id, "refused_lost", gen, c.seats, c.h.HolderID)
	return Booking{}, e.holdLost(ctx, "confirm", c.sh, c.h, c.tag, false, expiredAt)
}

// committed is what a confirmation transaction wrote: when, and its marker_outbox row.
type committed struct {
	at  time.Time
	seq int64
	// counts is the holder's booked seats after it, when the show has a holder limit:
	// written to Redis before the sold markers.
	counts []holderCount
	offer  string   // its hold's (reserve.lua)
	swap   *swapped // an exchange's (exchange.go)
}

// optimistic reports whether a confirmation of h may go to its batch without asking
// Redis first: its caller's copy (Hold.ExpiresAt) has longer than a batch's time left.
func (e *Engine) optimistic(h Hold) bool {
	return time.Until(h.ExpiresAt) > e.gc.needs()
}

// confirmTx confirms in a batch's transaction (groupcommit.go) and returns its outcome:
// what it committed and whether the batch wrote its sold markers, or its refusal (an
// internal outcome such as errStale, or ErrHoldLost, ErrOverloaded, ErrUnavailable).
func (e *Engine) confirmTx(ctx context.Context, c *confirmation, gen int64, id uuid.UUID, expires time.Time) (committed, bool, error) {
	ctx, span := e.step(ctx, "holdfast.confirm.transaction")
	r, err := e.commit(ctx, c, gen, id, expires)
	if err == nil {
		err = r.err
	}
	endStep(span, err)
	if err != nil {
		return committed{}, false, err
	}
	res := r.res
	res.offer = r.offer
	return res, r.marked, nil
}

// claimErr maps the unique violations of BookingCreate: a seat claimed already
// (errSeatClaimed), an idempotency key used already (errKeyConflict), a hold that made a
// booking already (errSpent), and the holder limit's check violation (errOverLimit);
// nil otherwise.
func claimErr(err error) error {
	if pgCode(err) == "23514" && pgConstraint(err) == "holder_seats_within_limit" {
		return errOverLimit
	}
	if pgCode(err) == "23514" && pgConstraint(err) == "areas_sold_within_capacity" {
		return errAreaFull
	}
	if pgCode(err) != "23505" {
		return nil
	}
	switch pgConstraint(err) {
	case "seat_claims_pkey":
		return errSeatClaimed
	case "bookings_idempotency_key_unique":
		return errKeyConflict
	case "bookings_hold_unique", "booking_places_pkey": // the hold's places booked already
		return errSpent
	case "booking_seats_pkey": // an exchange's hold has a seat of its own booking
		return errSeatClaimed
	}
	return nil
}

// txErr keeps retryable codes visible to confirmTx and makes the rest ErrUnavailable.
func (e *Engine) txErr(err error) error {
	if retryable(err) {
		return err
	}
	return e.pgErr(err)
}

// verify returns the hold's current generation in Redis — gen, or the generation
// regen.lua re-issued a hold that had gen — when every seat still holds its token; -1
// when the seats are sold by a booking of generation gen; 0 when the hold is not
// current.
// verify asks Redis whether the hold is current: its generation now (see verify.lua)
// and, when current, how long it has left to live.
func (e *Engine) verify(ctx context.Context, c *confirmation, gen int64) (int64, time.Duration, error) {
	ctx, span := e.step(ctx, "holdfast.confirm.verify")
	cur, ttl, err := e.verifyReply(lua.Verify.Run(ctx, e.scripts, c.ks, scriptArgs(c.tag, []any{c.h.Token, gen}, c.seats)...))
	endStep(span, err)
	return cur, ttl, err
}

// verifyDecided is verify, asked again while a batch is committing the hold
// (holdCommitting) until it has decided, within ctx and the hold's reservation; a
// reserved hold whose booking committed (its markers not yet written) is holdBooked.
func (e *Engine) verifyDecided(ctx context.Context, c *confirmation, gen int64) (int64, time.Duration, error) {
	var cur int64
	var ttl time.Duration
	err := e.awaitDecided(ctx, c.sh, c.h.Token, func() (bool, error) {
		var err error
		cur, ttl, err = e.verify(ctx, c, gen)
		return cur == holdCommitting, err
	})
	if errors.Is(err, errHoldBooked) {
		return holdBooked, 0, nil
	}
	return cur, ttl, err
}

// errHoldBooked: awaitDecided found the booking of the hold it waited for.
var errHoldBooked = errors.New("the hold made a booking")

// awaitDecided calls try until it reports the hold (of show sh and token) no longer
// reserved by a batch (busy false) or fails, pausing a little longer each time. While
// busy, it asks the database whether the hold has a booking — its batch committed and
// its sold markers are owed — and then returns errHoldBooked. A batch decides within its
// bound; its hold's reservation ends a little after (reserveLife). Past that, or when ctx
// ends first, it is ErrUnavailable: the outcome of the batch is not known here.
func (e *Engine) awaitDecided(ctx context.Context, sh *show, token string, try func() (busy bool, err error)) error {
	wctx, cancel := context.WithTimeout(ctx, e.reserveLife())
	defer cancel()
	for attempt := 1; ; attempt++ {
		busy, err := try()
		if err != nil || !busy {
			return err
		}
		if err := e.holdBooked(wctx, sh, token); err != nil {
			return err
		}
		if err := sleepJitter(wctx, min(attempt, 10)); err != nil {
			return unavailable("redis", fmt.Errorf("the hold is being confirmed and its batch has not decided: %w", err))
		}
	}
}

// holdBooked returns errHoldBooked when the database has a booking of the hold (of show
// sh and token), nil when it has none.
func (e *Engine) holdBooked(ctx context.Context, sh *show, token string) error {
	_, err := e.q.BookingGetByHold(ctx, db.BookingGetByHoldParams{ShowID: sh.id, HoldHash: holdHash(sh.id, token)})
	switch {
	case err == nil:
		return errHoldBooked
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	default:
		return e.pgErr(err)
	}
}

// verifyReply reads verify.lua's reply: the hold's generation now (see verify) and how
// long it has left.
func (e *Engine) verifyReply(cmd *redis.Cmd) (int64, time.Duration, error) {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%w: unexpected verify script reply %v", ErrUnavailable, res)
	}
	if err != nil {
		return 0, 0, e.redisErr(err)
	}
	return res[0], time.Duration(res[1]) * time.Millisecond, nil
}

// spent returns a [*HoldSpentError] matching sentinel when the hold made a booking
// already, nil when it did not.
func (e *Engine) spent(ctx context.Context, c *confirmation, sentinel error) error {
	return e.spentBy(ctx, c.sh, c.h.Token, c.h.HolderID, sentinel)
}

// spentBy is spent for the hold of show sh and token, presented by holderID: the
// booking is named to its own holder only.
func (e *Engine) spentBy(ctx context.Context, sh *show, token, holderID string, sentinel error) error {
	row, err := e.q.BookingGetByHold(ctx, db.BookingGetByHoldParams{ShowID: sh.id, HoldHash: holdHash(sh.id, token)})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return e.pgErr(err)
	}
	se := &HoldSpentError{ShowID: sh.id, err: sentinel}
	if subtle.ConstantTimeCompare([]byte(row.HolderID), []byte(holderID)) == 1 {
		se.BookingID = row.BookingID
	}
	return se
}

// replay looks up the booking an earlier call with the same idempotency key created.
// ok is false when there is no key or no such booking. A booking made by a different
// request is ErrIdempotencyKeyReused. With remark, a confirmed booking's sold markers
// are written again (the first call may have lost them).
func (e *Engine) replay(ctx context.Context, c *confirmation, remark bool) (Booking, bool, error) {
	if c.key == "" {
		return Booking{}, false, nil
	}
	row, err := e.q.BookingGetByIdempotencyKey(ctx, db.BookingGetByIdempotencyKeyParams{
		ShowID: c.sh.id, HolderID: c.h.HolderID, IdempotencyKey: c.key})
	if errors.Is(err, pgx.ErrNoRows) {
		return Booking{}, false, nil
	}
	if err != nil {
		return Booking{}, false, e.pgErr(err)
	}
	if subtle.ConstantTimeCompare(row.Fingerprint, c.fp) != 1 {
		return Booking{}, true, fmt.Errorf("%w: the key names another request", ErrIdempotencyKeyReused)
	}
	// A booking found here is acknowledged as this request's: only once it is as durable
	// as the server promises (its COMMIT's reply may have been lost while it waited for
	// a synchronous standby, and the server may have ended it since).
	if err := e.durable(ctx, e.pool); err != nil {
		return Booking{}, true, err
	}
	b := bookingFromRow(row)
	b.Replayed = true
	if remark && b.Status == BookingConfirmed {
		if e.hooks.afterRead != nil {
			e.hooks.afterRead(ctx, "replay")
		}
		// The first call may have lost its markers; they only move forward, so this
		// cannot undo a cancellation that came since.
		_ = e.markBooking(ctx, c.sh, b.SeatIDs, marker(b.Generation, true))
	}
	return b, true, nil
}

// regenerate re-issues a current hold's generation above the database's high-water
// mark. ok is false when the hold is no longer current.
func (e *Engine) regenerate(ctx context.Context, c *confirmation, gen int64) (int64, bool, error) {
	floor, err := e.q.SeatFenceMaxByShow(ctx, c.sh.id)
	if err != nil {
		return 0, false, e.pgErr(err)
	}
	if c.swap != nil {
		floor = max(floor, c.swap.floor) // an exchange's booking may have places alone
	}
	res, err := lua.Regen.Run(ctx, e.scripts, c.ks, scriptArgs(c.tag, []any{c.h.Token, gen, floor}, c.seats)...).Slice()
	if err != nil {
		return 0, false, e.redisErr(err)
	}
	if s, _ := res[0].(string); s != "OK" {
		return 0, false, nil
	}
	newGen, _ := res[1].(int64)
	if repaired, _ := res[2].(int64); repaired == 1 {
		e.m.counterRepairs.Inc()
		e.event(ctx, e.q, c.sh.id, "counter_repaired", floor, c.seats, c.h.HolderID)
		e.log.WarnContext(ctx, "generation counter was behind the database; raised it", "show_id", c.sh.id, "floor", floor, "generation", newGen)
	}
	return newGen, true, nil
}

// repairMarkers writes the sold markers of the requested seats the database says are
// claimed, and returns those seats (all requested seats when the claim is gone by now).
// Markers only move forward, so a cancellation committed after the read is not undone.
func (e *Engine) repairMarkers(ctx context.Context, c *confirmation) []string {
	claims, err := e.q.SeatClaimListBySeats(ctx, db.SeatClaimListBySeatsParams{ShowID: c.sh.id, SeatIds: c.fenced})
	if err != nil || len(claims) == 0 {
		return c.seats
	}
	if e.hooks.afterRead != nil {
		e.hooks.afterRead(ctx, "repair")
	}
	taken := make([]string, len(claims))
	marks := make([]string, len(claims))
	for i, cl := range claims {
		taken[i], marks[i] = cl.SeatID, marker(cl.Generation, true)
	}
	if _, _, err := e.writeMarkers(ctx, c.sh, taken, marks, "-"); err != nil {
		e.log.WarnContext(ctx, "repair sold markers", "show_id", c.sh.id, "error", err)
	}
	e.m.markerRepairs.Add(float64(len(claims)))
	e.event(ctx, e.q, c.sh.id, "marker_repaired", c.h.Generation, taken, c.h.HolderID)
	return taken
}

// event appends to the booking event log outside any transaction (refusals and repairs).
// A failure is logged: the refusal stands either way.
func (e *Engine) event(ctx context.Context, q *db.Queries, showID, kind string, gen int64, seats []string, holderID string) {
	err := q.BookingEventInsert(ctx, db.BookingEventInsertParams{ShowID: showID, Kind: kind,
		Generation: gen, SeatIds: seats, HolderID: holderID})
	if err != nil {
		e.log.WarnContext(ctx, "append booking event", "show_id", showID, "kind", kind, "error", err)
	}
}
