package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// follow reads the feed on e from cursor until ctx ends, as a consumer does that
// retries from its last cursor when the database is away; it returns what it read.
func follow(ctx context.Context, e *Engine, cursor string) (got []Event, _ string) {
	for ctx.Err() == nil {
		events, next, err := e.Events(ctx, cursor, 50)
		if err != nil || len(events) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		got, cursor = append(got, events...), next
	}
	return got, cursor
}

// drain reads the feed on v's engine from cursor to its end: every event committed
// when it is called.
func drain(t *testing.T, v *env, cursor string) []Event {
	t.Helper()
	txid, id, err := parseCursor(cursor)
	if err != nil {
		t.Fatal(err)
	}
	n := v.count(`SELECT count(*) FROM booking_events WHERE kind IN ('confirmed', 'cancelled', 'seats_cancelled', 'exchanged', 'transferred', 'lost',
		'hold_reclaimed', 'hold_transferred')
		AND (txid, event_id) > ($1::bigint::text::xid8, $2)`, txid, id)
	got, _ := waitEvents(t, v.e, cursor, n)
	if len(got) != n {
		t.Fatalf("the feed after %q has %d events, the table %d", cursor, len(got), n)
	}
	return got
}

// feedSettles waits until no event is committed to the feed for half a second: after a
// failover, a COMMIT whose reply was lost is settled, and a lost booking reconciled, in
// the background, and their events may come after the workload has ended.
func feedSettles(t *testing.T, v *env) {
	t.Helper()
	const q = `SELECT count(*) FROM booking_events`
	for n, deadline := v.count(q), time.Now().Add(30*time.Second); ; {
		time.Sleep(500 * time.Millisecond)
		m := v.count(q)
		if m == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed still grows 30 s after the workload: %d events, then %d", n, m)
		}
		n = m
	}
}

// TestEventsAcrossSynchronousFailover: the failover of TestFailoverSynchronous (the
// primary of a synchronous pair killed mid-sale, the standby promoted) while a consumer
// follows the feed and goes on from its cursor on the new primary: it reads every
// event of the new primary's feed once, in order — nothing it read before the
// failover is missing there, nothing after it is skipped — and every acknowledged
// booking has its confirmed event (and its cancelled one when its cancellation was
// acknowledged).
func TestEventsAcrossSynchronousFailover(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, true)
	v := pairEnv(t, pair)
	engines := []*Engine{v.e, v.twin()}
	w := failoverWorkload(t, v, "feedfo", 30)
	d := 3 * time.Second * chaosScale()
	fctx, stop := context.WithCancel(t.Context())
	var got []Event
	var cursor string
	var reading sync.WaitGroup
	reading.Go(func() { got, cursor = follow(fctx, engines[1], "") })
	var fault sync.WaitGroup
	fault.Go(func() {
		time.Sleep(d / 3)
		pair.Primary.Kill()
		pair.Promote()
	})
	w.run(engines, 16, d)
	fault.Wait()
	w.check(t, v.e)
	stop()
	reading.Wait()
	feedSettles(t, v)
	got = append(got, drain(t, v, cursor)...)

	all := drain(t, v, "")
	if len(got) != len(all) {
		t.Errorf("the consumer read %d events, the new primary's feed has %d", len(got), len(all))
	}
	for i := range min(len(got), len(all)) {
		if got[i].ID != all[i].ID {
			t.Fatalf("event %d: the consumer read %s, the feed has %s", i, got[i].ID, all[i].ID)
		}
	}
	want := map[uuid.UUID][]string{}
	w.mu.Lock()
	for id, cancelled := range w.acked {
		want[id] = []string{EventConfirmed}
		if cancelled {
			want[id] = append(want[id], EventCancelled)
		}
	}
	w.mu.Unlock()
	// A booking whose answer was lost (or a cancellation) may be in the feed without
	// being in acked: checkFeed is given every booking the feed has, and acked ones
	// must have exactly their events.
	kinds := map[uuid.UUID][]string{}
	for _, ev := range got {
		if ev.Hold == nil {
			kinds[ev.Booking.ID] = append(kinds[ev.Booking.ID], ev.Kind)
		}
	}
	for id, k := range kinds {
		if _, ok := want[id]; !ok || len(k) > len(want[id]) {
			want[id] = k
		}
	}
	checkFeed(t, got, want)
	t.Logf("%d acknowledged bookings, %d events", len(w.acked), len(got))
}

// TestEventsAcrossAsynchronousFailover: an asynchronous standby is cut off, bookings
// are acknowledged that it never receives, the primary dies and the standby is
// promoted. A consumer that had read the feed up to what the standby has goes on from
// its cursor: it reads a lost event for each booking the failover lost (by its id,
// written by the engine's own reconciliation), then the bookings made since; every
// acknowledged booking has an event — confirmed or lost — and the replicated ones
// their confirmed events.
func TestEventsAcrossAsynchronousFailover(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, false)
	v := pairEnv(t, pair)
	ctx := t.Context()
	seats := seatNames(20)
	v.show("asyncfeed", seats...)
	confirm := func(seat string) Booking {
		t.Helper()
		b, err := v.e.Confirm(ctx, v.hold("asyncfeed", time.Minute, "buyer-"+seat, seat), ConfirmOptions{})
		if err != nil {
			t.Fatalf("confirm %s: %v", seat, err)
		}
		return b
	}
	var kept, lost []Booking
	for _, s := range seats[:5] {
		kept = append(kept, confirm(s))
	}
	pair.WaitReplayed()
	before := drain(t, v, "")
	if len(before) != len(kept) {
		t.Fatalf("before the failover the feed has %d events, want %d", len(before), len(kept))
	}
	cursor := before[len(before)-1].ID
	pair.Link.Partition(true)
	for _, s := range seats[5:10] {
		lost = append(lost, confirm(s))
	}
	pair.Primary.Kill()
	pair.Promote()
	waitFor(t, "the lost bookings reported", 60*time.Second, func() bool {
		return testutil.ToFloat64(v.e.m.lostBookings) == float64(len(lost))
	})
	var again []Booking
	for _, b := range lost {
		again = append(again, confirm(b.SeatIDs[0]))
	}
	rep, err := v.e.Reconcile(ctx, "asyncfeed") // finds nothing more, writes no event twice
	if err != nil || len(rep.Lost) != 0 {
		t.Fatalf("Reconcile: %+v %v", rep, err)
	}

	after := drain(t, v, cursor)
	want := map[uuid.UUID][]string{}
	for _, b := range kept {
		want[b.ID] = []string{EventConfirmed}
	}
	for _, b := range lost {
		want[b.ID] = []string{EventLost}
	}
	for _, b := range again {
		want[b.ID] = []string{EventConfirmed}
	}
	checkFeed(t, append(before, after...), want)
	for _, ev := range after[:len(lost)] {
		if ev.Kind != EventLost {
			t.Fatalf("after the failover the feed starts %+v, want the lost events first", after)
		}
	}
	if n := len(drain(t, v, "")); n != len(kept)+2*len(lost) {
		t.Errorf("the feed has %d events, want %d", n, len(kept)+2*len(lost))
	}
}
