package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestRedisCluster runs the engine against a local three-master Redis Cluster: shows
// land on different masters, multi-seat scripts work (every key of a show shares its
// hash tag, so no CROSSSLOT), and a master restarted without its data is handled like
// any Redis that forgot: no double booking, sold seats refused, new holds confirm.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := testsvc.StartCluster(t)
	cc := cluster.Client()
	v := newEnvWith(t, testsvc.Database(t), cc)
	ctx := t.Context()
	if err := v.e.Ready(ctx); err != nil {
		t.Fatalf("ready on the cluster: %v", err)
	}

	masters := map[string][]string{} // master address -> shows on it
	shows := make([]string, 8)
	for i := range shows {
		shows[i] = fmt.Sprintf("gig%d", i)
		v.show(shows[i], seatNames(6)...)
		node, err := cc.MasterForKey(ctx, newKeys(v.cfg.KeyPrefix, shows[i]).gen())
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		masters[addr] = append(masters[addr], shows[i])
	}
	if len(masters) < 2 {
		t.Fatalf("all 8 shows landed on one master: %v", masters)
	}

	sold := map[string]map[string]string{}
	for _, s := range shows {
		h := v.hold(s, time.Minute, "alice", "S000", "S001", "S002") // three keys, one slot
		if _, err := v.e.Hold(ctx, HoldRequest{ShowID: s, SeatIDs: []string{"S002", "S003"}}); !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("%s: overlapping hold: %v", s, err)
		}
		ext, err := v.e.Extend(ctx, h, 2*time.Minute)
		if err != nil {
			t.Fatalf("%s: extend: %v", s, err)
		}
		b, err := v.e.Confirm(ctx, ext, ConfirmOptions{IdempotencyKey: "k-" + s})
		if err != nil {
			t.Fatalf("%s: confirm: %v", s, err)
		}
		r := v.hold(s, time.Minute, "bob", "S004", "S005")
		rs, err := v.e.Reclaim(ctx, s, "bob") // one script, keys it names from the show's tag
		if err != nil || len(rs) != 1 || rs[0].Token == r.Token {
			t.Fatalf("%s: reclaim: %+v, %v", s, rs, err)
		}
		if err := v.e.Release(ctx, r); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("%s: release with the reclaimed token: %v", s, err)
		}
		if err := v.e.Release(ctx, rs[0]); err != nil {
			t.Fatalf("%s: release: %v", s, err)
		}
		g := strconv.FormatInt(b.Generation, 10)
		sold[s] = map[string]string{"S000": g, "S001": g, "S002": g}
		if got := v.soldMarkers(s); !maps.Equal(got, sold[s]) {
			t.Fatalf("%s: markers %v", s, got)
		}
	}

	functionFlushOnOneMaster(t, v, cc, masters)

	// Restart one master without its data: its shows lose holds, markers and counters.
	var victim *testsvc.RedisServer
	var lost []string
	for _, n := range cluster.Nodes {
		if ss := masters[n.Addr()]; len(ss) > 0 {
			victim, lost = n, ss
			break
		}
	}
	victim.Restart()
	cluster.WaitOK()
	for _, s := range lost {
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			// The client may still hold dead connections to the restarted master.
			if _, err = v.e.Hold(ctx, HoldRequest{ShowID: s, SeatIDs: []string{"S000"}}); !errors.Is(err, ErrUnavailable) {
				break
			}
		}
		if !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("%s after its master restarted: hold on a sold seat: %v, want ErrSeatsUnavailable", s, err)
		}
		h := v.hold(s, time.Minute, "carol", "S003", "S004")
		b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
		if err != nil {
			t.Fatalf("%s after restart: confirm: %v", s, err)
		}
		if b.Generation <= 1 {
			t.Fatalf("%s after restart: generation %d not above the database's", s, b.Generation)
		}
	}
	if v.doubleBookings() != 0 {
		t.Fatal("double booking on the cluster")
	}
	for _, s := range shows {
		if err := v.e.Resync(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, want := v.soldMarkers(s), v.claimMarks(s); !maps.Equal(got, want) {
			t.Fatalf("%s: markers %v, claims %v", s, got, want)
		}
	}

}

// functionFlushOnOneMaster: one master of the cluster loses the scripts' function
// library (FUNCTION FLUSH), the others keep it: calls on that master's shows (hold,
// extend, release) load it again and run. Then every master loses it: a confirmation,
// whose first call is pipelined (runScripts), loads it again too. Every master has it
// afterwards.
func functionFlushOnOneMaster(t *testing.T, v *env, cc *redis.ClusterClient, masters map[string][]string) {
	t.Helper()
	ctx := t.Context()
	var addr string
	for a := range masters {
		addr = a
		break
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if c.Options().Addr != addr {
			return nil
		}
		return c.FunctionFlush(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range masters[addr] {
		h := v.hold(s, time.Minute, "dan", "S003")
		if _, err := v.e.Extend(ctx, h, time.Minute); err != nil {
			t.Fatalf("%s: extend after FUNCTION FLUSH on its master: %v", s, err)
		}
		if err := v.e.Release(ctx, h); err != nil {
			t.Fatalf("%s: release after FUNCTION FLUSH on its master: %v", s, err)
		}
	}
	// A confirmation's first call is its batch's pipelined check (reserve.lua).
	s := masters[addr][0]
	h := v.hold(s, time.Minute, "dan", "S005")
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
		t.Fatalf("%s: confirm after FUNCTION FLUSH on every master: %v", s, err)
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: lua.LibraryName()}).Result()
		if err == nil && len(libs) != 1 {
			err = fmt.Errorf("%s has %d libraries named %s", c.Options().Addr, len(libs), lua.LibraryName())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRedisClusterFailoverToStaleReplica: a show's master dies and its replica, which
// missed the last writes (it was frozen), takes over. Redis now forgets sold seats and
// its counter went backwards; PostgreSQL still knows. No double booking, a sold seat the
// replica forgot is refused at confirm (and its marker repaired), new holds confirm.
func TestRedisClusterFailoverToStaleReplica(t *testing.T) {
	t.Parallel()
	cluster := testsvc.StartClusterWithReplicas(t)
	cc := cluster.Client()
	v := newEnvWith(t, testsvc.Database(t), cc)
	ctx := t.Context()
	v.show("fo", seatNames(6)...)
	node, err := cc.MasterForKey(ctx, newKeys(v.cfg.KeyPrefix, "fo").gen())
	if err != nil {
		t.Fatal(err)
	}
	master := cluster.Node(node.Options().Addr)
	replica := cluster.ReplicaOf(master.Addr())

	v.sell("fo", "S000") // generation 1, replicated
	// WAIT blocks on the server for its timeout: each call stays well below the
	// client's read timeout (3 s), and the test polls instead of waiting once for long.
	waitFor(t, "the replica acknowledges the write", 20*time.Second, func() bool {
		n, err := node.Do(ctx, "WAIT", 1, 500).Int()
		return err == nil && n == 1
	})
	// Freeze the replica and cut its link, so it cannot reconnect: from here on it
	// misses every write (a frozen process still reads what is already on its socket).
	replica.Pause()
	if err := node.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("cut the replication link: %v", err)
	}
	v.sell("fo", "S001", "S002")          // generations 2 and 3: markers only on the master
	v.hold("fo", time.Minute, "", "S003") // a live hold the replica will not have
	master.Stop()
	replica.Resume()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rc.Close()
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	cluster.WaitOK()
	// go-redis refreshes its slot map lazily; until it does, calls that reach the dead
	// master are ErrUnavailable (never a wrong answer). Refresh it now.
	cc.ReloadState(ctx)

	// S001 is sold in PostgreSQL; the new master never heard of it.
	var h Hold
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		h, err = v.e.Hold(ctx, HoldRequest{ShowID: "fo", SeatIDs: []string{"S001"}})
		if err == nil || !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			break
		}
		cc.ReloadState(ctx)
	}
	if err != nil {
		t.Fatalf("hold after the failover: %v", err)
	}
	if h.Generation > 3 {
		t.Fatalf("generation %d: the replica's counter should have been behind", h.Generation)
	}
	_, err = v.e.Confirm(ctx, h, ConfirmOptions{})
	var sue *SeatsUnavailableError
	if !errors.As(err, &sue) {
		t.Fatalf("confirm of a sold seat the new master forgot: %v, want seats unavailable", err)
	}
	if v.soldMarkers("fo")["S001"] == "" {
		t.Fatal("the forgotten marker was not repaired")
	}
	// A free seat confirms on the first call, above the high-water mark.
	h2 := v.hold("fo", time.Minute, "", "S004")
	b, err := v.e.Confirm(ctx, h2, ConfirmOptions{})
	if err != nil || b.Generation <= 3 {
		t.Fatalf("confirm after the failover: %+v %v", b, err)
	}
	if v.doubleBookings() != 0 || v.bookings("fo") != 4 {
		t.Fatalf("double booking or lost booking: %d bookings", v.bookings("fo"))
	}
	if err := v.e.Resync(ctx, "fo"); err != nil {
		t.Fatal(err)
	}
	if got, want := v.soldMarkers("fo"), v.claimMarks("fo"); !maps.Equal(got, want) {
		t.Fatalf("markers %v, claims %v", got, want)
	}
}

// TestRedisClusterFailoverWaitingRoom: a show with a waiting room on a Cluster whose
// master dies and whose replica, which missed the last writes, takes over. Decided
// behaviour: the room's state is Redis's only — an admission and a join the replica
// missed are gone (the holder's ticket is not found: they join again, at the end of the
// line) — but no hold goes around the room, and rules the replica missed come back from
// PostgreSQL (the engine's copy) before the first hold decides.
func TestRedisClusterFailoverWaitingRoom(t *testing.T) {
	t.Parallel()
	cluster := testsvc.StartClusterWithReplicas(t)
	cc := cluster.Client()
	v := newEnvWith(t, testsvc.Database(t), cc)
	ctx := t.Context()
	v.show("room", seatNames(6)...)
	v.setRules("room", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	node, err := cc.MasterForKey(ctx, newKeys(v.cfg.KeyPrefix, "room").gen())
	if err != nil {
		t.Fatal(err)
	}
	master := cluster.Node(node.Options().Addr)
	replica := cluster.ReplicaOf(master.Addr())
	v.admitted("room", "ann") // replicated
	waitFor(t, "the replica acknowledges the writes", 20*time.Second, func() bool {
		n, err := node.Do(ctx, "WAIT", 1, 500).Int()
		return err == nil && n == 1
	})
	replica.Pause()
	if err := node.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("cut the replication link: %v", err)
	}
	v.admitted("room", "bob")                    // only on the master
	v.setRules("room", SaleRules{HolderLimit: 1, // only on the master (and in PostgreSQL)
		Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	master.Stop()
	replica.Resume()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rc.Close()
	if err := rc.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	cluster.WaitOK()
	cc.ReloadState(ctx)

	// bob's admission is gone with the master: refused, and told to join again.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err = v.e.Hold(ctx, HoldRequest{ShowID: "room", SeatIDs: []string{"S001"}, HolderID: "bob"})
		if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			break
		}
		cc.ReloadState(ctx)
	}
	if !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("bob after the failover: %v, want ErrNotAdmitted", err)
	}
	if _, err := v.e.Ticket(ctx, "room", "bob"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's ticket after the failover: %v, want ErrNotFound", err)
	}
	// ann's admission was replicated: it survives. The holder limit the replica never
	// heard of binds her (the engine's rules are newer than Redis's).
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "room", SeatIDs: []string{"S001", "S002"}, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("ann, 2 seats under a limit of 1 the replica missed: %v, want ErrHolderLimit", err)
	}
	v.hold("room", time.Minute, "ann", "S001")
	v.admitted("room", "bob")
	v.hold("room", time.Minute, "bob", "S002")
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "room", SeatIDs: []string{"S003"}, HolderID: "eve"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("eve never joined: %v, want ErrNotAdmitted", err)
	}
}
