package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// holdEvents reads the feed from the start until it has n hold events (30 s at most),
// and returns them.
func holdEvents(t *testing.T, e *Engine, n int) []Event {
	t.Helper()
	var got []Event
	after := ""
	for deadline := time.Now().Add(30 * time.Second); len(got) < n && time.Now().Before(deadline); {
		events, next, err := e.Events(t.Context(), after, MaxEventsPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if ev.Hold != nil {
				got = append(got, ev)
			}
		}
		if len(events) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		after = next
	}
	return got
}

// movesPending is the length of a show's stream of pending hold moves.
func (v *env) movesPending(show string) int64 {
	v.t.Helper()
	n, err := v.rdb.XLen(context.Background(), newKeys(v.cfg.KeyPrefix, show).moves()).Result()
	if err != nil {
		v.t.Fatal(err)
	}
	return n
}

// holdEventRows counts a show's hold events in booking_events.
func (v *env) holdEventRows(show string) int {
	return v.count("SELECT count(*) FROM booking_events WHERE show_id = $1 AND kind IN ('hold_reclaimed', 'hold_transferred')", show)
}

// checkMove fails unless ev is h's move of kind, from holder from: the hold's seats,
// places, new generation, holder and expiry, no booking, and no token anywhere in it.
func checkMove(t *testing.T, ev Event, kind string, h Hold, from string, tokens ...string) {
	t.Helper()
	m := ev.Hold
	if ev.Kind != kind || m == nil || ev.ShowID != h.ShowID || m.ShowID != h.ShowID || m.Generation != h.Generation ||
		m.HolderID != h.HolderID || m.FromHolderID != from || fmt.Sprint(m.SeatIDs) != fmt.Sprint(h.SeatIDs) ||
		fmt.Sprint(m.Places) != fmt.Sprint(h.Places) || m.ExpiresAt.Sub(h.ExpiresAt).Abs() > time.Millisecond {
		t.Fatalf("event %+v (hold %+v), want the %s of %+v from %q", ev, m, kind, h, from)
	}
	if ev.Booking.ID != uuid.Nil || ev.Booking.Status != "" || ev.Booking.SeatIDs != nil {
		t.Fatalf("a hold's event has a booking: %+v", ev.Booking)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range append(tokens, h.Token) {
		if strings.Contains(fmt.Sprintf("%+v %+v %s", ev, *m, data), tok) {
			t.Fatalf("the event names a token: %s", data)
		}
	}
}

// TestTransferAndReclaimLeaveAnEventPerHold: a Transfer leaves one hold_transferred
// event and a Reclaim one hold_reclaimed event per hold it gave a new token, each with
// the hold as the call returned it (seats, places, generation, holder, expiry), the
// holder before for a transfer, no booking, and no token — in the feed, its JSON, the
// webhook's body and the table's rows — written before the call answered, nothing left
// pending in Redis.
func TestTransferAndReclaimLeaveAnEventPerHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.areaVenue("v1", 10)
	old, err := v.holdPlaces("v1", time.Minute, "alice", 3, "A1")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := v.e.Transfer(ctx, old, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if n := v.holdEventRows("v1"); n != 1 {
		t.Fatalf("%d hold events once Transfer answered, want 1", n)
	}
	c1 := v.hold("v1", time.Minute, "carol", "A2")
	v.show("s2", seatNames(4)...)
	c2, c3 := v.hold("s2", time.Minute, "carol", "S000", "S001"), v.hold("s2", time.Minute, "carol", "S003")
	reclaimed, err := v.e.Reclaim(ctx, "s2", "carol")
	if err != nil || len(reclaimed) != 2 {
		t.Fatalf("reclaim: %+v, %v", reclaimed, err)
	}
	if n := v.holdEventRows("s2"); n != 2 {
		t.Fatalf("%d hold events once Reclaim answered, want 2", n)
	}
	if pending := v.movesPending("v1") + v.movesPending("s2"); pending != 0 {
		t.Fatalf("%d moves left pending", pending)
	}

	evs := holdEvents(t, v.e, 3)
	if len(evs) != 3 {
		t.Fatalf("hold events: %+v", evs)
	}
	tokens := []string{old.Token, moved.Token, c1.Token, c2.Token, c3.Token, reclaimed[0].Token, reclaimed[1].Token}
	checkMove(t, evs[0], EventHoldTransferred, moved, "alice", tokens...)
	// The reclaim's events come in the script's order; the call returns the holds by seat.
	byGen := slices.Clone(reclaimed)
	slices.SortFunc(byGen, func(a, b Hold) int { return int(a.Generation - b.Generation) })
	for i, h := range byGen {
		checkMove(t, evs[1+i], EventHoldReclaimed, h, "", tokens...)
	}
	var rows string
	if err := v.pool.QueryRow(ctx, "SELECT string_agg(row_to_json(e)::text, ' ') FROM booking_events e").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		if strings.Contains(rows, tok) {
			t.Fatalf("booking_events has a token: %s", rows)
		}
	}
	body, err := webhookBody(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Type string `json:"type"`
		Data Event  `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type != "hold.transferred" {
		t.Fatalf("webhook body %s: %v", body, err)
	}
	again, _ := json.Marshal(msg.Data)
	if first, _ := json.Marshal(evs[0]); string(again) != string(first) || !strings.Contains(string(first), `"booking":null`) {
		t.Fatalf("round trip:\n%s\n%s", first, again)
	}
	checkMove(t, msg.Data, EventHoldTransferred, moved, "alice", tokens...)
}

// TestTransferredHoldBooksAfterItsMoveInTheFeed: holds transferred and booked at once by
// many goroutines: each booking's confirmed event comes after its hold's move in the
// feed (the new token leaves the engine only once the move's event is committed).
func TestTransferredHoldBooksAfterItsMoveInTheFeed(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	seats := seatNames(24)
	v.show("s1", seats...)
	var wg sync.WaitGroup
	for i, s := range seats {
		wg.Go(func() {
			h, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{s}, TTL: time.Minute, HolderID: fmt.Sprint("a", i)})
			if err == nil {
				h, err = v.e.Transfer(ctx, h, fmt.Sprint("b", i))
			}
			if err == nil {
				_, err = v.e.Confirm(ctx, h, ConfirmOptions{})
			}
			if err != nil {
				t.Errorf("%s: %v", s, err)
			}
		})
	}
	wg.Wait()
	events, _ := waitEvents(t, v.e, "", 2*len(seats))
	moved := map[string]bool{}
	for _, ev := range events {
		switch ev.Kind {
		case EventHoldTransferred:
			moved[ev.Hold.SeatIDs[0]] = true
		case EventConfirmed:
			if !moved[ev.Booking.SeatIDs[0]] {
				t.Fatalf("%s is booked before its hold's move in the feed", ev.Booking.SeatIDs[0])
			}
		}
	}
	if len(moved) != len(seats) || len(events) != 2*len(seats) {
		t.Fatalf("%d moves in %d events, want %d and %d", len(moved), len(events), len(seats), 2*len(seats))
	}
}

// TestKeyedTransferRetriedWritesOneEvent: a keyed Transfer whose relay failed (its
// engine lost PostgreSQL, say) is ErrUnavailable with the hold moved and its event
// pending; the retry under the key gets the hold and writes its event, and a further
// retry gets the same hold and writes none.
func TestKeyedTransferRetriedWritesOneEvent(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := WithIdempotencyKey(t.Context(), "move-1")
	v.show("s1", "A1", "A2")
	h := v.hold("s1", time.Minute, "alice", "A1", "A2")
	var skip atomic.Bool
	skip.Store(true)
	v.e.hooks.beforeRelay = func(context.Context) bool { return !skip.Load() }
	if _, err := v.e.Transfer(ctx, h, "bob"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("transfer without its relay: %v, want ErrUnavailable", err)
	}
	if v.movesPending("s1") != 1 || v.holdEventRows("s1") != 0 {
		t.Fatalf("after the failed relay: %d pending, %d events; want 1 and 0", v.movesPending("s1"), v.holdEventRows("s1"))
	}
	skip.Store(false)
	first, err := v.e.Transfer(ctx, h, "bob")
	if err != nil {
		t.Fatal(err)
	}
	second, err := v.e.Transfer(ctx, h, "bob")
	if err != nil || second.Token != first.Token || second.Generation != first.Generation {
		t.Fatalf("the retries: %+v then %+v, %v", first, second, err)
	}
	if v.movesPending("s1") != 0 || v.holdEventRows("s1") != 1 {
		t.Fatalf("after the retries: %d pending, %d events; want 0 and 1", v.movesPending("s1"), v.holdEventRows("s1"))
	}
	evs := holdEvents(t, v.e, 1)
	if len(evs) != 1 {
		t.Fatalf("hold events %+v", evs)
	}
	checkMove(t, evs[0], EventHoldTransferred, first, "alice", h.Token)
}

// TestRelayWhoseCommitReplyIsLost: the relay's COMMIT reaches PostgreSQL and its reply
// is cut on the way back: the keyed Transfer is ErrUnavailable (the hold moved, its
// event committed unbeknown to it, its entry still in Redis); the retry under the key
// gets the hold, and the relay that runs again writes nothing twice.
func TestRelayWhoseCommitReplyIsLost(t *testing.T) {
	t.Parallel()
	_, pool, proxy := proxiedDatabase(t)
	v := newEnvWith(t, pool, testsvc.Redis(t))
	ctx := WithIdempotencyKey(t.Context(), "move-1")
	v.show("s1", "A1")
	h := v.hold("s1", time.Minute, "alice", "A1")
	armed := cutAtCommit(proxy)
	v.e.hooks.beforeRelay = func(context.Context) bool { armed.Store(true); return true }
	if _, err := v.e.Transfer(ctx, h, "bob"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("transfer whose relay lost its COMMIT's reply: %v, want ErrUnavailable", err)
	}
	v.e.hooks.beforeRelay = nil
	if armed.Load() {
		t.Fatal("the cut did not meet the relay's COMMIT")
	}
	// The client saw its connection close as the COMMIT went on to the server, which
	// may not have run it yet (a busy machine): wait for it to commit.
	waitFor(t, "the relay's event committed by its COMMIT whose reply was lost", 10*time.Second, func() bool {
		return v.holdEventRows("s1") == 1
	})
	moved, err := v.e.Transfer(ctx, h, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if v.holdEventRows("s1") != 1 || v.movesPending("s1") != 0 {
		t.Fatalf("after the retry: %d events, %d pending; want 1 and 0", v.holdEventRows("s1"), v.movesPending("s1"))
	}
	evs := holdEvents(t, v.e, 1)
	if len(evs) != 1 {
		t.Fatalf("hold events %+v", evs)
	}
	checkMove(t, evs[0], EventHoldTransferred, moved, "alice", h.Token)
}

// TestMovesOfADeadEngineAreRelayedOnce: an engine dies between a move's script and its
// relay (a Transfer, then a Reclaim): the moves stay pending in Redis, out of the feed.
// The next move of the show on another engine writes them, in order, before its own;
// and moves left by a dead engine with no call after them are written by the sweep of
// the engines still running. Each is written once.
func TestMovesOfADeadEngineAreRelayedOnce(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", seatNames(6)...)
	v.show("s2", seatNames(2)...)
	dying := v.twin()
	dying.hooks.beforeRelay = func(context.Context) bool { return false }
	h1 := v.hold("s1", time.Minute, "alice", "S000")
	v.hold("s1", time.Minute, "carol", "S001")
	h3 := v.hold("s2", time.Minute, "dave", "S000")
	if _, err := dying.Transfer(ctx, h1, "bob"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("transfer on the dying engine: %v", err)
	}
	if _, err := dying.Reclaim(ctx, "s1", "carol"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("reclaim on the dying engine: %v", err)
	}
	if _, err := dying.Transfer(ctx, h3, "erin"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("transfer on the dying engine: %v", err)
	}
	dying.Close()
	if v.movesPending("s1") != 2 || v.holdEventRows("s1") != 0 {
		t.Fatalf("s1: %d pending, %d events; want 2 and 0", v.movesPending("s1"), v.holdEventRows("s1"))
	}

	// The next move of s1 writes the dead engine's first.
	h4 := v.hold("s1", time.Minute, "frank", "S002")
	if _, err := v.e.Transfer(ctx, h4, "gina"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var gens []int64
	for _, ev := range holdEvents(t, v.e, 3) {
		if ev.ShowID == "s1" {
			kinds, gens = append(kinds, ev.Kind), append(gens, ev.Hold.Generation)
		}
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]string{EventHoldTransferred, EventHoldReclaimed, EventHoldTransferred}) || !slices.IsSorted(gens) {
		t.Fatalf("s1's moves in the feed: %v, generations %v", kinds, gens)
	}
	// s2's move has no call after it: the sweep writes it.
	waitFor(t, "the sweep relays s2's move", 10*moveSweepEvery, func() bool { return v.holdEventRows("s2") == 1 })
	if err := v.e.sweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if v.holdEventRows("s1") != 3 || v.holdEventRows("s2") != 1 || v.movesPending("s1")+v.movesPending("s2") != 0 {
		t.Fatalf("after the sweep: s1 %d events, s2 %d, %d pending", v.holdEventRows("s1"), v.holdEventRows("s2"),
			v.movesPending("s1")+v.movesPending("s2"))
	}
}

// TestConcurrentRelaysWriteEachMoveOnceInOrder: two engines move holds of one show from
// many goroutines (transfers, and reclaims of what they moved) while more goroutines on
// both engines relay the show's moves over and over, and one engine's relays fail half
// the time (its call is ErrUnavailable, the move left for the others). Every move is in
// the feed once, and the show's moves are in the order Redis made them (their
// generations, drawn in the scripts that logged them, increase).
func TestConcurrentRelaysWriteEachMoveOnceInOrder(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 100 })
	ctx := t.Context()
	seats := seatNames(48)
	v.show("s1", seats...)
	engines := []*Engine{v.e, v.twin()}
	var flaky atomic.Int64
	engines[1].hooks.beforeRelay = func(context.Context) bool { return flaky.Add(1)%2 == 0 }
	stop := make(chan struct{})
	var relaying, moving sync.WaitGroup
	for i := range 4 {
		e := engines[i%2]
		relaying.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := e.relayMoves(ctx, "s1", newKeys(v.cfg.KeyPrefix, "s1")); err != nil {
					t.Errorf("relay: %v", err)
					return
				}
			}
		})
	}
	var moves atomic.Int64 // scripts that ran: calls answered or ErrUnavailable
	for i, s := range seats {
		e := engines[i%2]
		moving.Go(func() {
			h, err := e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{s}, TTL: time.Minute, HolderID: fmt.Sprint("a", i)})
			if err != nil {
				t.Errorf("hold %s: %v", s, err)
				return
			}
			h, err = e.Transfer(ctx, h, fmt.Sprint("b", i))
			if err == nil || errors.Is(err, ErrUnavailable) {
				moves.Add(1)
			}
			if err == nil && i%3 == 0 { // the holder's one hold
				hs, err := e.Reclaim(ctx, "s1", h.HolderID)
				if err == nil && len(hs) != 1 {
					t.Errorf("reclaim %s: %+v", s, hs)
				}
				if err == nil || errors.Is(err, ErrUnavailable) {
					moves.Add(1)
				}
			}
		})
	}
	moving.Wait()
	close(stop)
	relaying.Wait()
	if err := v.e.relayMoves(ctx, "s1", newKeys(v.cfg.KeyPrefix, "s1")); err != nil {
		t.Fatal(err)
	}
	if n := v.holdEventRows("s1"); int64(n) != moves.Load() || v.movesPending("s1") != 0 {
		t.Fatalf("%d hold events and %d pending for %d moves", n, v.movesPending("s1"), moves.Load())
	}
	evs := holdEvents(t, v.e, int(moves.Load()))
	var last int64
	for _, ev := range evs {
		if ev.Hold.Generation <= last {
			t.Fatalf("a move of generation %d after one of %d in the feed", ev.Hold.Generation, last)
		}
		last = ev.Hold.Generation
	}
	if int64(len(evs)) != moves.Load() {
		t.Fatalf("the feed has %d hold events, want %d", len(evs), moves.Load())
	}
}

// TestMoveEventsAfterTheCounterWentBack: Redis's generation counter went back (a
// failover to a replica that missed writes): a later move draws a generation an earlier
// move's event has. Both are in the feed, each once: a move is told apart by itself,
// not by its generation.
func TestMoveEventsAfterTheCounterWentBack(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2")
	first, err := v.e.Transfer(ctx, v.hold("s1", time.Minute, "alice", "A1"), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.rdb.Set(ctx, newKeys(v.cfg.KeyPrefix, "s1").gen(), first.Generation-2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	second, err := v.e.Transfer(ctx, v.hold("s1", time.Minute, "carol", "A2"), "dave")
	if err != nil {
		t.Fatal(err)
	}
	if second.Generation != first.Generation {
		t.Fatalf("setup: generations %d and %d", first.Generation, second.Generation)
	}
	evs := holdEvents(t, v.e, 2)
	if len(evs) != 2 {
		t.Fatalf("hold events %+v", evs)
	}
	checkMove(t, evs[0], EventHoldTransferred, first, "alice")
	checkMove(t, evs[1], EventHoldTransferred, second, "carol")
}

// TestDeleteShowKeepsAShowWhoseHoldMoved: a show whose only hold was transferred (its
// event in the feed) and then released is not deleted: the event is its history
// (ErrShowInUse), and the show and its Redis keys stay. A move its engine left pending
// (the hold has expired since) counts too: DeleteShow writes it first.
func TestDeleteShowKeepsAShowWhoseHoldMoved(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	for _, pending := range []bool{false, true} {
		show := fmt.Sprint("s-", pending)
		v.show(show, "A1")
		life := time.Minute // released below
		if pending {
			life = time.Second // left to expire
		}
		h := v.hold(show, life, "alice", "A1")
		if pending {
			v.e.hooks.beforeRelay = func(context.Context) bool { return false }
		}
		moved, err := v.e.Transfer(ctx, h, "bob")
		v.e.hooks.beforeRelay = nil
		switch {
		case pending && errors.Is(err, ErrUnavailable):
			v.waitExpired(h)
		case !pending && err == nil:
			err = v.e.Release(ctx, moved)
		}
		if err != nil && !pending {
			t.Fatal(err)
		}
		if err := v.e.DeleteShow(ctx, show); !errors.Is(err, ErrShowInUse) {
			t.Fatalf("%s: delete: %v, want ErrShowInUse", show, err)
		}
		if _, err := v.e.Hold(ctx, HoldRequest{ShowID: show, SeatIDs: []string{"A1"}}); err != nil {
			t.Fatalf("%s: a hold after the refused delete: %v", show, err)
		}
		if v.holdEventRows(show) != 1 {
			t.Fatalf("%s: %d hold events, want 1", show, v.holdEventRows(show))
		}
	}
}
