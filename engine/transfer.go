package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// Transfer moves a hold to another holder: the hold returned has the same seats,
// places and expiry, toHolderID as its holder, a new token and a new generation. The
// presented hold stops working at once (ErrHoldLost), and its generation is below the
// new one, which is larger than any the database has fenced: a confirmation with the
// old hold is refused by PostgreSQL's fence even where Redis lost the transfer. The new
// holder is counted as a hold of the seats would count them: a waiting room that has
// not admitted them now is ErrNotAdmitted, a hold past Config.MaxSeatsPerHolder or the
// sale's holder limit (seats held and booked) is ErrHolderLimit, and either way nothing
// changed. It is one Redis script, atomic with every other operation on the show; while
// a confirmation of the hold is being committed, Transfer waits for its outcome, as
// Release does. The move leaves an EventHoldTransferred in the feed, written before
// Transfer returns (moves.go); when it cannot be written, Transfer is ErrUnavailable
// with the hold moved, and a retry under the same idempotency key returns the new hold
// once its event is written. Only the owner can transfer (a hold that is not theirs any
// more is ErrHoldLost); the caller vouches that h.HolderID is the caller's (the HTTP API
// takes it from the signed identity). toHolderID must name a holder other than h's.
func (e *Engine) Transfer(ctx context.Context, h Hold, toHolderID string) (Hold, error) {
	ctx, o := e.begin(ctx, "transfer", h.ShowID, len(h.SeatIDs))
	h, err := e.transfer(ctx, h, toHolderID)
	o.end(err, "")
	return h, err
}

func (e *Engine) transfer(ctx context.Context, h Hold, to string) (Hold, error) {
	if err := validateNewHolder(h.HolderID, to); err != nil {
		return Hold{}, err
	}
	sh, seats, ks, tag, err := e.ownedHold(ctx, h)
	if err != nil {
		return Hold{}, err
	}
	rules, done, err := e.admitHold(ctx, sh, to)
	if err != nil {
		return Hold{}, err
	}
	defer done()
	if err := e.checkRedis(ctx); err != nil {
		return Hold{}, err
	}
	token := newToken()
	key, err := onHoldIdem(ctx, sh, h, "transfer", to)
	if err != nil {
		return Hold{}, err
	}
	fixed := []any{h.Token, h.Generation, holderTag(to), token, placeHoldID(token), e.cfg.MaxSeatsPerHolder, rules.arg, h.HolderID, to}
	if err := e.mayMove(ctx, sh); err != nil {
		return Hold{}, err
	}
	for attempt := 0; ; attempt++ {
		res, err := e.runDecided(ctx, sh, h.Token, lua.Transfer, ks, tag, fixed, seats, key)
		if err != nil {
			return Hold{}, err
		}
		res, first, again := replayed(res)
		if again {
			token = first
		}
		switch status, _ := res[0].(string); status {
		case "KEYREUSED":
			return Hold{}, keyReused("IdempotencyKey")
		case "OK":
			return e.transferred(ctx, sh, seats, token, to, res)
		case "LOST":
			return Hold{}, e.lostOwned(ctx, "transfer", sh, h, ks, tag, seats, len(res) == 2)
		case "LIMIT", "NOTADMITTED":
			_, places, _ := validPlaces("", placesOf(seats))
			n := len(fencedSeats(seats)) + places
			if err := e.saleRefusal(sh, res, n); err != nil {
				return Hold{}, err
			}
			return Hold{}, e.holderLimit(sh, res[1], n)
		case "STALE", "CLOSED":
			return Hold{}, e.metChange(ctx, sh, status)
		case "NOSTATE":
			if err := e.rebuildShow(ctx, sh, attempt, e.resync); err != nil {
				return Hold{}, err
			}
		default:
			return Hold{}, fmt.Errorf("%w: unexpected transfer script reply %v", ErrUnavailable, res)
		}
	}
}

// transferred is Transfer's answer to transfer.lua's "OK" reply res (its own, or the
// first call's under the idempotency key): the hold under its new token, once the
// show's moves are in the event feed (movedAnswer).
func (e *Engine) transferred(ctx context.Context, sh *show, seats []string, token, to string, res []any) (Hold, error) {
	gen, _ := res[1].(int64)
	exp, _ := res[2].(int64)
	e.wrote(sh, res[3])
	var offer string
	if len(res) > 4 {
		offer, _ = res[4].(string)
	}
	if err := e.movedAnswer(ctx, sh); err != nil {
		return Hold{}, err
	}
	return Hold{ShowID: sh.id, SeatIDs: fencedSeats(seats), Places: placesOf(seats), Token: token, Generation: gen,
		ExpiresAt: time.UnixMilli(exp), HolderID: to, Offer: offer}, nil
}

// validateNewHolder checks the holder a hold or a booking moves to, from the holder
// from: named, valid, and another.
func validateNewHolder(from, to string) error {
	if to == "" {
		return invalid("toHolderID", "must name the holder")
	}
	var iae *InvalidArgumentError
	if err := validateHolderID(to); errors.As(err, &iae) {
		return invalid("toHolderID", "%s", iae.Rule)
	}
	if to == from {
		return invalid("toHolderID", "is the holder already")
	}
	return nil
}

// TransferBooking moves a confirmed booking to another holder, for an operator: one
// transaction changes its holder and writes its EventTransferred event. Its seats and
// places leave the old holder's count under the show's holder limit and join the new
// holder's, which the database checks as it does a confirmation's: past the limit is
// ErrHolderLimit and nothing changed. The seats, generation and sold markers stay as
// they are; the booking's idempotency key, the old holder's, goes (keys are scoped to
// the holder). A booking that is not confirmed, or toHolderID that is empty or already
// its holder, is ErrInvalidArgument; an unknown booking is ErrNotFound. The holders'
// counts in Redis follow after the commit; one that fails to is logged, and the next
// resync writes it (the database's check stands meanwhile).
func (e *Engine) TransferBooking(ctx context.Context, bookingID uuid.UUID, toHolderID string) (Booking, error) {
	ctx, o := e.begin(ctx, "transfer_booking", "", 0)
	k, err := bookingKeyOf(ctx, byOperator, "transfer-booking", bookingID.String(), toHolderID)
	var b Booking
	if err == nil {
		b, err = e.transferBooking(ctx, bookingID, toHolderID, k)
	}
	o.end(err, "")
	return b, err
}

func (e *Engine) transferBooking(ctx context.Context, bookingID uuid.UUID, to string, k bookingKey) (Booking, error) {
	if err := validateNewHolder("", to); err != nil {
		return Booking{}, err
	}
	type moved struct {
		b    Booking
		from string
	}
	m, err := retryTx(ctx, func() (m moved, err error) {
		err = pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
			m.b, m.from, err = transferTx(ctx, e.q.WithTx(tx), bookingID, to, k)
			return err
		})
		return m, err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Booking{}, notFound("booking %s", bookingID)
	case errors.Is(claimErr(err), errOverLimit):
		return Booking{}, fmt.Errorf("%w: the new holder's booked seats of the show would pass its holder limit (the database counts them)", ErrHolderLimit)
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrIdempotencyKeyReused):
		return Booking{}, err
	case err != nil:
		return Booking{}, e.pgErr(err)
	case m.b.Replayed:
		return m.b, nil
	}
	e.transferredCounts(ctx, m.b.ShowID, m.from, to)
	e.log.InfoContext(ctx, "booking transferred", "show_id", m.b.ShowID, "booking_id", bookingID, "seats", len(m.b.SeatIDs))
	return m.b, nil
}

// transferTx moves a confirmed booking to holder to inside a transaction and writes its
// event. It returns the booking as it is now and its holder before.
func transferTx(ctx context.Context, q *db.Queries, bookingID uuid.UUID, to string, k bookingKey) (Booking, string, error) {
	row, err := q.BookingGetForUpdate(ctx, bookingID)
	if err != nil {
		return Booking{}, "", err
	}
	if answer, again, err := k.replay(ctx, q, bookingID); again || err != nil {
		return answer, "", err
	}
	if row.Status != string(BookingConfirmed) {
		return Booking{}, "", invalid("bookingID", "booking %s is %s, not confirmed", bookingID, row.Status)
	}
	if err := validateNewHolder(row.HolderID, to); err != nil {
		return Booking{}, "", err
	}
	detail, err := q.BookingGet(ctx, bookingID)
	if err != nil {
		return Booking{}, "", err
	}
	if _, err := q.BookingTransfer(ctx, db.BookingTransferParams{ShowID: row.ShowID, BookingID: bookingID, HolderID: to}); err != nil {
		return Booking{}, "", err
	}
	err = q.BookingEventInsert(ctx, db.BookingEventInsertParams{ShowID: row.ShowID,
		BookingID: uuid.NullUUID{UUID: bookingID, Valid: true}, Kind: EventTransferred,
		Generation: row.Generation, SeatIds: append(detail.SeatIds, detail.PlaceKeys...), HolderID: to})
	if err != nil {
		return Booking{}, "", err
	}
	b := bookingFromRow(detail)
	b.HolderID = to
	return b, row.HolderID, k.keep(ctx, q, b)
}

// transferredCounts writes both holders' booked seats of a show to Redis after a
// booking moved between them, when the show has a holder limit (read after the commit;
// the versions keep a late write from undoing a later one).
func (e *Engine) transferredCounts(ctx context.Context, showID, from, to string) {
	sh, err := e.show(ctx, showID)
	if err != nil || !e.limited(ctx, sh) {
		return
	}
	cs, err := e.findCounts(ctx, e.q, map[*show]map[string]bool{sh: {from: true, to: true}})
	if err == nil {
		err = e.writeCounts(ctx, sh, cs[sh.id])
	}
	if err != nil {
		e.log.WarnContext(ctx, "holders' booked seats not written to Redis: their holds count them until a resync", "show_id", sh.id, "error", err)
	}
}
