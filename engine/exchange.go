package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
)

// EventExchanged is the kind of Event of an exchange: its Booking is the booking after
// it, under its new generation.
const EventExchanged = "exchanged"

// Exchange gives back give (seat ids) and givePlaces of a confirmed booking and
// confirms the hold h, of the booking's holder and show, into the same booking: one
// transaction, so at no moment are both or neither sold. The booking keeps its id and
// takes the hold's generation: every seat it keeps is fenced and claimed again at that
// generation, and a late confirmation of any hold older than it is refused as before.
// What it gives back is sellable at once. It takes the hold's offer when the hold has
// one, and keeps its own otherwise. The places it keeps are claimed again at that
// generation too, under the hold, joined with the hold's places of the same area (one
// claim per area).
//
// The hold goes through a batch as a confirmation does (groupcommit.go): checked and
// reserved in Redis, fenced and claimed in PostgreSQL, its sold markers written after
// the COMMIT, then the tombstones of what was given back. A hold older than the
// booking's generation is re-issued above it first (as a confirmation's is when Redis's
// counter fell behind). The whole hold is exchanged: ConfirmOptions.SeatIDs and Places
// are refused (Shrink the hold first). ConfirmOptions.IdempotencyKey (or the key ctx
// carries) makes a retry of the same request get the same answer; another request under
// it is ErrIdempotencyKeyReused.
//
// Refusals change nothing, the booking stays exactly as it was, and the hold is given
// back as it was: ErrInvalidArgument (a seat or area not in the booking, more places
// than it has, a booking that is not confirmed, a hold of another holder or show),
// ErrNotFound (no such booking, or not the AsHolder holder's), and the confirmation's
// own — ErrHoldLost, ErrStaleGeneration, ErrSeatsUnavailable, ErrHolderLimit,
// ErrOverloaded, ErrUnavailable.
func (e *Engine) Exchange(ctx context.Context, bookingID uuid.UUID, give []string, givePlaces []Places, h Hold, opts ConfirmOptions) (Booking, error) {
	ctx, o := e.begin(ctx, "exchange", h.ShowID, len(h.SeatIDs))
	b, err := e.exchange(ctx, bookingID, give, givePlaces, h, opts)
	result := ""
	if err == nil && b.Replayed {
		result = "replay"
	}
	o.end(err, result)
	return b, err
}

// swap is an exchange's request as its confirmation carries it (confirmation.swap):
// what it gives back of which booking, and what that booking was when asked. Its
// transaction checks it all again under the booking's row lock.
type swap struct {
	booking uuid.UUID
	give    []string
	places  []Places
	floor   int64    // the booking's generation when asked: the hold's must be above it
	areas   []string // the booking's areas when asked, locked with the hold's (lockAreas)
	key     bookingKey
}

// swapped is what an exchange's transaction wrote (committed.swap): the booking after
// it, and the tombstones it owes Redis for what it gave back (its outbox row tombSeq),
// at the booking's generation before it (tombGen: no marker of the booking is newer).
type swapped struct {
	after            Booking
	tombs            []string
	tombGen, tombSeq int64
}

// exchange is Exchange, under its operation's trace and metrics: the key looked up, the
// exchange sent, and the key looked up again after a refusal.
func (e *Engine) exchange(ctx context.Context, bookingID uuid.UUID, give []string, givePlaces []Places, h Hold, opts ConfirmOptions) (Booking, error) {
	if len(opts.SeatIDs) > 0 || len(opts.Places) > 0 {
		return Booking{}, invalid("ConfirmOptions", "an exchange takes its whole hold: shrink the hold first")
	}
	key := idempotencyKeyOf(ctx, opts.IdempotencyKey)
	k, err := bookingKeyOf(WithIdempotencyKey(ctx, key), byHolder, "exchange", bookingID.String(), sortedPrint(give),
		placesPrint(givePlaces), h.ShowID, printOf(h.Token))
	if err != nil {
		return Booking{}, err
	}
	if b, ok, err := e.exchangeReplay(ctx, bookingID, k); ok || err != nil {
		return b, err
	}
	if e.hooks.afterRead != nil {
		e.hooks.afterRead(ctx, "exchange")
	}
	b, err := e.exchangeOnce(ctx, bookingID, give, givePlaces, h, k)
	if err != nil {
		// A concurrent or earlier call under the key may have made the exchange since it
		// was looked up (then the booking no longer has what this one gives, or the hold
		// is spent): its answer is this one's.
		if rb, ok, rerr := e.exchangeReplay(ctx, bookingID, k); ok || rerr != nil {
			return rb, rerr
		}
	}
	return b, err
}

// exchangeOnce checks the exchange against its booking and sends it to a batch.
func (e *Engine) exchangeOnce(ctx context.Context, bookingID uuid.UUID, give []string, givePlaces []Places, h Hold, k bookingKey) (Booking, error) {
	c, err := e.newConfirmation(ctx, h, ConfirmOptions{})
	if err != nil {
		return Booking{}, err
	}
	c.key = "" // the exchange's key is the booking's (booking_write_keys), not a new booking's
	if c.swap, err = e.newSwap(ctx, c, bookingID, give, givePlaces, k); err != nil {
		return Booking{}, err
	}
	return e.confirmOf(ctx, c)
}

// exchangeReplay answers a request under a key an earlier exchange of the booking used:
// its answer (ok), ErrIdempotencyKeyReused for another request, or ErrNotFound when
// another holder (AsHolder) used it.
func (e *Engine) exchangeReplay(ctx context.Context, bookingID uuid.UUID, k bookingKey) (Booking, bool, error) {
	if k.key == "" {
		return Booking{}, false, nil
	}
	b, ok, err := k.replay(ctx, e.q, bookingID)
	switch {
	case errors.Is(err, ErrIdempotencyKeyReused):
		return Booking{}, true, err
	case err != nil:
		return Booking{}, true, e.pgErr(err)
	case ok:
		// Acknowledged only once as durable as the server promises (see replay).
		if err := e.durable(ctx, e.pool); err != nil {
			return Booking{}, true, err
		}
	}
	return b, ok, nil
}

// newSwap checks an exchange's request against its booking as it is now and returns it
// as c's swap.
func (e *Engine) newSwap(ctx context.Context, c *confirmation, bookingID uuid.UUID, give []string, places []Places, k bookingKey) (*swap, error) {
	row, err := e.q.BookingGet(ctx, bookingID)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && notTheHolders(ctx, row.HolderID)):
		return nil, notFound("booking %s", bookingID)
	case err != nil:
		return nil, e.pgErr(err)
	}
	if err := swapRefusal(c, bookingID, row.ShowID, row.Status, row.HolderID); err != nil {
		return nil, err
	}
	if _, err := partCounts("give", "booking", append(slices.Clone(row.SeatIds), row.PlaceKeys...), give, places); err != nil {
		return nil, err
	}
	s := &swap{booking: bookingID, give: give, places: places, floor: row.Generation, key: k}
	for _, p := range placesOf(row.PlaceKeys) {
		s.areas = append(s.areas, p.AreaID)
	}
	return s, nil
}

// swapRefusal refuses an exchange of c's hold into booking bookingID (of showID,
// status and holderID) that cannot be: another show's, not confirmed, another holder's.
func swapRefusal(c *confirmation, bookingID uuid.UUID, showID, status, holderID string) error {
	switch {
	case showID != c.sh.id:
		return invalid("Hold.ShowID", "the hold is of show %s, booking %s of show %s", c.sh.id, bookingID, showID)
	case status != string(BookingConfirmed):
		return invalid("bookingID", "booking %s is %s", bookingID, status)
	case holderID != c.h.HolderID:
		return invalid("Hold.HolderID", "the hold is not of booking %s's holder", bookingID)
	}
	return nil
}

// refusal is an exchange's refusal inside its savepoint (inSavepoint rolls back to it
// and answers the exchange with err); any other error is the batch's.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }

// swapPlan is an exchange as its transaction found the booking (under its row lock):
// the booking's row and script seat arguments (all, each with what it gives of it:
// counts), its seats kept and given, the places it keeps of each area (merged: they
// join the hold's), and the tombstones it owes Redis.
type swapPlan struct {
	b          db.BookingLockSkipRow
	all        []string
	counts     []int
	keep, give []string // its seats
	merged     map[string]int
	tombs      []string
}

// exchangeTx writes r's exchange in q's transaction (a savepoint of its batch's): the
// booking gives back what it names and takes r's hold, at r.gen. It sets r.c.sold (the
// booking's script seat arguments after it, each to be marked sold at r.gen) and r.c.rest
// (the hold's place keys that joined the booking's under another count, given back
// after the markers), and returns what it committed.
func (e *Engine) exchangeTx(ctx context.Context, q *db.Queries, r *confirmReq) (committed, error) {
	p, err := planSwap(ctx, q, r)
	if err != nil {
		return committed{}, err
	}
	if err := unbook(ctx, q, r, &p); err != nil {
		return committed{}, err
	}
	rest, err := rebook(ctx, q, r, &p)
	if err != nil {
		return committed{}, err
	}
	return recordSwap(ctx, q, r, &p, rest)
}

// planSwap locks r's booking (a refusal when another transaction holds it: the batch
// puts r back in the queue) and the fences of the seats it keeps, and checks the
// exchange against it.
func planSwap(ctx context.Context, q *db.Queries, r *confirmReq) (swapPlan, error) {
	s, sh := r.c.swap, r.c.sh
	b, err := q.BookingLockSkip(ctx, db.BookingLockSkipParams{ShowID: sh.id, BookingID: s.booking})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return swapPlan{}, &refusal{errFenceBusy}
	case err != nil:
		return swapPlan{}, err
	}
	if _, again, err := s.key.replay(ctx, q, s.booking); again || err != nil {
		return swapPlan{}, &refusal{cmpErr(err, errKeyConflict)}
	}
	if notTheHolders(r.ctx, b.HolderID) {
		return swapPlan{}, &refusal{notFound("booking %s", s.booking)}
	}
	if err := swapRefusal(r.c, s.booking, b.ShowID, b.Status, b.HolderID); err != nil {
		return swapPlan{}, &refusal{err}
	}
	if r.gen <= b.Generation {
		return swapPlan{}, &refusal{errStale}
	}
	detail, err := q.BookingGet(ctx, s.booking)
	if err != nil {
		return swapPlan{}, err
	}
	p := swapPlan{b: b, all: append(slices.Clone(detail.SeatIds), detail.PlaceKeys...), merged: map[string]int{}}
	if p.counts, err = partCounts("give", "booking", p.all, s.give, s.places); err != nil {
		return swapPlan{}, &refusal{err}
	}
	for i, seat := range detail.SeatIds {
		if slices.Contains(r.c.fenced, seat) { // Redis granted a seat the booking has: it lost data
			return swapPlan{}, &refusal{errSeatClaimed}
		}
		if p.counts[i] == 0 {
			p.keep = append(p.keep, seat)
		} else {
			p.give = append(p.give, seat)
		}
	}
	if len(p.keep) > 0 {
		locked, err := q.SeatFencesLockSkip(ctx, db.SeatFencesLockSkipParams{ShowIds: slices.Repeat([]string{sh.id}, len(p.keep)), SeatIds: p.keep})
		if err != nil {
			return swapPlan{}, err
		}
		if len(locked) < len(p.keep) {
			return swapPlan{}, &refusal{errFenceBusy}
		}
	}
	return p, nil
}

// cmpErr is err, or otherwise when err is nil.
func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// unbook takes out of the booking what the exchange changes: the claims of all its seats
// (each names the booking's generation, which changes), the seats it gives, and every
// claim of its places (they are claimed again at the new generation, joined with the
// hold's, less what it gives: rebook). Each seat given and place key unclaimed is a
// tombstone it owes Redis, at the booking's generation before the exchange (every claim
// of a booking is at its generation).
func unbook(ctx context.Context, q *db.Queries, r *confirmReq, p *swapPlan) error {
	sh, id := r.c.sh.id, p.b.BookingID
	seats := append(slices.Clone(p.keep), p.give...)
	if n, err := q.SeatClaimsDeleteBySeats(ctx, db.SeatClaimsDeleteBySeatsParams{ShowID: sh, BookingID: id, SeatIds: seats}); err != nil || n != int64(len(seats)) {
		return cmpErr(err, fmt.Errorf("%w: %d of the %d claims of booking %s found", ErrUnavailable, n, len(seats), id))
	}
	if len(p.give) > 0 {
		if _, err := q.BookingSeatsDelete(ctx, db.BookingSeatsDeleteParams{ShowID: sh, BookingID: id, SeatIds: p.give}); err != nil {
			return err
		}
		p.tombs = append(p.tombs, p.give...)
	}
	for i, s := range p.all {
		a, n, _, isPlace := parsePlaceKey(s)
		if !isPlace {
			continue
		}
		rows, err := q.BookingPlacesUnclaim(ctx, db.BookingPlacesUnclaimParams{ShowID: sh, BookingID: id, AreaID: a})
		if err != nil || rows != 1 {
			return cmpErr(err, fmt.Errorf("%w: the places of area %s of booking %s did not change", ErrUnavailable, a, id))
		}
		p.tombs = append(p.tombs, s)
		p.merged[a] += n - p.counts[i]
	}
	return nil
}

// rebook moves the booking to r's generation and claims, at it, the seats it keeps and
// the hold's seats, and, under the hold's id, its places of each area: the hold's and
// those the booking keeps. It returns the hold's place keys whose area's count is not
// the hold's (their sold key has the sum: the hold's own key is given back).
func rebook(ctx context.Context, q *db.Queries, r *confirmReq, p *swapPlan) ([]string, error) {
	c, sh, id := r.c, r.c.sh.id, p.b.BookingID
	n, err := q.BookingExchange(ctx, db.BookingExchangeParams{ShowID: sh, BookingID: id, Generation: r.gen, Offer: r.offer})
	if err != nil || n != 1 {
		return nil, cmpErr(err, &refusal{errStale})
	}
	seats := append(slices.Clone(c.fenced), p.keep...)
	adv, err := q.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: sh, SeatIds: seats, Generation: r.gen})
	if err != nil {
		return nil, err
	}
	if len(adv) != len(seats) {
		return nil, &refusal{errStale}
	}
	if len(c.fenced) > 0 {
		if err := q.BookingSeatsAdd(ctx, db.BookingSeatsAddParams{ShowID: sh, BookingID: id, SeatIds: c.fenced}); err != nil {
			return nil, err
		}
	}
	if len(seats) > 0 {
		if _, err := q.SeatClaimsAdd(ctx, db.SeatClaimsAddParams{ShowID: sh, BookingID: id, Generation: r.gen, SeatIds: seats}); err != nil {
			return nil, err
		}
	}
	if _, err := q.HolderSeatsAdd(ctx, db.HolderSeatsAddParams{ShowID: sh, HolderID: p.b.HolderID, Seats: int32(len(c.fenced))}); err != nil {
		return nil, err
	}
	return claimPlaces(ctx, q, r, p)
}

// claimPlaces claims, under r's hold's id and at r.gen, the places of each area the
// hold has or the booking keeps, in area order, and returns the hold's place keys whose
// area's count is not the hold's.
func claimPlaces(ctx context.Context, q *db.Queries, r *confirmReq, p *swapPlan) ([]string, error) {
	c := r.c
	held := map[string]int{}
	for _, pl := range c.places {
		held[pl.AreaID] = pl.Count
	}
	var rest []string
	for _, a := range slices.Sorted(maps.Keys(mapUnion(held, p.merged))) {
		count := held[a] + p.merged[a]
		if count == 0 {
			continue
		}
		err := q.BookingPlacesClaim(ctx, db.BookingPlacesClaimParams{ShowID: c.sh.id, BookingID: p.b.BookingID, AreaID: a,
			Places: int32(count), Generation: r.gen, HoldID: placeHoldID(c.h.Token)})
		if err != nil {
			return nil, err
		}
		if held[a] > 0 && count != held[a] {
			rest = append(rest, placeKey(a, held[a], c.h.Token))
		}
	}
	return rest, nil
}

// mapUnion is a map with the keys of both (its values are not used).
func mapUnion(a, b map[string]int) map[string]int {
	u := maps.Clone(a)
	maps.Copy(u, b)
	return u
}

// recordSwap writes the exchange's event, the markers it owes Redis (its booking's, sold
// at r.gen, and its tombstones) and its key, and sets r.c.sold and r.c.rest.
func recordSwap(ctx context.Context, q *db.Queries, r *confirmReq, p *swapPlan, rest []string) (committed, error) {
	sh, b := r.c.sh.id, p.b
	row, err := q.BookingGet(ctx, b.BookingID)
	if err != nil {
		return committed{}, err
	}
	after := bookingFromRow(row)
	sold := append(slices.Clone(row.SeatIds), row.PlaceKeys...)
	err = q.BookingEventInsert(ctx, db.BookingEventInsertParams{ShowID: sh, BookingID: uuid.NullUUID{UUID: b.BookingID, Valid: true},
		Kind: EventExchanged, Generation: r.gen, SeatIds: sold, HolderID: b.HolderID})
	if err != nil {
		return committed{}, err
	}
	res := committed{at: row.ConfirmedAt, swap: &swapped{after: after, tombs: p.tombs, tombGen: b.Generation}}
	if res.seq, err = q.MarkerOutboxInsert(ctx, db.MarkerOutboxInsertParams{ShowID: sh, Generation: r.gen, Sold: true, SeatIds: sold}); err != nil {
		return committed{}, err
	}
	if len(p.tombs) > 0 {
		res.swap.tombSeq, err = q.MarkerOutboxInsert(ctx, db.MarkerOutboxInsertParams{ShowID: sh, Generation: b.Generation, Sold: false, SeatIds: p.tombs})
		if err != nil {
			return committed{}, err
		}
	}
	if err := r.c.swap.key.keep(ctx, q, after); err != nil {
		return committed{}, err
	}
	r.c.sold, r.c.rest = sold, rest
	return res, nil
}
