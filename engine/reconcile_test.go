package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestFailoverAsynchronousFreesTheHolderLimit: under a holder limit of 2, bookings
// acknowledged while the asynchronous standby was partitioned are lost when it is
// promoted. Their holders' booked counts in Redis were written by the old primary, at
// versions above the new primary's; reconciliation sets them to what the new primary
// says, so each holder can hold and confirm up to the limit again, and no further.
func TestFailoverAsynchronousFreesTheHolderLimit(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, false)
	v := pairEnv(t, pair)
	ctx := t.Context()
	seats := seatNames(10)
	v.show("limit", seats...)
	v.setRules("limit", SaleRules{HolderLimit: 2})
	confirm := func(holder string, seats ...string) Booking {
		t.Helper()
		b, err := v.e.Confirm(ctx, v.hold("limit", time.Minute, holder, seats...), ConfirmOptions{})
		if err != nil {
			t.Fatalf("%s confirms %v: %v", holder, seats, err)
		}
		return b
	}
	confirm("ann", seats[0])
	pair.WaitReplayed()
	pair.Link.Partition(true)
	lostAnn := confirm("ann", seats[1])
	lostBob := confirm("bob", seats[2], seats[3])
	pair.Primary.Kill()
	pair.Promote()
	// The engine reconciles by itself, and Reconcile by hand finds nothing left to do.
	waitFor(t, "the lost bookings reported", 60*time.Second, func() bool {
		return testutil.ToFloat64(v.e.m.lostBookings) == 2
	})
	if got, want := v.holderCounts("limit"); !maps.Equal(got, want) {
		t.Errorf("after the engine's reconciliation, booked counts in Redis %v, the database's %v", got, want)
	}
	if rep, err := v.e.Reconcile(ctx, "limit"); err != nil || rep.Recounted != 0 {
		t.Errorf("Reconcile by hand: %+v %v, want no count to set", rep, err)
	}
	// Each holder gets back what their lost bookings took: ann 1 (1 still booked), bob 2.
	confirm("ann", lostAnn.SeatIDs...)
	confirm("bob", lostBob.SeatIDs...)
	for _, holder := range []string{"ann", "bob"} {
		_, err := v.e.Hold(ctx, HoldRequest{ShowID: "limit", SeatIDs: seats[8:9], TTL: time.Minute, HolderID: holder})
		if !errors.Is(err, ErrHolderLimit) {
			t.Errorf("%s holds past the limit: %v, want ErrHolderLimit", holder, err)
		}
	}
	if got, want := v.holderCounts("limit"); !maps.Equal(got, want) {
		t.Errorf("booked counts in Redis %v, the database's %v", got, want)
	}
	if n := v.doubleBookings(); n != 0 {
		t.Errorf("%d seats booked twice", n)
	}
}

// TestFailoverAsynchronousLosesARulesChange: a show's holder limit is 2 (replayed to the
// asynchronous standby); while the standby is partitioned the limit is lowered to 1 —
// Redis and both engines' copies have it, at a version the standby never received — and
// a booking is made. The standby is promoted: the database's limit is 2 again, at a lower
// version than Redis's and the copies'. Once the engines have reconciled (the lost
// booking reported), the rules in force are the database's, through either engine: a
// holder with one booking holds a second seat, and not a third; Redis's copy and each
// engine's say the database's limit, and a Reconcile by hand finds nothing left to do.
func TestFailoverAsynchronousLosesARulesChange(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, false)
	v := pairEnv(t, pair)
	other := v.twin()
	ctx := t.Context()
	seats := seatNames(10)
	v.show("rl", seats...)
	v.setRules("rl", SaleRules{HolderLimit: 2})
	if _, err := v.e.Confirm(ctx, v.hold("rl", time.Minute, "ann", seats[0]), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	pair.WaitReplayed()
	pair.Link.Partition(true)
	v.setRules("rl", SaleRules{HolderLimit: 1})
	if r, err := other.SaleRules(ctx, "rl"); err != nil || r.HolderLimit != 1 { // its copy too
		t.Fatalf("setup: the other engine's rules %+v %v", r, err)
	}
	if _, err := v.e.Confirm(ctx, v.hold("rl", time.Minute, "bob", seats[1]), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	pair.Primary.Kill()
	pair.Promote()
	waitFor(t, "the lost booking reported", 60*time.Second, func() bool {
		return testutil.ToFloat64(v.e.m.lostBookings)+testutil.ToFloat64(other.m.lostBookings) >= 1
	})
	// Both engines reconcile by themselves; let the second finish too.
	waitFor(t, "both engines' reconciliation", 30*time.Second, func() bool {
		return !v.e.reconciling.Load() && !other.reconciling.Load()
	})
	for i, e := range []*Engine{v.e, other} {
		h, err := e.Hold(ctx, HoldRequest{ShowID: "rl", SeatIDs: seats[2+i : 3+i], TTL: time.Minute, HolderID: "ann"})
		if err != nil {
			t.Fatalf("engine %d: ann, one seat booked, holds one more under the database's limit of 2: %v", i, err)
		}
		if _, err := e.Hold(ctx, HoldRequest{ShowID: "rl", SeatIDs: seats[8:9], TTL: time.Minute, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
			t.Errorf("engine %d: ann holds a third seat: %v, want ErrHolderLimit", i, err)
		}
		if err := e.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := v.rdb.Get(ctx, newKeys(v.cfg.KeyPrefix, "rl").base+"rules").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Each engine's copy comes forward by itself: a copy older than rulesRefresh is read
	// again in the background when it is used (refreshRules).
	for i, e := range []*Engine{v.e, other} {
		sh, err := e.show(ctx, "rl")
		if err != nil {
			t.Fatal(err)
		}
		var st *rulesState
		waitFor(t, fmt.Sprintf("engine %d's copy of the rules with the holder limit 2", i), 30*time.Second, func() bool {
			st, err = e.rulesOf(ctx, sh)
			return err == nil && st.r.HolderLimit == 2
		})
	}
	if r := rulesOfRaw(t, raw); r.limit != 2 {
		t.Errorf("Redis's rules %q, want the holder limit 2", raw)
	}
	if rep, err := v.e.Reconcile(ctx, "rl"); err != nil || rep.RulesRestored {
		t.Errorf("Reconcile by hand: %+v %v, want the rules left as they are", rep, err)
	}
	t.Logf("Redis's rules after the failover: %q", raw)
}

// rulesOfRaw reads the holder limit of the scripts' form of a show's rules (sale_rules
// in internal/lua/common.lua).
func rulesOfRaw(t *testing.T, raw string) (r struct{ epoch, version, limit int64 }) {
	t.Helper()
	if _, err := fmt.Sscanf(raw, "%d %d %d", &r.epoch, &r.version, &r.limit); err != nil {
		t.Fatalf("rules %q: %v", raw, err)
	}
	return r
}

// TestReconcileSetsCountsToTheDatabase: booked counts in Redis ahead of the database —
// at higher versions, as a failover to an asynchronous standby leaves them — for holders
// the database counts and for one it has no booking of, are set to the database's while
// holders keep trying to book: each is refused until Reconcile, then books up to the
// limit and no further. A confirmation made after Reconcile read Redis (its own count
// write lost to the stale version) is counted all the same.
func TestReconcileSetsCountsToTheDatabase(t *testing.T) {
	v := newEnv(t)
	ctx := t.Context()
	const holders, limit = 8, 3
	seats := seatNames(holders*limit + 4)
	v.show("rcc", seats...)
	v.setRules("rcc", SaleRules{HolderLimit: limit})
	own := func(i int) []string { return seats[i*limit : (i+1)*limit] } // holder i's seats
	name := func(i int) string { return "h" + strconv.Itoa(i) }
	for i := range holders + 1 {
		s := seats[holders*limit:]
		if i < holders {
			s = own(i)
		}
		if _, err := v.e.Confirm(ctx, v.hold("rcc", time.Minute, name(i), s[0]), ConfirmOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A hold holder h<holders> took before the failover, confirmed after Reconcile read
	// Redis: its count write is below the stale version.
	late := v.hold("rcc", time.Minute, name(holders), seats[holders*limit+1])
	var once sync.Once
	v.e.hooks.afterRead = func(ctx context.Context, path string) {
		if path == "reconcile" {
			once.Do(func() {
				if _, err := v.e.Confirm(ctx, late, ConfirmOptions{}); err != nil {
					t.Errorf("confirm during Reconcile: %v", err)
				}
			})
		}
	}
	// The failover's leftovers: every holder at the limit, at version 1000, and a holder
	// the database has no booking of.
	hc := newKeys(v.cfg.KeyPrefix, "rcc").base + "hc"
	for i := range holders + 1 {
		if err := v.rdb.HSet(ctx, hc, holderTag(name(i)), "1000:"+strconv.Itoa(limit)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.rdb.HSet(ctx, hc, holderTag("ghost"), "7:2").Err(); err != nil {
		t.Fatal(err)
	}
	var refused, booked [holders]int
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := make(chan struct{})
	for i := range holders {
		wg.Go(func() {
			for _, s := range own(i)[1:] {
				for {
					h, err := v.e.Hold(ctx, HoldRequest{ShowID: "rcc", SeatIDs: []string{s}, TTL: time.Minute, HolderID: name(i)})
					if err == nil {
						_, err = v.e.Confirm(ctx, h, ConfirmOptions{})
					}
					mu.Lock()
					if err == nil {
						booked[i]++
					} else if errors.Is(err, ErrHolderLimit) {
						refused[i]++
					}
					mu.Unlock()
					if err == nil {
						break
					}
					select {
					case <-done:
						t.Errorf("%s: %v", name(i), err)
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		})
	}
	waitFor(t, "every holder refused by the stale counts", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range holders {
			if refused[i] == 0 {
				return false
			}
		}
		return true
	})
	if _, err := v.e.Reconcile(ctx, "rcc"); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		close(done)
		<-finished
	}
	for i := range holders {
		if booked[i] != limit-1 {
			t.Errorf("%s booked %d more seats after Reconcile, want %d", name(i), booked[i], limit-1)
		}
		_, err := v.e.Hold(ctx, HoldRequest{ShowID: "rcc", SeatIDs: seats[holders*limit+3:], TTL: time.Minute, HolderID: name(i)})
		if !errors.Is(err, ErrHolderLimit) {
			t.Errorf("%s holds past the limit: %v, want ErrHolderLimit", name(i), err)
		}
	}
	if got, want := v.holderCounts("rcc"); !maps.Equal(got, want) {
		t.Errorf("booked counts in Redis %v, the database's %v", got, want)
	}
}

// holderCounts returns the booked counts Redis keeps for show (tag -> "<version>:<seats>")
// and the database's, as Redis would say them.
func (v *env) holderCounts(show string) (redis, database map[string]string) {
	v.t.Helper()
	got, err := v.rdb.HGetAll(v.t.Context(), newKeys(v.cfg.KeyPrefix, show).base+"hc").Result()
	if err != nil {
		v.t.Fatal(err)
	}
	return got, v.holderCountsInDB(show)
}

// holderCountsInDB is holder_seats of show, as Redis keeps it.
func (v *env) holderCountsInDB(show string) map[string]string {
	v.t.Helper()
	rows, err := v.pool.Query(v.t.Context(), "SELECT holder_id, version, seats FROM holder_seats WHERE show_id = $1", show)
	if err != nil {
		v.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var holder string
		var version int64
		var seats int32
		if err := rows.Scan(&holder, &version, &seats); err != nil {
			v.t.Fatal(err)
		}
		out[holderTag(holder)] = fmt.Sprintf("%d:%d", version, seats)
	}
	if err := rows.Err(); err != nil {
		v.t.Fatal(err)
	}
	return out
}

// TestRecountComparesAndSets: a booked count is set to the database's only if Redis
// still has the value read before the database was; one written since stays, and bad
// input (a count that is not "<version>:<seats>") changes nothing.
func TestRecountComparesAndSets(t *testing.T) {
	v := newEnv(t)
	ctx := t.Context()
	v.show("cas", seatNames(4)...)
	v.setRules("cas", SaleRules{HolderLimit: 2})
	if _, err := v.e.Confirm(ctx, v.hold("cas", time.Minute, "ann", "S000"), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	sh, err := v.e.show(ctx, "cas")
	if err != nil {
		t.Fatal(err)
	}
	hc, ann, bob := sh.k.base+"hc", holderTag("ann"), holderTag("bob")
	// Written since the read: ann's count, and bob's (the database has none of his).
	if err := v.rdb.HSet(ctx, hc, ann, "9:2", bob, "3:1").Err(); err != nil {
		t.Fatal(err)
	}
	n, err := v.e.recount(ctx, sh, map[string]string{ann: "8:2", bob: "2:1"})
	if err != nil || n != 0 {
		t.Fatalf("recount over values written since the read: %d %v, want 0 set", n, err)
	}
	if got, _ := v.rdb.HGetAll(ctx, hc).Result(); got[ann] != "9:2" || got[bob] != "3:1" {
		t.Errorf("counts %v, want those written since the read kept", got)
	}
	// Read as they are: set to the database's.
	if n, err := v.e.recount(ctx, sh, map[string]string{ann: "9:2", bob: "3:1"}); err != nil || n != 2 {
		t.Fatalf("recount: %d %v, want 2 set", n, err)
	}
	if got, want := v.holderCounts("cas"); !maps.Equal(got, want) {
		t.Errorf("booked counts in Redis %v, the database's %v", got, want)
	}
	bad := lua.Recount.Run(ctx, v.rdb, []string{sh.k.gen()}, ann, "1:1", "5:5", bob, "", "x:1").Err()
	if !errors.Is(v.e.redisErr(bad), ErrInvalidArgument) {
		t.Errorf("a bad count: %v, want ErrInvalidArgument", bad)
	}
	if got, want := v.holderCounts("cas"); !maps.Equal(got, want) {
		t.Errorf("after a bad call, booked counts in Redis %v, the database's %v", got, want)
	}
}

// TestReconcileRecountsTheRoomsSoldSeats: the waiting room's count of sold seats
// (nsold, which admission weighs against the free seats) counts a lost booking's seats
// until Reconcile; then it is counted again from the markers, and equals the seats the
// database has sold.
func TestReconcileRecountsTheRoomsSoldSeats(t *testing.T) {
	v := newEnv(t)
	ctx := t.Context()
	seats := seatNames(6)
	v.show("room", seats...)
	v.setRules("room", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("room", "ann")
	if _, err := v.e.Confirm(ctx, v.hold("room", time.Minute, "ann", seats[0]), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	sh, err := v.e.show(ctx, "room")
	if err != nil {
		t.Fatal(err)
	}
	nsold := sh.k.base + "nsold"
	soldInRedis := func() string {
		t.Helper()
		n, err := v.rdb.Get(ctx, nsold).Result()
		if err != nil {
			t.Fatalf("the room's sold count: %v", err)
		}
		return n
	}
	if n := soldInRedis(); n != "1" {
		t.Fatalf("the room counts %s sold seats, want 1", n)
	}
	// A booking of seats 1 and 2 the database never had, counted as mark.lua counts it.
	for _, s := range seats[1:3] {
		if err := v.rdb.HSet(ctx, sh.soldKeys[s], s, "1000").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.rdb.IncrBy(ctx, nsold, 2).Err(); err != nil {
		t.Fatal(err)
	}
	if rep, err := v.e.Reconcile(ctx, "room"); err != nil || rep.Lowered != 2 {
		t.Fatalf("Reconcile: %+v %v, want 2 markers lowered", rep, err)
	}
	v.admitted("room", "bob") // admission counts the sold seats again
	sold := v.count("SELECT count(*) FROM seat_claims WHERE show_id = 'room'")
	if n := soldInRedis(); n != strconv.Itoa(sold) {
		t.Errorf("the room counts %s sold seats, the database has sold %d", n, sold)
	}
}

// TestReconcileLowersALostBookingsPlaces: a booking of a seat and 2 places of an area
// that an asynchronous failover lost — its markers written to Redis (as the batch does
// after its COMMIT on the old primary), no row of it on the new primary. Reconcile sets
// every marker back to the database's: the seat's and the places' too, so the area's
// places are for sale again.
func TestReconcileLowersALostBookingsPlaces(t *testing.T) {
	v := newEnv(t)
	ctx := t.Context()
	v.areaVenue("lp", 2)
	h, err := v.holdPlaces("lp", time.Minute, "ann", 2, "A1")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := v.e.show(ctx, "lp")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"A1", placeKey("FLOOR", 2, h.Token)}
	marks := []string{marker(h.Generation, true), marker(h.Generation, true)}
	if _, _, err := v.e.writeMarkers(ctx, sh, keys, marks, "-"); err != nil {
		t.Fatal(err)
	}
	if _, _, s := v.areaState("lp", "FLOOR"); s != 2 {
		t.Fatalf("setup: the lost booking's places in Redis: sold %d, want 2", s)
	}
	rep, err := v.e.Reconcile(ctx, "lp")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Lost) != 1 || fmt.Sprint(rep.Lost[0].SeatIDs, rep.Lost[0].Places) != "[A1] [{FLOOR 2}]" {
		t.Errorf("lost bookings %+v, want one of A1 and 2 places of FLOOR", rep.Lost)
	}
	c, held, s := v.areaState("lp", "FLOOR")
	t.Logf("Reconcile: %+v; FLOOR in Redis after it: capacity %d, held %d, sold %d (the database: %d sold)", rep, c, held, s, v.areaSold("lp", "FLOOR"))
	if s != 0 {
		t.Errorf("FLOOR sold %d in Redis after Reconcile, want the database's 0", s)
	}
	if _, err := v.holdPlaces("lp", time.Minute, "bob", 2, "A2"); err != nil {
		t.Errorf("2 places of the lost booking, held again after Reconcile: %v", err)
	}
}
