package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestExchangeLostCommitReplySettled: a lone exchange whose COMMIT reply is lost (the
// proxy forwards COMMIT, then drops the connection). The COMMIT ran, so the exchange is
// in PostgreSQL: the engine's settlement (witness ExchangeAt) must find it and answer
// the booking.
func TestExchangeLostCommitReplySettled(t *testing.T) {
	_, pool, proxy := proxiedDatabase(t)
	armed := cutAtCommit(proxy)
	v := newEnvWith(t, pool, testsvc.Redis(t))
	v.show("lc", "A1", "A2", "B1")
	b, err := v.e.Confirm(t.Context(), v.hold("lc", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("lc", time.Minute, "alice", "B1")
	armed.Store(true)
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{})
	if armed.Load() {
		t.Fatal("the proxy never saw the COMMIT")
	}
	got, gerr := v.e.Booking(t.Context(), b.ID)
	t.Logf("Exchange with the COMMIT reply lost: %+v, err=%v", after, err)
	t.Logf("PostgreSQL now: seats %v generation %d (hold generation %d), err=%v", got.SeatIDs, got.Generation, h.Generation, gerr)
	committed := slices.Equal(got.SeatIDs, []string{"A2", "B1"})
	if committed && err != nil {
		t.Errorf("the exchange committed (booking %v) but Exchange answered %v", got.SeatIDs, err)
	}
	// The hold: Redis gave it back to its holder though PostgreSQL booked it?
	hv := v.holdValue("lc", "B1")
	t.Logf("B1 hold key in Redis after the answer: %q; sold markers %v", hv, v.soldMarkers("lc"))
	if committed {
		if rerr := v.e.Release(t.Context(), h); rerr == nil {
			t.Errorf("the exchanged hold (booked in PostgreSQL) was released: Redis has B1 free while PostgreSQL has it sold")
			if _, herr := v.e.Hold(t.Context(), HoldRequest{ShowID: "lc", SeatIDs: []string{"B1"}, TTL: time.Minute, HolderID: "bob"}); herr == nil {
				t.Errorf("bob was granted a hold of B1, which booking %s has in PostgreSQL", b.ID)
			}
		}
	}
}

// TestExchangeReconcileFindsNothingLost: an exchange of seats of a booking that also has
// places (untouched). Reconcile right after must find nothing lost: the booking exists.
func TestExchangeReconcileFindsNothingLost(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("rc", 10)
	b := v.bookPlaces("rc", "alice", 3, "A1")
	h := v.hold("rc", time.Minute, "alice", "A2")
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after: %+v", after)
	rows, _ := v.pool.Query(t.Context(), "SELECT area_id, places, generation, hold_id, claimed FROM booking_places WHERE show_id='rc'")
	for rows.Next() {
		var a, hid string
		var n int
		var g int64
		var c bool
		_ = rows.Scan(&a, &n, &g, &hid, &c)
		t.Logf("booking_places %s %d gen %d %s claimed %v", a, n, g, hid, c)
	}
	rows.Close()
	sh, _ := v.e.show(t.Context(), "rc")
	m, _ := v.rdb.HGetAll(t.Context(), sh.k.sold(areaBucketBase)).Result()
	t.Logf("Redis FLOOR markers: %v", m)
	rep, err := v.e.Reconcile(t.Context(), "rc")
	if err != nil {
		t.Errorf("Reconcile after an exchange: %v", err)
	}
	if len(rep.Lost) != 0 || rep.Lowered != 0 {
		t.Errorf("Reconcile after an exchange: lost %+v, lowered %d; want nothing (booking %s is confirmed)", rep.Lost, rep.Lowered, b.ID)
	}
	if n := v.count("SELECT count(*)::int FROM booking_events WHERE show_id='rc' AND kind='lost'"); n != 0 {
		t.Errorf("%d 'lost' events in the feed for a booking that exists", n)
	}
	if got, err := v.e.Booking(t.Context(), b.ID); err != nil || got.Status != BookingConfirmed {
		t.Fatalf("booking: %+v %v", got, err)
	}
}

// TestExchangeMergedThenCancelled: a booking of FLOOR 3 takes a hold of FLOOR 2 (merge:
// FLOOR 5), then is cancelled. The cancelled booking (and its event) must say it had FLOOR 5.
func TestExchangeMergedThenCancelled(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("mc", 10)
	b := v.bookPlaces("mc", "alice", 3)
	h, err := v.holdPlaces("mc", time.Minute, "alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	after, err := v.e.Exchange(t.Context(), b.ID, nil, nil, h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after.Places, []Places{{AreaID: "FLOOR", Count: 5}}) {
		t.Fatalf("after exchange: %+v", after.Places)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	got, err := v.e.Booking(t.Context(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Places, []Places{{AreaID: "FLOOR", Count: 5}}) {
		t.Errorf("cancelled booking's Places %+v, want [{FLOOR 5}]", got.Places)
	}
	evs, _ := waitEvents(t, v.e, "", 3)
	for _, ev := range evs {
		t.Logf("event %s seats %v gen %d", ev.Kind, ev.Booking.SeatIDs, ev.Booking.Generation)
	}
	if sold := v.areaSold("mc", "FLOOR"); sold != 0 {
		t.Errorf("FLOOR sold %d", sold)
	}
	v.agreeOnShow("mc", "FLOOR")
}

// TestExchangeMarkersLeftToRepair: the sold markers of an exchange that joins places
// (FLOOR 3 kept + a hold of FLOOR 2, and seat A1 given back for A2) cannot be written
// after the COMMIT (Redis fails: the hook). While the background repair catches up,
// Redis never shows free places or seats PostgreSQL has sold; once it has, the markers
// are PostgreSQL's claims and the area's sold its sold. The hold's own place key, whose
// count is not the booking's, is left to expire (as a partial confirmation's rest is
// when Redis fails after its COMMIT): until then the area undersells, never oversells.
func TestExchangeMarkersLeftToRepair(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MarkerRepairInterval = 50 * time.Millisecond })
	v.areaVenue("mr", 6)
	b := v.bookPlaces("mr", "alice", 3, "A1")
	h, err := v.holdPlaces("mr", time.Minute, "alice", 2, "A2")
	if err != nil {
		t.Fatal(err)
	}
	v.e.hooks.afterCommit = func(_ context.Context) bool { return false }
	if _, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	v.e.hooks.afterCommit = nil
	pgSold := v.areaSold("mr", "FLOOR")
	worst := 0
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		c, hh, s := v.areaState("mr", "FLOOR")
		if free := c - hh - s; free-(c-pgSold) > worst {
			worst = free - (c - pgSold)
		}
		if v.count("SELECT count(*)::int FROM marker_outbox WHERE show_id = 'mr'") == 0 {
			break
		}
	}
	if worst > 0 {
		t.Errorf("FLOOR showed up to %d booked places free in Redis", worst)
	}
	if n := v.count("SELECT count(*)::int FROM marker_outbox WHERE show_id = 'mr'"); n != 0 {
		t.Fatalf("%d marker_outbox rows left after 8 s", n)
	}
	if marks, claims := v.soldMarkers("mr"), v.claimMarks("mr"); !maps.Equal(marks, claims) {
		t.Errorf("Redis's sold markers %v, PostgreSQL's claims %v", marks, claims)
	}
	if _, _, s := v.areaState("mr", "FLOOR"); s != pgSold {
		t.Errorf("Redis's FLOOR sold %d, PostgreSQL's %d", s, pgSold)
	}
	if err := v.e.Release(t.Context(), h); err == nil {
		t.Errorf("Release of the exchanged hold succeeded after the exchange committed")
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err == nil {
		t.Errorf("Confirm of the exchanged hold succeeded")
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "mr", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "bob"}); err != nil {
		t.Errorf("A1 after the repair: %v", err)
	}
}

// TestExchangeHoldOfItsOwnSeat: Redis loses the booking's sold marker of A2
// (the booking keeps A2), alice holds A2 again (Redis lets her), and exchanges A1 for that
// hold. PostgreSQL must refuse (A2 is the booking's already) with ErrSeatsUnavailable, and
// nothing change.
func TestExchangeHoldOfItsOwnSeat(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("ow", "A1", "A2", "B1")
	b, err := v.e.Confirm(t.Context(), v.hold("ow", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.rdb.HDel(t.Context(), v.soldKey("ow", "A2"), "A2").Err(); err != nil {
		t.Fatal(err)
	}
	h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "ow", SeatIDs: []string{"A2", "B1"}, TTL: time.Minute, HolderID: "alice"})
	if err != nil {
		t.Fatalf("hold of A2 after its marker went: %v", err)
	}
	db0 := v.swapSnapshot()
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{})
	t.Logf("exchange for a hold of the booking's own A2: %+v, %v", after, err)
	if !errors.Is(err, ErrSeatsUnavailable) {
		t.Errorf("exchange: %v, want ErrSeatsUnavailable", err)
	}
	// Nothing changed but the refusal's entry in the operators' log (refused_taken).
	if db1 := v.swapSnapshot(); withoutRefusals(db1) != db0 {
		t.Errorf("the refused exchange changed PostgreSQL:\n%s\nwas\n%s", db1, db0)
	}
	if n := v.doubleBookings(); n != 0 {
		t.Errorf("%d double bookings", n)
	}
	t.Logf("A2's hold value after: %q (hold generation %d)", v.holdValue("ow", "A2"), h.Generation)
	if m := v.soldMarkers("ow"); m["A2"] == "" {
		t.Errorf("A2's sold marker still missing in Redis after the refusal (markers %v, claims %v): a refused_taken would have repaired it", m, v.claimMarks("ow"))
	}
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Errorf("the hold after the refusal: %v", err)
	}
}

// TestExchangeUnderConcurrentChanges: per booking, one goroutine exchanges (random free seat and/or
// places for a random part of the booking), another cancels parts of it or exchanges too;
// a third party holds and confirms what is free. Afterwards: no double booking, areas.sold
// = claimed rows, holder_seats = what the bookings have, Redis markers and area counts
// agree with PostgreSQL.
func TestExchangeUnderConcurrentChanges(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, testExchangeUnderConcurrentChanges)
}

func testExchangeUnderConcurrentChanges(t *testing.T, savepoints bool) {
	v := newEnv(t, func(c *Config) { c.MarkerRepairInterval = 100 * time.Millisecond; c.ConfirmSavepoints = savepoints })
	var seats []Seat
	for i := range 24 {
		seats = append(seats, Seat{ID: fmt.Sprintf("S%02d", i), Position: i + 1})
	}
	if err := v.e.CreateShowVenue(t.Context(), "st", Venue{Seats: seats, Areas: []Area{{ID: "FLOOR", Capacity: 16}, {ID: "BALC", Capacity: 8}}}); err != nil {
		t.Fatal(err)
	}
	const n = 4
	ids := make([]uuid.UUID, n)
	for i := range n {
		h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "st", SeatIDs: []string{fmt.Sprintf("S%02d", i)}, TTL: time.Minute,
			HolderID: fmt.Sprint("h", i), Places: []Places{{AreaID: "FLOOR", Count: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = b.ID
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	var stats sync.Map
	count := func(k string) {
		c, _ := stats.LoadOrStore(k, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	}
	// Refusals, and ErrUnavailable: two writers on one booking in tight loops can keep its
	// row locked past Config.LockTimeout for one of them (refused, nothing changed).
	okErr := func(err error) bool {
		return errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrSeatsUnavailable) || errors.Is(err, ErrHoldLost) ||
			errors.Is(err, ErrStaleGeneration) || errors.Is(err, ErrHolderLimit) || errors.Is(err, ErrNotFound) ||
			errors.Is(err, ErrUnavailable)
	}
	exchangeOnce := func(rng *rand.Rand, i int) {
		b, err := v.e.Booking(ctx, ids[i])
		if err != nil || b.Status != BookingConfirmed {
			return
		}
		req := HoldRequest{ShowID: "st", TTL: time.Minute, HolderID: fmt.Sprint("h", i)}
		if rng.IntN(2) == 0 {
			req.SeatIDs = []string{fmt.Sprintf("S%02d", rng.IntN(24))}
		}
		if rng.IntN(2) == 0 || len(req.SeatIDs) == 0 {
			a := []string{"FLOOR", "BALC"}[rng.IntN(2)]
			req.Places = []Places{{AreaID: a, Count: 1 + rng.IntN(2)}}
		}
		h, err := v.e.Hold(ctx, req)
		if err != nil {
			count("hold refused")
			return
		}
		var give []string
		for _, s := range b.SeatIDs {
			if rng.IntN(2) == 0 {
				give = append(give, s)
			}
		}
		var gp []Places
		for _, p := range b.Places {
			if rng.IntN(2) == 0 {
				gp = append(gp, Places{AreaID: p.AreaID, Count: 1 + rng.IntN(p.Count)})
			}
		}
		_, err = v.e.Exchange(ctx, ids[i], give, gp, h, ConfirmOptions{})
		switch {
		case err == nil:
			count("exchanged")
		case okErr(err):
			count("exchange refused: " + strings.SplitN(err.Error(), ":", 3)[1])
			_ = v.e.Release(context.Background(), h)
		default:
			if ctx.Err() == nil {
				t.Errorf("exchange: %v", err)
			}
			_ = v.e.Release(context.Background(), h)
		}
	}
	cancelOnce := func(rng *rand.Rand, i int) {
		b, err := v.e.Booking(ctx, ids[i])
		if err != nil || b.Status != BookingConfirmed {
			return
		}
		units := len(b.SeatIDs)
		for _, p := range b.Places {
			units += p.Count
		}
		if units < 2 {
			return
		}
		var err2 error
		if len(b.SeatIDs) > 0 && rng.IntN(2) == 0 {
			_, err2 = v.e.CancelSeats(ctx, ids[i], b.SeatIDs[:1], nil)
		} else if len(b.Places) > 0 {
			_, err2 = v.e.CancelSeats(ctx, ids[i], nil, []Places{{AreaID: b.Places[0].AreaID, Count: 1}})
		} else {
			return
		}
		switch {
		case err2 == nil:
			count("cancel-seats")
		case okErr(err2):
			count("cancel-seats refused")
		default:
			if ctx.Err() == nil {
				t.Errorf("cancel seats: %v", err2)
			}
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				exchangeOnce(rng, i)
			}
		})
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for ctx.Err() == nil {
				if rng.IntN(3) == 0 {
					cancelOnce(rng, i)
				} else {
					exchangeOnce(rng, i)
				}
			}
		})
	}
	wg.Go(func() { // a third party
		rng := rand.New(rand.NewPCG(99, 3))
		for ctx.Err() == nil {
			req := HoldRequest{ShowID: "st", TTL: time.Minute, HolderID: "other"}
			if rng.IntN(2) == 0 {
				req.SeatIDs = []string{fmt.Sprintf("S%02d", rng.IntN(24))}
			} else {
				req.Places = []Places{{AreaID: []string{"FLOOR", "BALC"}[rng.IntN(2)], Count: 1}}
			}
			h, err := v.e.Hold(ctx, req)
			if err != nil {
				continue
			}
			if rng.IntN(2) == 0 {
				if b, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err == nil {
					count("other confirmed")
					if rng.IntN(2) == 0 {
						_ = v.e.Cancel(ctx, b.ID)
					}
				}
			} else {
				_ = v.e.Release(context.Background(), h)
			}
		}
	})
	wg.Wait()
	stats.Range(func(k, c any) bool { t.Logf("%s: %d", k, c.(*atomic.Int64).Load()); return true })
	waitFor(t, "the outbox drained", 20*time.Second, func() bool {
		return v.count("SELECT count(*)::int FROM marker_outbox WHERE show_id = 'st'") == 0
	})
	if d := v.doubleBookings(); d != 0 {
		t.Errorf("%d double bookings", d)
	}
	for _, a := range []string{"FLOOR", "BALC"} {
		pg := v.areaSold("st", a)
		_, _, s := v.areaState("st", a)
		if s != pg {
			t.Errorf("area %s: Redis sold %d, PostgreSQL %d", a, s, pg)
		}
		if n := v.count("SELECT count(*)::int FROM (SELECT booking_id FROM booking_places WHERE show_id='st' AND area_id=$1 AND claimed GROUP BY booking_id HAVING count(*) > 1) x", a); n != 0 {
			t.Errorf("area %s: %d bookings with two claimed rows", a, n)
		}
	}
	if bad := v.count(`SELECT count(*)::int FROM holder_seats h WHERE show_id='st' AND seats <>
		(SELECT count(*) FROM bookings b JOIN booking_seats s USING (show_id, booking_id) WHERE b.show_id='st' AND b.holder_id=h.holder_id AND b.status='confirmed')
		+ (SELECT COALESCE(sum(p.places),0) FROM bookings b JOIN booking_places p USING (show_id, booking_id) WHERE b.show_id='st' AND b.holder_id=h.holder_id AND b.status='confirmed' AND p.claimed)`); bad != 0 {
		t.Errorf("%d holders whose holder_seats differs from their bookings", bad)
	}
	if bad := v.count(`SELECT count(*)::int FROM bookings b JOIN booking_seats s USING (show_id, booking_id)
		LEFT JOIN seat_claims c ON c.show_id=s.show_id AND c.seat_id=s.seat_id AND c.booking_id=b.booking_id AND c.generation=b.generation
		WHERE b.show_id='st' AND b.status='confirmed' AND c.seat_id IS NULL`); bad != 0 {
		t.Errorf("%d seats of confirmed bookings not claimed at the booking's generation", bad)
	}
	if marks, claims := v.soldMarkers("st"), v.claimMarks("st"); !maps.Equal(marks, claims) {
		t.Errorf("Redis's sold markers %v, PostgreSQL's claims %v", marks, claims)
	}
}

// TestExchangeCountsThenTransferAndCancel: with a holder limit of 5 in Redis and PostgreSQL,
// an exchange's counts in Redis agree afterwards; Transfer/CancelSeats/Cancel after it
// keep holder_seats and areas.sold right.
func TestExchangeCountsThenTransferAndCancel(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("lm", 10)
	if err := v.e.SetSaleRules(t.Context(), "lm", SaleRules{HolderLimit: 6}); err != nil {
		t.Fatal(err)
	}
	h0, err := v.holdPlaces("lm", time.Minute, "alice", 2, "A1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h0, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.holdPlaces("lm", time.Minute, "alice", 2, "A2")
	if err != nil {
		t.Fatal(err)
	}
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}, h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after: seats %v places %v", after.SeatIDs, after.Places)
	if n := v.count("SELECT seats FROM holder_seats WHERE show_id='lm' AND holder_id='alice'"); n != 4 {
		t.Errorf("holder_seats %d, want 4 (A2 + FLOOR 3)", n)
	}
	// Redis: alice may hold 1 more, not 2.
	if _, err := v.holdPlaces("lm", time.Minute, "alice", 3); !errors.Is(err, ErrHolderLimit) {
		t.Errorf("a hold of 3 more at 4 of 6: %v, want ErrHolderLimit", err)
	}
	h1, err := v.holdPlaces("lm", time.Minute, "alice", 2)
	if err != nil {
		t.Errorf("a hold of 2 more at 4 of 6: %v", err)
	} else {
		_ = v.e.Release(t.Context(), h1)
	}
	v.agreeOnShow("lm", "FLOOR")
	if _, err := v.e.TransferBooking(t.Context(), b.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if a, bb := v.count("SELECT COALESCE((SELECT seats FROM holder_seats WHERE show_id='lm' AND holder_id='alice'),0)"),
		v.count("SELECT seats FROM holder_seats WHERE show_id='lm' AND holder_id='bob'"); a != 0 || bb != 4 {
		t.Errorf("after transfer: alice %d bob %d, want 0 and 4", a, bb)
	}
	if _, err := v.e.CancelSeats(t.Context(), b.ID, nil, []Places{{AreaID: "FLOOR", Count: 2}}); err != nil {
		t.Fatal(err)
	}
	if n := v.count("SELECT seats FROM holder_seats WHERE show_id='lm' AND holder_id='bob'"); n != 2 {
		t.Errorf("bob after cancel-seats %d, want 2", n)
	}
	if s := v.areaSold("lm", "FLOOR"); s != 1 {
		t.Errorf("FLOOR sold %d, want 1", s)
	}
	v.agreeOnShow("lm", "FLOOR")
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if n := v.count("SELECT seats FROM holder_seats WHERE show_id='lm' AND holder_id='bob'"); n != 0 {
		t.Errorf("bob after cancel %d, want 0", n)
	}
	if s := v.areaSold("lm", "FLOOR"); s != 0 {
		t.Errorf("FLOOR sold %d, want 0", s)
	}
	v.agreeOnShow("lm", "FLOOR")
	// The first hold (older than the exchange) can never confirm.
	if _, err := v.e.Confirm(t.Context(), h0, ConfirmOptions{}); err == nil {
		t.Errorf("the booking's first hold confirmed again")
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err == nil {
		t.Errorf("the exchanged hold confirmed again")
	}
}

// TestExchangeAsItsHoldExpires: exchanges whose hold expires around the call: each is
// either done (and consistent) or refused with nothing changed.
func TestExchangeAsItsHoldExpires(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("ex", 40)
	b := v.bookPlaces("ex", "alice", 1, "A1")
	var done, refused int
	for i := range 30 {
		ttl := time.Duration(100+i*7) * time.Millisecond
		h, err := v.holdPlaces("ex", ttl, "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl - 5*time.Millisecond + time.Duration(i%5)*3*time.Millisecond)
		db0 := v.swapSnapshot()
		after, err := v.e.Exchange(t.Context(), b.ID, nil, nil, h, ConfirmOptions{})
		switch {
		case err == nil:
			done++
			if after.Generation != h.Generation && after.Generation <= h.Generation {
				t.Errorf("generation %d, hold %d", after.Generation, h.Generation)
			}
		case errors.Is(err, ErrHoldLost):
			refused++
			if db1 := v.swapSnapshot(); withoutRefusals(db1) != withoutRefusals(db0) {
				t.Errorf("refused exchange %d changed PostgreSQL:\n%s\nwas\n%s", i, db1, db0)
			}
		default:
			t.Errorf("exchange %d: %v", i, err)
		}
	}
	t.Logf("%d done, %d refused", done, refused)
	got, _ := v.e.Booking(t.Context(), b.ID)
	if got.Places[0].Count != 1+done {
		t.Errorf("booking has %v, want FLOOR %d", got.Places, 1+done)
	}
	waitFor(t, "outbox", 10*time.Second, func() bool { return v.count("SELECT count(*)::int FROM marker_outbox WHERE show_id='ex'") == 0 })
	if _, _, s := v.areaState("ex", "FLOOR"); s != v.areaSold("ex", "FLOOR") {
		t.Errorf("Redis sold %d, PG %d", s, v.areaSold("ex", "FLOOR"))
	}
}

// TestExchangeOnTheSeatMap: the seat map (watched before the exchange, and built anew
// by a second engine after) shows what PostgreSQL has after an exchange with a merge.
func TestExchangeOnTheSeatMap(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("sm", 10)
	b := v.bookPlaces("sm", "alice", 3, "A1")
	if _, err := v.e.SeatMap(t.Context(), "sm"); err != nil { // the view follows the feed from here
		t.Fatal(err)
	}
	h, err := v.holdPlaces("sm", time.Minute, "alice", 2, "A2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}, h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(name string, e *Engine) {
		var m *SeatMap
		waitFor(t, name, 5*time.Second, func() bool {
			m, err = e.SeatMap(t.Context(), "sm")
			return err == nil && len(m.Areas) == 1 && m.Areas[0].Sold == 4 && m.Areas[0].Held == 0
		})
		st := map[string]SeatStatus{}
		for i, s := range m.Layout {
			st[s.ID] = m.States[i]
		}
		if st["A1"] != SeatFree || st["A2"] != SeatSold || m.Areas[0].Free != 6 {
			t.Errorf("%s: seats %v areas %+v, want A1 free, A2 sold, FLOOR free 6 sold 4", name, st, m.Areas)
		}
	}
	check("watched map", v.e)
	check("new engine's map", v.twin())
}

// TestExchangeThenRedisLoss: Redis loses the show after an exchange; the rebuild
// from PostgreSQL has the exchanged booking sold; a cancellation afterwards frees it all.
func TestExchangeThenRedisLoss(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("rl", 10)
	b := v.bookPlaces("rl", "alice", 3, "A1")
	h, err := v.holdPlaces("rl", time.Minute, "alice", 2, "A2")
	if err != nil {
		t.Fatal(err)
	}
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.forgetShow("rl")
	hb, err := v.holdPlaces("rl", time.Minute, "bob", 1, "A1")
	if err != nil {
		t.Fatalf("hold after the loss: %v", err)
	}
	if _, _, s := v.areaState("rl", "FLOOR"); s != 5 {
		t.Errorf("rebuilt FLOOR sold %d, want 5", s)
	}
	if _, err := v.holdPlaces("rl", time.Minute, "carol", 1, "A2"); !errors.Is(err, ErrSeatsUnavailable) {
		t.Errorf("A2 after the rebuild: %v, want it sold", err)
	}
	_ = v.e.Release(t.Context(), hb)
	if _, err := v.e.CancelSeats(t.Context(), b.ID, nil, []Places{{AreaID: "FLOOR", Count: 1}}); err != nil {
		t.Fatal(err)
	}
	v.agreeOnShow("rl", "FLOOR")
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	v.agreeOnShow("rl", "FLOOR")
	if _, _, s := v.areaState("rl", "FLOOR"); s != 0 {
		t.Errorf("FLOOR sold %d in Redis after the cancel", s)
	}
	if !slices.Equal(after.SeatIDs, []string{"A2"}) {
		t.Errorf("the exchanged booking's seats %v, want A2", after.SeatIDs)
	}
}

// TestExchangeRacesCancel: Exchange and Cancel of the same booking at once, many
// times: in the end everything is free in PostgreSQL and Redis alike.
func TestExchangeRacesCancel(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MarkerRepairInterval = 100 * time.Millisecond })
	v.areaVenue("rx", 10)
	var won, lost int
	for i := range 25 {
		h0, err := v.holdPlaces("rx", time.Minute, "alice", 2, "A1")
		if err != nil {
			t.Fatal(err)
		}
		b, err := v.e.Confirm(t.Context(), h0, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := v.holdPlaces("rx", time.Minute, "alice", 1+i%3, "A2")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var xerr, cerr error
		wg.Go(func() {
			_, xerr = v.e.Exchange(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1 + i%2}}, h, ConfirmOptions{})
		})
		wg.Go(func() {
			time.Sleep(time.Duration(i%5) * time.Millisecond)
			cerr = v.e.Cancel(t.Context(), b.ID)
		})
		wg.Wait()
		if cerr != nil {
			t.Fatalf("cancel %d: %v", i, cerr)
		}
		switch {
		case xerr == nil:
			won++
		case errors.Is(xerr, ErrInvalidArgument):
			lost++
			if err := v.e.Release(t.Context(), h); err != nil {
				t.Errorf("%d: the hold after a refused exchange: %v", i, err)
			}
		default:
			t.Errorf("%d: exchange %v", i, xerr)
		}
		waitFor(t, "outbox", 10*time.Second, func() bool { return v.count("SELECT count(*)::int FROM marker_outbox WHERE show_id='rx'") == 0 })
		if s := v.areaSold("rx", "FLOOR"); s != 0 {
			t.Fatalf("%d: FLOOR sold %d", i, s)
		}
		if _, hh, s := v.areaState("rx", "FLOOR"); s != 0 || hh != 0 {
			t.Fatalf("%d: Redis FLOOR held %d sold %d (exchange err %v)", i, hh, s, xerr)
		}
		if m := v.soldMarkers("rx"); len(m) != 0 {
			t.Fatalf("%d: sold markers %v", i, m)
		}
		if n := v.count("SELECT COALESCE((SELECT seats FROM holder_seats WHERE show_id='rx' AND holder_id='alice'),0)"); n != 0 {
			t.Fatalf("%d: holder_seats %d", i, n)
		}
	}
	t.Logf("exchange first %d, cancel first %d", won, lost)
}

// TestExchangeCancelledBeforeItsMarkers: the interleaving TestExchangeRacesCancel finds
// now and then, driven step by step. The exchange commits, the booking is cancelled,
// and the cancellation's tombstones reach Redis before the exchange's sold markers. The
// hold the exchange spent must not keep its seat and places until its TTL: the
// tombstone drops it, the late sold marker changes nothing, and the hold stays spent.
func TestExchangeCancelledBeforeItsMarkers(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MarkerRepairInterval = time.Hour })
	v.areaVenue("xc", 10)
	h0, err := v.holdPlaces("xc", time.Minute, "alice", 2, "A1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h0, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.holdPlaces("xc", time.Minute, "alice", 3, "A2")
	if err != nil {
		t.Fatal(err)
	}
	// The first marker write after COMMIT is the exchange's: the cancellation runs
	// first, and its own writes go through.
	var cancelled atomic.Bool
	var cerr error
	v.e.hooks.afterCommit = func(ctx context.Context) bool {
		if cancelled.CompareAndSwap(false, true) {
			cerr = v.e.Cancel(ctx, b.ID)
		}
		return true
	}
	x, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 2}}, h, ConfirmOptions{})
	v.e.hooks.afterCommit = nil
	if err != nil || cerr != nil {
		t.Fatalf("exchange %v, cancel %v", err, cerr)
	}
	if !cancelled.Load() {
		t.Fatal("setup: the hook never ran")
	}
	if hv := v.holdValue("xc", "A2"); hv != "" {
		t.Fatalf("the spent hold still holds A2: %q", hv)
	}
	if _, held, sold := v.areaState("xc", "FLOOR"); held != 0 || sold != 0 {
		t.Fatalf("Redis FLOOR held %d sold %d, want 0 and 0", held, sold)
	}
	if m := v.soldMarkers("xc"); len(m) != 0 {
		t.Fatalf("sold markers %v after the cancellation", m)
	}
	// Everything is sellable again at once, to anyone (the holder cap is 10).
	if _, err := v.holdPlaces("xc", time.Minute, "bob", 8, "A1", "A2"); err != nil {
		t.Fatalf("bob's hold of both seats and 8 places: %v", err)
	}
	if _, err := v.holdPlaces("xc", time.Minute, "carol", 2); err != nil {
		t.Fatalf("carol's hold of the last 2 places: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) && !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("Confirm of the exchanged hold: %v, want it refused", err)
	}
	if n := v.count("SELECT count(*)::int FROM bookings WHERE show_id = 'xc'"); n != 1 {
		t.Fatalf("%d bookings, want the one (%s)", n, x.ID)
	}
}
