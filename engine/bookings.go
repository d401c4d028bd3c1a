package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/holdfast/holdfast/db"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Booking returns a booking by id, or ErrNotFound.
func (e *Engine) Booking(ctx context.Context, bookingID uuid.UUID) (Booking, error) {
	row, err := e.q.BookingGet(ctx, bookingID)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Booking{}, notFound("booking %s", bookingID)
		}
		return Booking{}, e.pgErr(err)
	}
	return bookingFromRow(row), nil
}

func bookingFromRow(r db.BookingDetail) Booking {
	return Booking{ID: r.BookingID, ShowID: r.ShowID, SeatIDs: r.SeatIds, Places: placesOf(r.PlaceKeys), Generation: r.Generation,
		HolderID: r.HolderID, Status: BookingStatus(r.Status), ConfirmedAt: r.ConfirmedAt, CancelledAt: r.CancelledAt,
		Offer: r.Offer.String}
}

type asHolderCtx struct{}

// AsHolder returns a context that makes the write it is passed to on behalf of
// holderID: Cancel and CancelSeats then find, under the booking's row lock, only a
// booking that is that holder's; another's is ErrNotFound and changes nothing (a retry
// under the idempotency key of a write the holder made gets its answer all the same). A
// caller that checked the booking was the holder's before the call (the HTTP API does)
// is not outrun by a TransferBooking that commits in between.
func AsHolder(ctx context.Context, holderID string) context.Context {
	return context.WithValue(ctx, asHolderCtx{}, holderID)
}

// notTheHolders reports whether ctx makes its write on behalf of a holder (AsHolder)
// other than holderID, the booking's.
func notTheHolders(ctx context.Context, holderID string) bool {
	holder, ok := ctx.Value(asHolderCtx{}).(string)
	return ok && holder != holderID
}

// Cancel cancels a confirmed booking: its claims go, the booking is marked cancelled and
// the event logged, then the seats' sold markers become tombstones (free). The seats'
// fences stay, so the hold that made the booking can never confirm again. When Redis
// fails after the commit the answer is ErrUnavailable (the seats still look sold for
// now); the marker write is recorded with the cancellation, and the background repair
// makes it once Redis takes writes again. Cancelling a cancelled booking changes
// nothing in PostgreSQL and writes its tombstones again, so a retry finishes the job.
func (e *Engine) Cancel(ctx context.Context, bookingID uuid.UUID) error {
	ctx, o := e.begin(ctx, "cancel", "", 0)
	k, err := bookingKeyOf(ctx, byHolder, "cancel", bookingID.String())
	if err == nil {
		err = e.cancel(ctx, bookingID, k)
	}
	o.end(err, "")
	return err
}

// cancellation is what a cancel transaction did.
type cancellation struct {
	showID string
	seats  []string
	gen    int64
	seq    int64 // its marker_outbox row; 0 when the booking was cancelled already
	holder string
}

// cancel cancels a booking under k (a retry of its request is a cancel of a cancelled
// booking).
func (e *Engine) cancel(ctx context.Context, bookingID uuid.UUID, k bookingKey) error {
	c, err := retryTx(ctx, func() (c cancellation, err error) {
		err = pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
			c, err = cancelTx(ctx, e.q.WithTx(tx), bookingID, k)
			return err
		})
		return c, err
	})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("booking %s", bookingID)
		}
		if errors.Is(err, ErrIdempotencyKeyReused) {
			return err
		}
		return e.pgErr(err)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("holdfast.show", c.showID), attribute.Int("holdfast.seats", len(c.seats)))
	}
	sh, err := e.show(ctx, c.showID)
	if err != nil {
		return err
	}
	if c.seq != 0 {
		e.countsAfterCancel(ctx, sh, c.holder)
	}
	if c.seq != 0 {
		err = e.afterCommit(ctx, sh, c.seats, tombstone(c.gen, bookingID), c.seq, 0)
	} else {
		err = e.markBooking(ctx, sh, c.seats, tombstone(c.gen, bookingID))
	}
	if err != nil {
		// The cancellation is committed, but its seats still look sold in Redis: new
		// holds on them are refused until the background repair (or a retried Cancel)
		// writes the tombstones. That is not success.
		return fmt.Errorf("booking cancelled, but its seats still look sold in Redis: %w", err)
	}
	e.log.InfoContext(ctx, "booking cancelled", "show_id", c.showID, "booking_id", bookingID, "seats", len(c.seats))
	return nil
}

// countsAfterCancel writes to Redis the booked seats of holder once a cancellation of
// theirs has committed, when the show has a holder limit: the seats come back under it.
// Read after the commit; the version keeps a late write from undoing a later one.
func (e *Engine) countsAfterCancel(ctx context.Context, sh *show, holder string) {
	if holder == "" || !e.limited(ctx, sh) {
		return
	}
	cs, err := e.findCounts(ctx, e.q, map[*show]map[string]bool{sh: {holder: true}})
	if err == nil {
		err = e.writeCounts(ctx, sh, cs[sh.id])
	}
	if err != nil {
		e.log.WarnContext(ctx, "holder's booked seats not written to Redis: its holds count them until a resync", "show_id", sh.id, "error", err)
	}
}

// cancelTx cancels a booking inside a transaction (nothing to do when it is cancelled
// already, or when k answered this request before), keeps k, and records the
// tombstones it owes Redis.
func cancelTx(ctx context.Context, q *db.Queries, bookingID uuid.UUID, k bookingKey) (cancellation, error) {
	b, err := q.BookingGetForUpdate(ctx, bookingID)
	if err != nil {
		return cancellation{}, err
	}
	_, again, err := k.replay(ctx, q, bookingID)
	if err != nil {
		return cancellation{}, err
	}
	if !again && notTheHolders(ctx, b.HolderID) {
		return cancellation{}, pgx.ErrNoRows
	}
	detail, err := q.BookingGet(ctx, bookingID)
	if err != nil {
		return cancellation{}, err
	}
	// The tombstones are the seats' and the places' (their place keys, after the seats).
	marks := append(detail.SeatIds, detail.PlaceKeys...)
	c := cancellation{showID: b.ShowID, seats: marks, gen: b.Generation, holder: b.HolderID}
	if again {
		return c, nil
	}
	if b.Status != string(BookingConfirmed) {
		return c, keepCancelled(ctx, q, bookingID, k)
	}
	if _, err := q.SeatClaimsDeleteByBooking(ctx, db.SeatClaimsDeleteByBookingParams{ShowID: b.ShowID, BookingID: bookingID}); err != nil {
		return c, err
	}
	if _, err := q.BookingCancel(ctx, db.BookingCancelParams{ShowID: b.ShowID, BookingID: bookingID}); err != nil {
		return c, err
	}
	err = q.BookingEventInsert(ctx, db.BookingEventInsertParams{ShowID: b.ShowID,
		BookingID: uuid.NullUUID{UUID: bookingID, Valid: true}, Kind: "cancelled",
		Generation: b.Generation, SeatIds: marks, HolderID: b.HolderID})
	if err != nil {
		return c, err
	}
	c.seq, err = q.MarkerOutboxInsert(ctx, db.MarkerOutboxInsertParams{ShowID: b.ShowID, Generation: b.Generation,
		Sold: false, SeatIds: marks})
	if err != nil {
		return c, err
	}
	return c, keepCancelled(ctx, q, bookingID, k)
}

// keepCancelled keeps k with the cancelled booking as its answer.
func keepCancelled(ctx context.Context, q *db.Queries, bookingID uuid.UUID, k bookingKey) error {
	if k.key == "" {
		return nil
	}
	row, err := q.BookingGet(ctx, bookingID)
	if err != nil {
		return err
	}
	return k.keep(ctx, q, bookingFromRow(row))
}
