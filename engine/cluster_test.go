package engine

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

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
		if err := v.e.Release(ctx, r); err != nil {
			t.Fatalf("%s: release: %v", s, err)
		}
		sold[s] = map[string]string{"S000": b.ID.String(), "S001": b.ID.String(), "S002": b.ID.String()}
		if got := v.soldMarkers(s); !maps.Equal(got, sold[s]) {
			t.Fatalf("%s: markers %v", s, got)
		}
	}

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
		if got, want := v.soldMarkers(s), v.claims(s); !maps.Equal(got, want) {
			t.Fatalf("%s: markers %v, claims %v", s, got, want)
		}
	}

}
