package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// feedReader reads the feed as a consumer does: from its last cursor, a page at a
// time, and now and then from a new engine (a consumer's restart).
type feedReader struct {
	t      *testing.T
	v      *env
	e      *Engine
	cursor string
	got    []Event
	pages  int
}

// page reads one page; every restartEvery pages it starts over on a new engine from
// the cursor it kept.
func (r *feedReader) page(limit, restartEvery int) int {
	r.t.Helper()
	if r.e == nil || (restartEvery > 0 && r.pages%restartEvery == 0) {
		if r.e != nil && r.e != r.v.e {
			r.e.Close()
		}
		cfg := r.v.cfg
		e, err := New(r.v.pool, r.v.rdb, &cfg)
		if err != nil {
			r.t.Fatal(err)
		}
		r.e = e
		r.t.Cleanup(e.Close)
	}
	r.pages++
	events, next, err := r.e.Events(r.t.Context(), r.cursor, limit)
	if err != nil {
		r.t.Fatalf("Events(%q): %v", r.cursor, err)
	}
	if len(events) > 0 && next != events[len(events)-1].ID || len(events) == 0 && next != r.cursor {
		r.t.Fatalf("Events returned cursor %q after %d events", next, len(events))
	}
	r.got, r.cursor = append(r.got, events...), next
	return len(events)
}

// checkFeed checks that got has every event of want (booking -> kinds in order) once,
// in cursor order, each booking's in its order, and nothing else but hold moves (each
// with its hold and no booking).
func checkFeed(t *testing.T, got []Event, want map[uuid.UUID][]string) {
	t.Helper()
	seen := map[string]bool{}
	kinds := map[uuid.UUID][]string{}
	lastAt := map[string]time.Time{}
	for i, ev := range got {
		if seen[ev.ID] {
			t.Fatalf("event %s arrived twice", ev.ID)
		}
		seen[ev.ID] = true
		if i > 0 && ev.ID <= got[i-1].ID {
			t.Fatalf("event %d (%s) is not after %s", i, ev.ID, got[i-1].ID)
		}
		if ev.At.Before(lastAt[ev.ShowID].Add(-time.Second)) {
			t.Errorf("show %s: event %s at %s long before the show's last, %s", ev.ShowID, ev.ID, ev.At, lastAt[ev.ShowID])
		}
		lastAt[ev.ShowID] = ev.At
		if ev.Kind == EventHoldReclaimed || ev.Kind == EventHoldTransferred {
			if ev.Hold == nil || ev.Hold.ShowID != ev.ShowID || ev.Booking.ID != uuid.Nil || ev.Booking.Status != "" {
				t.Fatalf("event %+v: a hold's event without its hold, or with a booking", ev)
			}
			continue
		}
		if ev.Booking.ShowID != ev.ShowID || string(ev.Booking.Status) != map[string]string{EventConfirmed: "confirmed", EventCancelled: "cancelled", EventLost: "lost",
			EventSeatsCancelled: "confirmed", EventExchanged: "confirmed", EventTransferred: "confirmed"}[ev.Kind] {
			t.Fatalf("event %+v: its booking does not match its kind", ev)
		}
		kinds[ev.Booking.ID] = append(kinds[ev.Booking.ID], ev.Kind)
	}
	for id, w := range want {
		if fmt.Sprint(kinds[id]) != fmt.Sprint(w) {
			t.Errorf("booking %s: events %v, want %v", id, kinds[id], w)
		}
	}
	for id, k := range kinds {
		if _, ok := want[id]; !ok {
			t.Errorf("booking %s: events %v, of no booking made", id, k)
		}
	}
}

// TestEventsMissNoneUnderConcurrentBookings: thousands of bookings, some cancelled,
// committed by many goroutines (batches commit on several connections, out of event id
// order) while a consumer reads the feed a page at a time and restarts on a new engine
// from its last cursor every few pages: every booking's events arrive once, in order,
// and nothing else does.
func TestEventsMissNoneUnderConcurrentBookings(t *testing.T) {
	t.Parallel()
	const shows, seats, workers = 4, 600, 48
	v := newEnv(t, func(c *Config) { c.ConfirmConns = 4 })
	for s := range shows {
		v.show(fmt.Sprintf("feed%d", s), seatNames(seats)...)
	}
	ctx := t.Context()
	type job struct {
		show, seat string
		cancel     bool
	}
	jobs := make(chan job)
	go func() {
		defer close(jobs)
		for i := range seats {
			for s := range shows {
				jobs <- job{fmt.Sprintf("feed%d", s), fmt.Sprintf("S%03d", i), (i+s)%5 == 0}
			}
		}
	}()
	var mu sync.Mutex
	want := map[uuid.UUID][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				h, err := v.e.Hold(ctx, HoldRequest{ShowID: j.show, SeatIDs: []string{j.seat}, TTL: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				want[b.ID] = []string{EventConfirmed}
				mu.Unlock()
				if j.cancel {
					if err := v.e.Cancel(ctx, b.ID); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					want[b.ID] = append(want[b.ID], EventCancelled)
					mu.Unlock()
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	r := &feedReader{t: t, v: v}
	reading := true
	for reading {
		select {
		case <-done:
			reading = false
		default:
		}
		if r.page(37, 9) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, k := range want {
		total += len(k)
	}
	for deadline := time.Now().Add(30 * time.Second); len(r.got) < total && time.Now().Before(deadline); {
		if r.page(MaxEventsPage, 0) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.page(MaxEventsPage, 0) // and nothing more
	checkFeed(t, r.got, want)
	t.Logf("%d bookings, %d events read in %d pages", len(want), len(r.got), r.pages)
}

// TestEventsWaitForAnEarlierTransaction: a transaction that wrote an event and has not
// committed holds the feed back at its position, so an event committed after it by
// another transaction (a later event id) is not handed out before it: a consumer
// reading by event id alone would have read the later one and never seen the earlier.
func TestEventsWaitForAnEarlierTransaction(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("w", seatNames(3)...)
	ctx := t.Context()
	first, err := v.e.Confirm(ctx, v.hold("w", time.Minute, "", "S000"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := v.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(context.Background())
	// The slow transaction's event: a lost booking (Reconcile's), which needs no booking row.
	if _, err := slow.Exec(ctx, `INSERT INTO booking_events (show_id, kind, generation, seat_ids) VALUES ('w', 'lost', 999, '{S002}')`); err != nil {
		t.Fatal(err)
	}
	later, err := v.e.Confirm(ctx, v.hold("w", time.Minute, "", "S001"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var slowID, laterID int64
	if err := slow.QueryRow(ctx, "SELECT max(event_id) FROM booking_events WHERE kind = 'lost'").Scan(&slowID); err != nil {
		t.Fatal(err)
	}
	if err := v.pool.QueryRow(ctx, "SELECT event_id FROM booking_events WHERE booking_id = $1", later.ID).Scan(&laterID); err != nil {
		t.Fatal(err)
	}
	if laterID <= slowID {
		t.Fatalf("the later booking's event id %d is not above the slow transaction's %d", laterID, slowID)
	}
	events, cursor := waitEvents(t, v.e, "", 1)
	if len(events) != 1 || events[0].Booking.ID != first.ID {
		t.Fatalf("while the slow transaction runs the feed has %v, want only the first booking", events)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	events, _ = waitEvents(t, v.e, cursor, 2)
	if len(events) != 2 || events[0].Kind != EventLost || events[0].Booking.Generation != 999 || events[1].Booking.ID != later.ID {
		t.Fatalf("after the slow transaction committed the feed has %+v, want its event then the later booking", events)
	}
}

// TestEventsNotHeldBackByAnotherDatabase: a transaction that has taken its id (as a
// write does) in another database of the same PostgreSQL server, and stays open, does
// not hold this database's feed back: it cannot write this database's events. (One of
// this database does: TestEventsWaitForAnEarlierTransaction.)
func TestEventsNotHeldBackByAnotherDatabase(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	other, _ := testsvc.EmptyDatabase(t)
	open, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(context.Background())
	if _, err := open.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	v.show("n", "S000")
	b, err := v.e.Confirm(ctx, v.hold("n", time.Minute, "", "S000"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := waitEvents(t, v.e, "", 1)
	if len(events) != 1 || events[0].Booking.ID != b.ID {
		t.Fatalf("with a transaction open in another database the feed has %+v, want the booking %s", events, b.ID)
	}
}

// TestEventsBadInput: a malformed cursor or limit is an InvalidArgumentError.
func TestEventsBadInput(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	for _, c := range []struct {
		after string
		limit int
	}{{"", 0}, {"", MaxEventsPage + 1}, {"x", 1}, {"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", 1}, {"-000000000000000000000000000001", 1}} {
		if _, _, err := v.e.Events(t.Context(), c.after, c.limit); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Events(%q, %d): %v, want ErrInvalidArgument", c.after, c.limit, err)
		}
	}
}

// TestEventJSONRoundTrip: an event reads back as it was written, and a cancellation's
// booking keeps its confirmation time.
func TestEventJSONRoundTrip(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("j", seatNames(2)...)
	ctx := t.Context()
	b, err := v.e.Confirm(ctx, v.hold("j", time.Minute, "ann", "S000", "S001"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.e.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	events, _ := waitEvents(t, v.e, "", 2)
	if len(events) != 2 {
		t.Fatalf("Events: %v", events)
	}
	if c := events[1].Booking; !c.ConfirmedAt.Equal(b.ConfirmedAt) || c.CancelledAt == nil || c.HolderID != "ann" {
		t.Fatalf("the cancellation's booking is %+v; confirmed at %s", c, b.ConfirmedAt)
	}
	for _, ev := range events {
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		again, _ := json.Marshal(back)
		if string(again) != string(data) {
			t.Fatalf("round trip:\n%s\n%s", data, again)
		}
	}
}

// waitEvents reads the feed after cursor until it has at least n events, for 30 s at
// most: any test's writing transaction left open on the server holds every feed back
// until it ends.
func waitEvents(t *testing.T, e *Engine, after string, n int) ([]Event, string) {
	t.Helper()
	var got []Event
	for deadline := time.Now().Add(30 * time.Second); len(got) < n && time.Now().Before(deadline); {
		events, next, err := e.Events(t.Context(), after, MaxEventsPage)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		got, after = append(got, events...), next
	}
	return got, after
}

// TestEventsOfABookingWithPlaces: an event of a booking of seats and places says its
// seats as seat ids and its places as places per area, as the booking does — never a
// place key among the seats.
func TestEventsOfABookingWithPlaces(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	show := "evp-" + testsvc.RandomName("s")
	v.areaVenue(show, 10)
	b := v.bookPlaces(show, "ann", 3, "A1")
	if _, err := v.e.CancelSeats(t.Context(), b.ID, nil, []Places{{AreaID: "FLOOR", Count: 1}}); err != nil {
		t.Fatal(err)
	}
	var mine []Event
	for after := ""; ; {
		evs, next, err := v.e.Events(t.Context(), after, MaxEventsPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.ShowID == show {
				mine = append(mine, ev)
			}
		}
		if next == after {
			break
		}
		after = next
	}
	if len(mine) != 2 {
		t.Fatalf("%d events of the show, want 2: %+v", len(mine), mine)
	}
	for i, want := range []int{3, 2} {
		got := mine[i].Booking
		if !slices.Equal(got.SeatIDs, []string{"A1"}) || !slices.Equal(got.Places, []Places{{AreaID: "FLOOR", Count: want}}) {
			t.Errorf("event %d (%s): seats %v, places %v; want [A1] and %d of FLOOR", i, mine[i].Kind, got.SeatIDs, got.Places, want)
		}
	}
}
