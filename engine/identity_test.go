package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// admittedOn joins holder to show's waiting room through e and waits until admitted.
func admittedOn(t *testing.T, e *Engine, show, holder string) Ticket {
	t.Helper()
	if _, err := e.Join(t.Context(), show, holder); err != nil {
		t.Fatalf("Join(%s, %s): %v", show, holder, err)
	}
	var tk Ticket
	waitFor(t, holder+" admitted", 15*time.Second, func() bool {
		var err error
		if tk, err = e.Ticket(t.Context(), show, holder); err != nil {
			t.Fatalf("Ticket(%s, %s): %v", show, holder, err)
		}
		return tk.Admitted
	})
	return tk
}

// TestShowCreatedAgainIsANewShow: a show deleted and created again under its id (other
// seats, a waiting room) through engine B is a new show to engine A, which had the old
// one cached with rules that look newer (version 2 against the new show's 1): A refuses
// the old seats, holds the new ones only for holders the new room admitted, admits by
// the new room's rules, and leaves Redis's copy of the new rules alone, so that B keeps
// them too.
func TestShowCreatedAgainIsANewShow(t *testing.T) {
	t.Parallel()
	open := &WaitingRoom{OpensAt: time.Now().Add(-time.Minute)}
	for _, c := range []struct {
		name string
		old  []SaleRules // the old show's rules, in order: version 2 is the last
	}{
		{"old rules without a room", []SaleRules{{Queue: open}, {}}},
		{"old rules with a room", []SaleRules{{HolderLimit: 4}, {HolderLimit: 4, Queue: open}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// An engine that sees the show deleted (A's waiting-room loop may) remembers
			// the id as unknown for UnknownShowTTL, refusing it meanwhile: kept short, so
			// that the checks meet the new show whatever A saw.
			showCreatedAgain(t, newEnv(t, shortUnknown), c.old)
		})
	}
}

// shortUnknown makes an engine remember unknown show ids for a millisecond.
func shortUnknown(c *Config) { c.UnknownShowTTL = time.Millisecond }

// showCreatedAgain is TestShowCreatedAgainIsANewShow on v, the old show's rules old.
func showCreatedAgain(t *testing.T, v *env, old []SaleRules) {
	ctx := t.Context()
	a, b := v.e, v.twin()
	v.show("s", "O1", "O2", "O3")
	for _, r := range old {
		v.setRules("s", r)
	}
	if _, err := b.Layout(ctx, "s"); err != nil { // B knows the old show too
		t.Fatal(err)
	}
	if _, err := a.Seats(ctx, "s"); err != nil { // A has a seat map of the old show
		t.Fatal(err)
	}
	if err := b.DeleteShow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateShow(ctx, "s", []string{"N1", "N2", "N3"}); err != nil {
		t.Fatal(err)
	}
	room := &WaitingRoom{OpensAt: time.Now().Add(-time.Second), AdmissionTTL: time.Minute}
	if err := b.SetSaleRules(ctx, "s", SaleRules{Queue: room}); err != nil {
		t.Fatal(err)
	}
	rulesKey := newKeys(v.cfg.KeyPrefix, "s").base + "rules"
	newRules := v.rdb.Get(ctx, rulesKey).Val()
	admittedOn(t, b, "s", "ann")

	if _, err := a.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"O1"}, HolderID: "ann"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("engine A, a seat of the deleted show: %v, want ErrNotFound", err)
	}
	if _, err := a.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"N2"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Errorf("engine A, a holder who never joined the new room: %v, want ErrNotAdmitted", err)
	}
	if _, err := a.HoldBest(ctx, BestRequest{ShowID: "s", Count: 1, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Errorf("engine A, best available for a holder who never joined: %v, want ErrNotAdmitted", err)
	}
	if _, err := a.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"N1"}, HolderID: "ann", TTL: time.Minute}); err != nil {
		t.Errorf("engine A, an admitted holder and a seat of the new show: %v", err)
	}
	if tk, err := a.Join(ctx, "s", "dave"); err != nil {
		t.Errorf("engine A, join the new room: %v", err)
	} else if tk = admittedOn(t, a, "s", "dave"); time.Until(tk.AdmittedUntil) > 2*time.Minute {
		t.Errorf("engine A admits until %v: the old room's admission (10 minutes), not the new one's (1 minute)", tk.AdmittedUntil)
	}
	if got := v.rdb.Get(ctx, rulesKey).Val(); got != newRules {
		t.Errorf("Redis's rules of the new show are %q after engine A's calls; B wrote %q", got, newRules)
	}
	if _, err := b.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"N3"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Errorf("engine B, a holder who never joined: %v, want ErrNotAdmitted", err)
	}
	l, err := a.Layout(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range l {
		ids = append(ids, s.ID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"N1", "N2", "N3"}) {
		t.Errorf("engine A's layout of the show: %v, want the new show's seats", ids)
	}
	m, err := a.Seats(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]SeatStatus{}
	for _, st := range m {
		held[st.SeatID] = st.Status
	}
	if len(held) != 3 || held["N1"] != SeatHeld {
		t.Errorf("engine A's seat map of the show: %v, want the new show's seats, N1 held", held)
	}
}

// TestDeleteShowRefusesHoldsFromItsCheck: a hold asked for while DeleteShow runs, once it
// found no live hold, is refused (the show is closed in Redis before the check): no
// acknowledged hold is left on a deleted show. A DeleteShow refused because of a live
// hold leaves the show open.
func TestDeleteShowRefusesHoldsFromItsCheck(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	other := v.twin()
	v.show("kept", "A1", "A2")
	held := v.hold("kept", time.Minute, "ann", "A1")
	if err := v.e.DeleteShow(ctx, "kept"); !errors.Is(err, ErrShowInUse) {
		t.Fatalf("delete with a live hold: %v, want ErrShowInUse", err)
	}
	if _, err := other.Hold(ctx, HoldRequest{ShowID: "kept", SeatIDs: []string{"A2"}, HolderID: "bob"}); err != nil {
		t.Fatalf("hold after a refused delete: %v", err)
	}
	if _, err := v.e.Confirm(ctx, held, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm the hold that kept the show: %v", err)
	}

	v.show("del", "A1", "A2")
	if _, err := other.Layout(ctx, "del"); err != nil {
		t.Fatal(err)
	}
	var h Hold
	var herr error
	v.e.hooks.afterHeldCheck = func(ctx context.Context) {
		h, herr = other.Hold(ctx, HoldRequest{ShowID: "del", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "ann"})
	}
	err := v.e.DeleteShow(ctx, "del")
	v.e.hooks.afterHeldCheck = nil
	switch {
	case err == nil && herr == nil:
		t.Fatalf("DeleteShow deleted the show after a hold was granted on it during the delete (generation %d)", h.Generation)
	case err != nil:
		t.Fatalf("DeleteShow: %v (the hold during it: %v)", err, herr)
	case !errors.Is(herr, ErrNotFound):
		t.Fatalf("a hold during DeleteShow: %v, want ErrNotFound", herr)
	}
	keys, err := testsvc.Keys(ctx, v.rdb, v.cfg.KeyPrefix+":{del}:hold:*")
	if err != nil || len(keys) != 0 {
		t.Fatalf("hold keys of the deleted show: %v %v", keys, err)
	}
	if _, err := other.Hold(ctx, HoldRequest{ShowID: "del", SeatIDs: []string{"A2"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a hold on the deleted show: %v, want ErrNotFound", err)
	}
	v.show("del", "A1", "A2")
	// The other engine remembers the id as unknown for Config.UnknownShowTTL.
	waitFor(t, "a hold on the show created again, through the engine that saw it deleted", 10*time.Second, func() bool {
		_, err := other.Hold(ctx, HoldRequest{ShowID: "del", SeatIDs: []string{"A1"}, HolderID: "ann"})
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("a hold on the show created again: %v", err)
		}
		return err == nil
	})
}

// TestDeleteShowUnderConcurrentHolds: DeleteShow races many holders on the show. Either
// it deletes the show and no hold was granted, or it refuses (ErrShowInUse), the show
// stays, and every granted hold is live in Redis.
func TestDeleteShowUnderConcurrentHolds(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	other := v.twin()
	const holders = 16
	deleted := 0
	for round := range 8 {
		id := fmt.Sprintf("race%d", round)
		v.show(id, seatNames(holders)...)
		if _, err := other.Layout(ctx, id); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		granted := make([]*Hold, holders)
		for i := range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				e := []*Engine{v.e, other}[i%2]
				for range 20 {
					h, err := e.Hold(ctx, HoldRequest{ShowID: id, SeatIDs: []string{fmt.Sprintf("S%03d", i)}, TTL: time.Minute, HolderID: fmt.Sprintf("h%d", i)})
					if err == nil {
						granted[i] = &h
						return
					}
					if !errors.Is(err, ErrNotFound) {
						t.Errorf("hold during DeleteShow: %v", err)
						return
					}
				}
			}()
		}
		close(start)
		err := v.e.DeleteShow(ctx, id)
		wg.Wait()
		var live []*Hold
		for _, h := range granted {
			if h != nil {
				live = append(live, h)
			}
		}
		switch {
		case err == nil:
			deleted++
			if len(live) > 0 {
				t.Fatalf("round %d: DeleteShow deleted the show, and %d holds were granted on it (generation %d)", round, len(live), live[0].Generation)
			}
		case errors.Is(err, ErrShowInUse):
			if n := v.count("SELECT count(*) FROM seats WHERE show_id = $1", id); n != holders {
				t.Fatalf("round %d: a refused delete left %d seats", round, n)
			}
			for _, h := range live {
				if v.holdValue(id, h.SeatIDs[0]) == "" {
					t.Fatalf("round %d: the granted hold on %s is gone after a refused delete", round, h.SeatIDs[0])
				}
			}
		default:
			t.Fatalf("round %d: DeleteShow: %v", round, err)
		}
	}
	t.Logf("%d of 8 deletes won the race", deleted)
}

// TestRedisClusterShowCreatedAgain: TestShowCreatedAgainIsANewShow and DeleteShow's
// closing on a three-master Redis Cluster (the rules key shares its show's hash tag).
func TestRedisClusterShowCreatedAgain(t *testing.T) {
	t.Parallel()
	cc := testsvc.StartCluster(t).Client()
	v := newEnvWith(t, testsvc.Database(t), cc, shortUnknown)
	showCreatedAgain(t, v, []SaleRules{{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Minute)}}, {}})

	ctx := t.Context()
	other := v.twin()
	v.show("del", "A1", "A2")
	if _, err := other.Layout(ctx, "del"); err != nil {
		t.Fatal(err)
	}
	var herr error
	v.e.hooks.afterHeldCheck = func(ctx context.Context) {
		_, herr = other.Hold(ctx, HoldRequest{ShowID: "del", SeatIDs: []string{"A1"}, HolderID: "ann"})
	}
	if err := v.e.DeleteShow(ctx, "del"); err != nil || !errors.Is(herr, ErrNotFound) {
		t.Fatalf("DeleteShow: %v; a hold during it: %v, want ErrNotFound", err, herr)
	}
}

// TestStaleCopyMeetsTheNewSeats: an engine whose copy of a show predates its deletion
// and creation again (other seats) confirms and holds the new show's seats, which its
// copy does not have: an unknown seat makes it read the show's identity again (unless
// it read it within the last second).
func TestStaleCopyMeetsTheNewSeats(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	a, b := v.e, v.twin()
	if err := b.CreateShow(ctx, "s", []string{"O1", "O2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Layout(ctx, "s"); err != nil { // A's copy, its rules not read yet
		t.Fatal(err)
	}
	if err := b.DeleteShow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateShow(ctx, "s", []string{"N1", "N2"}); err != nil {
		t.Fatal(err)
	}
	h, err := b.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"N1"}, TTL: time.Minute, HolderID: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Confirm(ctx, h, ConfirmOptions{}); err != nil {
		t.Fatalf("engine A confirms a hold on a seat of the new show: %v", err)
	}
	if _, err := a.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"N2"}, HolderID: "bob"}); err != nil {
		t.Fatalf("engine A holds a seat of the new show: %v", err)
	}
	if _, err := a.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"O2"}, HolderID: "bob"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("engine A, a seat of the deleted show: %v, want ErrNotFound", err)
	}
}

// TestStaleResyncIndexesTheOldLayout: engine A has a copy of show s; s is deleted and
// created again with other seats through engine B, and Redis loses the show (every key
// of it) before A has met the new one. A, meeting NOSTATE, rebuilds the show from its
// copy: the rebuild must write nothing of the old show that the new one keeps — above
// all not the old layout's best-available index marked complete — and find the copy
// replaced. While it runs, a caller with the new show's copy needs a rebuild too: it
// runs its own (the rebuild is shared per show and epoch), not waiting for the stale
// one and taking its outcome for its own. A best-available hold on the new show, through
// B, then holds a seat of the new show, never one of the deleted show's.
func TestStaleResyncIndexesTheOldLayout(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	a, b := v.e, v.twin()
	if err := b.CreateShow(ctx, "s", []string{"O1", "O2", "O3"}); err != nil {
		t.Fatal(err)
	}
	old, err := a.show(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteShow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateShow(ctx, "s", []string{"N1", "N2", "N3"}); err != nil {
		t.Fatal(err)
	}
	fresh, err := b.show(ctx, "s")
	if err != nil || fresh.epoch <= old.epoch {
		t.Fatalf("setup: the new show's copy: %v (epochs %d, %d)", err, old.epoch, fresh.epoch)
	}
	v.loseShow("s")
	// A's rebuild from its copy, as its HoldBest meeting NOSTATE runs it; before it
	// ends, A's rebuild of the new show's copy (a call that already read the new show).
	var freshErr error
	staleErr := a.rebuildShow(ctx, old, 0, func(ctx context.Context, sh *show) error {
		err := a.resync(ctx, sh)
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		freshErr = a.rebuildShow(fctx, fresh, 0, a.resync)
		return err
	})
	var c *showChanged
	if !errors.As(staleErr, &c) {
		t.Errorf("the rebuild from the deleted show's copy: %v, want the copy found replaced", staleErr)
	}
	if freshErr != nil {
		t.Errorf("the rebuild of the new show's copy during the stale one: %v, want done", freshErr)
	}
	h, err := b.HoldBest(ctx, BestRequest{ShowID: "s", Count: 1, TTL: time.Minute})
	if err != nil {
		t.Fatalf("best available on the new show: %v", err)
	}
	t.Logf("the stale rebuild: %v; the new copy's: %v; best available on the new show holds %v", staleErr, freshErr, h.SeatIDs)
	if h.SeatIDs[0] != "N1" {
		t.Fatalf("best available on the new show held %v, want N1 (the deleted show's seats were O1..O3)", h.SeatIDs)
	}
}

// loseShow deletes every Redis key of show, as a Redis that lost it (a restart without
// persistence) has none; on a Cluster, on the master that has the show's slot.
func (v *env) loseShow(show string) {
	v.t.Helper()
	ctx := v.t.Context()
	lose := func(ctx context.Context, c redis.UniversalClient) error {
		keys, err := c.Keys(ctx, newKeys(v.cfg.KeyPrefix, show).base+"*").Result()
		if err != nil || len(keys) == 0 {
			return err
		}
		return c.Del(ctx, keys...).Err()
	}
	var err error
	if cc, ok := v.rdb.(*redis.ClusterClient); ok {
		var node *redis.Client
		if node, err = cc.MasterForKey(ctx, newKeys(v.cfg.KeyPrefix, show).gen()); err == nil {
			err = lose(ctx, node)
		}
	} else {
		err = lose(ctx, v.rdb)
	}
	if err != nil {
		v.t.Fatalf("lose show %s: %v", show, err)
	}
	if n, err := v.rdb.Exists(ctx, newKeys(v.cfg.KeyPrefix, show).gen()).Result(); err != nil || n != 0 {
		v.t.Fatalf("lose show %s: its counter is still there (%d, %v)", show, n, err)
	}
}

// TestStaleResyncWritesTheOldAreas: engine A rebuilds a show Redis lost from its copy,
// and while the rebuild runs (after it read the markers) the show is deleted and created
// again through engine B with a smaller area, and B's first hold rebuilds the new show.
// A's rebuild must not write the deleted show's area capacity over the new show's in
// Redis: places beyond the new area's capacity must never be held.
func TestStaleResyncWritesTheOldAreas(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	a, b := v.e, v.twin()
	v.areaVenue("s", 100)
	old, err := a.show(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	v.loseShow("s")
	var once sync.Once
	a.hooks.afterRead = func(ctx context.Context, path string) {
		if path != "resync" {
			return
		}
		once.Do(func() {
			if err := b.DeleteShow(ctx, "s"); err != nil {
				t.Errorf("DeleteShow: %v", err)
			}
			err := b.CreateShowVenue(ctx, "s", Venue{
				Seats: []Seat{{ID: "A1", Position: 1}, {ID: "A2", Position: 2}},
				Areas: []Area{{ID: "FLOOR", Capacity: 2}}})
			if err != nil {
				t.Errorf("CreateShowVenue again: %v", err)
			}
			if _, err := b.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"A1"}, TTL: time.Minute,
				HolderID: "b1", Places: []Places{{AreaID: "FLOOR", Count: 1}}}); err != nil {
				t.Errorf("the new show's first hold through B: %v", err)
			}
		})
	}
	staleErr := a.resync(ctx, old)
	c, h, _ := v.areaState("s", "FLOOR")
	t.Logf("the stale rebuild: %v; Redis's FLOOR after it: capacity %d, held %d", staleErr, c, h)
	if c != 2 {
		t.Errorf("Redis's FLOOR capacity %d after the stale rebuild, want the new show's 2", c)
	}
	_, err = b.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"A2"}, TTL: time.Minute,
		HolderID: "b2", Places: []Places{{AreaID: "FLOOR", Count: 5}}})
	if err == nil {
		t.Fatalf("a hold of 5 places in the new show's FLOOR of 2 (1 held) was granted")
	}
	t.Logf("5 places in FLOOR of 2: %v", err)
}
