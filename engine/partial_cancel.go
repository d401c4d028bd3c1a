package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
)

// EventSeatsCancelled is the kind of Event of a partial cancellation (CancelSeats): its
// Booking is the booking as it left it, still confirmed.
const EventSeatsCancelled = "seats_cancelled"

// CancelSeats cancels part of a confirmed booking: seatIDs of its seats and places of its
// places. They are sellable again at once — their claims go (an area's places cancelled
// in part lower its claimed row, migration 00012), and Redis's markers and counts follow
// as on a Cancel — and the rest stays booked, under the same id and generation. The
// seats' fences stay where they are, as on a Cancel. One transaction writes the change
// and an event of kind EventSeatsCancelled. Cancelling everything the booking has is a
// Cancel. A seat or area the booking does not have, more places than it has, nothing
// named, or a booking that is not confirmed is ErrInvalidArgument and changes nothing; an
// unknown booking ErrNotFound. It returns the booking as it is now. When Redis fails
// after the commit the answer is ErrUnavailable, as for Cancel: the change is committed
// and the background repair writes the markers.
func (e *Engine) CancelSeats(ctx context.Context, bookingID uuid.UUID, seatIDs []string, places []Places) (Booking, error) {
	ctx, o := e.begin(ctx, "cancel_seats", "", len(seatIDs))
	k, err := bookingKeyOf(ctx, byHolder, "cancel-seats", bookingID.String(), sortedPrint(seatIDs), placesPrint(places))
	var b Booking
	if err == nil {
		b, err = e.cancelSeats(ctx, bookingID, seatIDs, places, k)
	}
	o.end(err, "")
	return b, err
}

// partCancel is what a partial cancellation's transaction did: the booking after it, the
// tombstones it owes Redis (seats and place keys cancelled or lowered) and the sold
// markers of the place keys of the places left (an area's places cancelled in part), each
// with its marker_outbox row.
type partCancel struct {
	after          Booking
	replayed       bool // after is the answer of the key's first call
	tombs, sold    []string
	tombSeq, soldQ int64
}

// errWholeBooking: a partial cancellation names everything the booking has.
var errWholeBooking = errors.New("the part is the whole booking")

func (e *Engine) cancelSeats(ctx context.Context, bookingID uuid.UUID, seatIDs []string, places []Places, k bookingKey) (Booking, error) {
	if len(seatIDs) == 0 && len(places) == 0 {
		return Booking{}, invalid("CancelSeats", "nothing to cancel: Cancel cancels the whole booking")
	}
	pc, err := retryTx(ctx, func() (pc partCancel, err error) {
		err = pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
			pc, err = cancelPartTx(ctx, e.q.WithTx(tx), bookingID, seatIDs, places, k)
			return err
		})
		return pc, err
	})
	switch {
	case errors.Is(err, errWholeBooking):
		if err := e.cancel(ctx, bookingID, k); err != nil {
			return Booking{}, err
		}
		return e.Booking(ctx, bookingID)
	case errors.Is(err, pgx.ErrNoRows):
		return Booking{}, notFound("booking %s", bookingID)
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrIdempotencyKeyReused):
		return Booking{}, err
	case err != nil:
		return Booking{}, e.pgErr(err)
	case pc.replayed:
		return pc.after, nil
	}
	sh, err := e.show(ctx, pc.after.ShowID)
	if err != nil {
		return Booking{}, err
	}
	e.countsAfterCancel(ctx, sh, pc.after.HolderID)
	// The places left first, then the tombstones: an area never shows free, even for a
	// moment, places the booking still has.
	if len(pc.sold) > 0 {
		err = e.afterCommit(ctx, sh, pc.sold, marker(pc.after.Generation, true), pc.soldQ, 0)
	}
	if err == nil {
		err = e.afterCommit(ctx, sh, pc.tombs, tombstone(pc.after.Generation, pc.after.ID), pc.tombSeq, 0)
	}
	if err != nil {
		return Booking{}, fmt.Errorf("seats cancelled, but they still look sold in Redis: %w", err)
	}
	e.log.InfoContext(ctx, "booking seats cancelled", "show_id", sh.id, "booking_id", bookingID, "seats", len(pc.tombs))
	return pc.after, nil
}

// cancelPartTx cancels part of a booking inside a transaction and records the markers it
// owes Redis and its event.
func cancelPartTx(ctx context.Context, q *db.Queries, bookingID uuid.UUID, seatIDs []string, places []Places, k bookingKey) (partCancel, error) {
	b, err := q.BookingGetForUpdate(ctx, bookingID)
	if err != nil {
		return partCancel{}, err
	}
	if answer, again, err := k.replay(ctx, q, bookingID); again || err != nil {
		return partCancel{after: answer, replayed: again}, err
	}
	if notTheHolders(ctx, b.HolderID) {
		return partCancel{}, pgx.ErrNoRows
	}
	if b.Status != string(BookingConfirmed) {
		return partCancel{}, invalid("bookingID", "booking %s is %s", bookingID, b.Status)
	}
	detail, err := q.BookingGet(ctx, bookingID)
	if err != nil {
		return partCancel{}, err
	}
	all := append(detail.SeatIds, detail.PlaceKeys...)
	counts, err := partCounts("CancelSeats", "booking", all, seatIDs, places)
	if err != nil {
		return partCancel{}, err
	}
	var pc partCancel
	var seats []string
	for i, s := range all {
		k := counts[i]
		a, n, hid, isPlace := parsePlaceKey(s)
		switch {
		case k == 0:
			continue
		case !isPlace:
			seats = append(seats, s)
		case k < n:
			pc.sold = append(pc.sold, a+"~"+strconv.Itoa(n-k)+"~"+hid)
		}
		pc.tombs = append(pc.tombs, s)
	}
	if len(pc.tombs) == len(all) && len(pc.sold) == 0 {
		return partCancel{}, errWholeBooking
	}
	if err := unclaimPart(ctx, q, b.ShowID, bookingID, seats, all, counts); err != nil {
		return partCancel{}, err
	}
	row, err := q.BookingGet(ctx, bookingID)
	if err != nil {
		return partCancel{}, err
	}
	pc.after = bookingFromRow(row)
	err = q.BookingEventInsert(ctx, db.BookingEventInsertParams{ShowID: b.ShowID, BookingID: uuid.NullUUID{UUID: bookingID, Valid: true},
		Kind: EventSeatsCancelled, Generation: b.Generation, SeatIds: append(row.SeatIds, row.PlaceKeys...), HolderID: b.HolderID})
	if err != nil {
		return partCancel{}, err
	}
	if len(pc.sold) > 0 {
		if pc.soldQ, err = q.MarkerOutboxInsert(ctx, db.MarkerOutboxInsertParams{ShowID: b.ShowID, Generation: b.Generation,
			Sold: true, SeatIds: pc.sold}); err != nil {
			return partCancel{}, err
		}
	}
	pc.tombSeq, err = q.MarkerOutboxInsert(ctx, db.MarkerOutboxInsertParams{ShowID: b.ShowID, Generation: b.Generation,
		Sold: false, SeatIds: pc.tombs})
	if err != nil {
		return partCancel{}, err
	}
	return pc, k.keep(ctx, q, pc.after)
}

// unclaimPart drops the claims of a booking's seats (and takes them out of it), and
// lowers or unclaims its places of each area as counts (by all, its script seat
// arguments) say.
func unclaimPart(ctx context.Context, q *db.Queries, showID string, bookingID uuid.UUID, seats, all []string, counts []int) error {
	if len(seats) > 0 {
		n, err := q.SeatClaimsDeleteBySeats(ctx, db.SeatClaimsDeleteBySeatsParams{ShowID: showID, BookingID: bookingID, SeatIds: seats})
		if err == nil && n == int64(len(seats)) {
			n, err = q.BookingSeatsDelete(ctx, db.BookingSeatsDeleteParams{ShowID: showID, BookingID: bookingID, SeatIds: seats})
		}
		if err == nil && n != int64(len(seats)) {
			err = fmt.Errorf("%w: %d of %d seats of booking %s unclaimed", ErrUnavailable, n, len(seats), bookingID)
		}
		if err != nil {
			return err
		}
	}
	for i, s := range all {
		a, n, _, isPlace := parsePlaceKey(s)
		if !isPlace || counts[i] == 0 {
			continue
		}
		var rows int64
		var err error
		if left := n - counts[i]; left > 0 {
			rows, err = q.BookingPlacesLower(ctx, db.BookingPlacesLowerParams{ShowID: showID, BookingID: bookingID, AreaID: a, Places: int32(left)})
		} else {
			rows, err = q.BookingPlacesUnclaim(ctx, db.BookingPlacesUnclaimParams{ShowID: showID, BookingID: bookingID, AreaID: a})
		}
		if err == nil && rows != 1 {
			err = fmt.Errorf("%w: the places of area %s of booking %s did not change", ErrUnavailable, a, bookingID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
