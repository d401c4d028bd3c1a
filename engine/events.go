package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
)

// The event feed. Every change to a booking is a row of booking_events written in the
// transaction that makes the change: the group commit's batch statement
// (BookingCreateMany, or BookingCreate per booking), the cancellation (cancelTx), the
// transfer to another holder (transferTx), and Reconcile for a booking a failover lost
// (before it sets the booking's markers back). Every hold that Reclaim or Transfer gave
// a new token is a row too, relayed from Redis before the call answers (moves.go). Each
// row carries the id of its transaction (migration 00011), and the feed is read in
// (transaction id, event id) order below the oldest transaction of the database still
// running (booking_events_horizon, migration 00016): every
// transaction that could commit a row behind a cursor has ended before the cursor is
// handed out, so a consumer that resumes from its last cursor misses none and sees none
// twice, whatever order concurrent transactions commit in.

// The kinds of Event.
const (
	EventConfirmed = "confirmed" // a booking was made
	EventCancelled = "cancelled" // a booking was cancelled
	EventLost      = "lost"      // a failover lost a confirmed booking (Reconcile); its seats are sellable again
	// EventTransferred: an operator moved a confirmed booking to another holder
	// (TransferBooking); the event's booking names the new one.
	EventTransferred = "transferred"
	// EventHoldReclaimed: Reclaim gave a hold a new token and generation (Event.Hold),
	// one event per hold.
	EventHoldReclaimed = "hold_reclaimed"
	// EventHoldTransferred: Transfer moved a hold to another holder (Event.Hold).
	EventHoldTransferred = "hold_transferred"
)

// BookingLost is the status of the booking of an EventLost: the database no longer has
// it.
const BookingLost BookingStatus = "lost"

// Event is a change to a booking, or a hold's move, as the feed (Engine.Events) and the
// webhooks deliver it.
type Event struct {
	// ID is the event's position in the feed: opaque, totally ordered (as a string too),
	// stable across restarts and a failover to a synchronous standby. Pass the last one
	// read to Events to read on. It is the webhook-id of the event's delivery.
	ID     string
	ShowID string
	// Kind is EventConfirmed, EventCancelled, EventSeatsCancelled, EventExchanged,
	// EventTransferred, EventLost, EventHoldReclaimed or EventHoldTransferred.
	Kind string
	// At is when the event's transaction wrote it (for a hold's move: when the move was
	// relayed to the feed, before its call answered).
	At time.Time
	// Booking is the booking as the event left it. For EventLost, Status is BookingLost,
	// ID is the zero UUID when Redis did not know it, HolderID is empty and ConfirmedAt
	// is zero. For a hold's event (EventHoldReclaimed, EventHoldTransferred) it is the
	// zero Booking.
	Booking Booking
	// Hold is the moved hold of EventHoldReclaimed and EventHoldTransferred (never its
	// token); nil for the other kinds.
	Hold *HoldMove
}

// MaxEventsPage is the most events one Events call returns.
const MaxEventsPage = 1000

// Events returns up to limit events (1 to MaxEventsPage) after the cursor after ("":
// from the first), oldest first, and the cursor to pass next: the last event's ID, or
// after itself when there is nothing new. A malformed cursor is an
// InvalidArgumentError.
func (e *Engine) Events(ctx context.Context, after string, limit int) ([]Event, string, error) {
	if limit < 1 || limit > MaxEventsPage {
		return nil, after, invalid("limit", "must be between 1 and %d, not %d", MaxEventsPage, limit)
	}
	txid, id, err := parseCursor(after)
	if err != nil {
		return nil, after, err
	}
	rows, err := e.q.EventsAfter(ctx, db.EventsAfterParams{AfterTxid: txid, AfterEvent: id, MaxRows: int32(limit)})
	if err != nil {
		return nil, after, e.pgErr(err)
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		events[i] = eventFromRow(r)
	}
	if len(events) > 0 {
		after = events[len(events)-1].ID
	}
	return events, after, nil
}

func eventFromRow(r db.EventsAfterRow) Event {
	if r.Kind == EventHoldReclaimed || r.Kind == EventHoldTransferred {
		return Event{ID: formatCursor(r.Txid, r.EventID), ShowID: r.ShowID, Kind: r.Kind, At: r.At, Hold: holdMoveOf(r)}
	}
	b := Booking{ID: r.BookingID.UUID, ShowID: r.ShowID, SeatIDs: fencedSeats(r.SeatIds), Places: areaTotals(r.SeatIds),
		Generation: r.Generation, HolderID: r.HolderID}
	if r.BookingConfirmedAt != nil {
		b.ConfirmedAt = *r.BookingConfirmedAt
	}
	switch r.Kind {
	case EventConfirmed, EventSeatsCancelled, EventExchanged, EventTransferred:
		b.Status = BookingConfirmed
	case EventCancelled:
		at := r.At
		b.Status, b.CancelledAt = BookingCancelled, &at
	case EventLost:
		b.Status = BookingLost
	}
	return Event{ID: formatCursor(r.Txid, r.EventID), ShowID: r.ShowID, Kind: r.Kind, At: r.At, Booking: b}
}

// areaTotals is the places that the place keys among keys name, one Places per area
// (in area order), as a booking has them; nil for none.
func areaTotals(keys []string) []Places {
	var out []Places
	for _, p := range placesOf(keys) {
		i := slices.IndexFunc(out, func(q Places) bool { return q.AreaID == p.AreaID })
		if i < 0 {
			out = append(out, p)
		} else {
			out[i].Count += p.Count
		}
	}
	slices.SortFunc(out, func(a, b Places) int { return strings.Compare(a.AreaID, b.AreaID) })
	return out
}

// A cursor is the transaction id and the event id, 16 hex digits each: string order is
// feed order.
func formatCursor(txid, id int64) string { return fmt.Sprintf("%016x%016x", txid, id) }

func parseCursor(s string) (txid, id int64, err error) {
	if s == "" {
		return 0, 0, nil
	}
	bad := invalid("after", "%q is not an event id", s)
	if len(s) != 32 {
		return 0, 0, bad
	}
	t, err1 := strconv.ParseUint(s[:16], 16, 63)
	n, err2 := strconv.ParseUint(s[16:], 16, 63)
	if err1 != nil || err2 != nil {
		return 0, 0, bad
	}
	return int64(t), int64(n), nil
}

// recordLost writes the event of each booking a failover lost, in one transaction; one
// already written (an earlier reconciliation's) is not written again.
func (e *Engine) recordLost(ctx context.Context, lost []LostBooking) error {
	if len(lost) == 0 {
		return nil
	}
	err := pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
		q := e.q.WithTx(tx)
		for _, b := range lost {
			id := uuid.NullUUID{UUID: b.BookingID, Valid: b.BookingID != uuid.Nil}
			if _, err := q.EventLostInsert(ctx, db.EventLostInsertParams{ShowID: b.ShowID, BookingID: id,
				Generation: b.Generation, SeatIds: b.keys}); err != nil { // places too: a booking of places alone has no seat
				return err
			}
		}
		return nil
	})
	if err != nil {
		return e.pgErr(err)
	}
	return nil
}

// eventJSON is an Event on the wire: GET /v1/events, holdfast events and the webhooks'
// data. A hold's event has a null booking and a hold; a booking's has no hold.
type eventJSON struct {
	ID      string            `json:"id"`
	Show    string            `json:"show"`
	Kind    string            `json:"kind"`
	At      time.Time         `json:"at"`
	Booking *eventBookingJSON `json:"booking"`
	Hold    *eventHoldJSON    `json:"hold,omitempty"`
}

type eventBookingJSON struct {
	ID          uuid.UUID         `json:"id"`
	Show        string            `json:"show"`
	Seats       []string          `json:"seats"` // [] for a booking of places only
	Places      []eventPlacesJSON `json:"places,omitempty"`
	Generation  int64             `json:"generation"`
	Holder      string            `json:"holder"`
	Status      string            `json:"status"`
	ConfirmedAt *time.Time        `json:"confirmed_at"` // null for a lost booking
	CancelledAt *time.Time        `json:"cancelled_at"`
}

type eventHoldJSON struct {
	Show       string            `json:"show"`
	Seats      []string          `json:"seats"` // [] for a hold of places only
	Places     []eventPlacesJSON `json:"places,omitempty"`
	Generation int64             `json:"generation"`
	Holder     string            `json:"holder"`
	FromHolder string            `json:"from_holder"`
	ExpiresAt  time.Time         `json:"expires_at"`
}

type eventPlacesJSON struct {
	Area  string `json:"area"`
	Count int    `json:"count"`
}

// eventInventory is seats and places as an event's JSON has them: seats [] when none.
func eventInventory(seats []string, places []Places) ([]string, []eventPlacesJSON) {
	if seats == nil {
		seats = []string{}
	}
	var ps []eventPlacesJSON
	for _, p := range places {
		ps = append(ps, eventPlacesJSON{Area: p.AreaID, Count: p.Count})
	}
	return seats, ps
}

// MarshalJSON writes ev as the HTTP API, holdfast events and the webhooks do.
func (ev Event) MarshalJSON() ([]byte, error) {
	j := eventJSON{ID: ev.ID, Show: ev.ShowID, Kind: ev.Kind, At: ev.At.UTC()}
	if m := ev.Hold; m != nil {
		j.Hold = &eventHoldJSON{Show: m.ShowID, Seats: m.SeatIDs, Generation: m.Generation, Holder: m.HolderID,
			FromHolder: m.FromHolderID, ExpiresAt: m.ExpiresAt.UTC()}
		j.Hold.Seats, j.Hold.Places = eventInventory(m.SeatIDs, m.Places)
		return json.Marshal(j)
	}
	b := ev.Booking
	j.Booking = &eventBookingJSON{ID: b.ID, Show: b.ShowID, Generation: b.Generation, Holder: b.HolderID, Status: string(b.Status)}
	j.Booking.Seats, j.Booking.Places = eventInventory(b.SeatIDs, b.Places)
	if !b.ConfirmedAt.IsZero() {
		at := b.ConfirmedAt.UTC()
		j.Booking.ConfirmedAt = &at
	}
	if b.CancelledAt != nil {
		at := b.CancelledAt.UTC()
		j.Booking.CancelledAt = &at
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (ev *Event) UnmarshalJSON(data []byte) error {
	var j eventJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*ev = Event{ID: j.ID, ShowID: j.Show, Kind: j.Kind, At: j.At}
	if h := j.Hold; h != nil {
		ev.Hold = &HoldMove{ShowID: h.Show, SeatIDs: h.Seats, Generation: h.Generation, HolderID: h.Holder,
			FromHolderID: h.FromHolder, ExpiresAt: h.ExpiresAt}
		for _, p := range h.Places {
			ev.Hold.Places = append(ev.Hold.Places, Places{AreaID: p.Area, Count: p.Count})
		}
	}
	if b := j.Booking; b != nil {
		ev.Booking = Booking{ID: b.ID, ShowID: b.Show, SeatIDs: b.Seats, Generation: b.Generation, HolderID: b.Holder,
			Status: BookingStatus(b.Status), CancelledAt: b.CancelledAt}
		if b.ConfirmedAt != nil {
			ev.Booking.ConfirmedAt = *b.ConfirmedAt
		}
	}
	return nil
}
