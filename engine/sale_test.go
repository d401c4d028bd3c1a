package engine

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// setRules sets a show's sale rules or fails.
func (v *env) setRules(show string, r SaleRules) {
	v.t.Helper()
	if err := v.e.SetSaleRules(v.t.Context(), show, r); err != nil {
		v.t.Fatalf("SetSaleRules(%s): %v", show, err)
	}
}

// admitted joins holder to show's waiting room and waits until they are admitted.
func (v *env) admitted(show, holder string) Ticket {
	v.t.Helper()
	if _, err := v.e.Join(v.t.Context(), show, holder); err != nil {
		v.t.Fatalf("Join(%s, %s): %v", show, holder, err)
	}
	var t Ticket
	waitFor(v.t, holder+" admitted", 15*time.Second, func() bool {
		var err error
		t, err = v.e.Ticket(v.t.Context(), show, holder)
		if err != nil {
			v.t.Fatalf("Ticket(%s, %s): %v", show, holder, err)
		}
		return t.Admitted
	})
	return t
}

func TestSaleRulesValidation(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("rv", seatNames(4)...)
	ctx := t.Context()
	bad := []SaleRules{
		{HolderLimit: -1},
		{HolderLimit: maxHolderLimit + 1},
		{Queue: &WaitingRoom{}},
		{Queue: &WaitingRoom{OpensAt: time.Now(), AdmitPerSecond: -1}},
		{Queue: &WaitingRoom{OpensAt: time.Now(), AdmitPerSecond: math.NaN()}},
		{Queue: &WaitingRoom{OpensAt: time.Now(), AdmissionTTL: time.Millisecond}},
		{Queue: &WaitingRoom{OpensAt: time.Now(), AdmissionTTL: 48 * time.Hour}},
	}
	for _, r := range bad {
		if err := v.e.SetSaleRules(ctx, "rv", r); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SetSaleRules(%+v): %v, want ErrInvalidArgument", r, err)
		}
	}
	if got, err := v.e.SaleRules(ctx, "rv"); err != nil || got.HolderLimit != 0 || got.Queue != nil {
		t.Fatalf("rules after refused changes: %+v, %v", got, err)
	}
	if err := v.e.SetSaleRules(ctx, "nope", SaleRules{HolderLimit: 2}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown show: %v", err)
	}
	opens := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	v.setRules("rv", SaleRules{HolderLimit: 3, Queue: &WaitingRoom{OpensAt: opens, AdmitPerSecond: 2.5}})
	got, err := v.e.SaleRules(ctx, "rv")
	if err != nil || got.HolderLimit != 3 || got.Queue == nil || !got.Queue.OpensAt.Equal(opens) ||
		got.Queue.AdmitPerSecond != 2.5 || got.Queue.AdmissionTTL != defaultAdmissionTTL {
		t.Fatalf("rules: %+v %+v, %v", got, got.Queue, err)
	}
	if _, err := v.e.Join(ctx, "rv", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("join without a holder: %v", err)
	}
	if _, err := v.e.Ticket(ctx, "rv", "ann"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ticket of a holder who never joined: %v", err)
	}
	v.show("plain", seatNames(2)...)
	if _, err := v.e.Join(ctx, "plain", "ann"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("join a show without a waiting room: %v", err)
	}
}

// TestHolderLimitAcrossOrders: seats held plus seats booked, across holds and
// confirmations, Hold and HoldBest; a cancellation gives its seats back.
func TestHolderLimitAcrossOrders(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("lim", seatNames(20)...)
	v.setRules("lim", SaleRules{HolderLimit: 4})

	h1 := v.hold("lim", time.Minute, "ann", "S000", "S001")
	b1, err := v.e.Confirm(ctx, h1, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h2 := v.hold("lim", time.Minute, "ann", "S002")
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "lim", SeatIDs: []string{"S003", "S004"}, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("2 booked + 1 held + 2: %v, want ErrHolderLimit", err)
	}
	if _, err := v.e.HoldBest(ctx, BestRequest{ShowID: "lim", Count: 2, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("best 2 more: %v, want ErrHolderLimit", err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "lim", SeatIDs: []string{"S003", "S004"}, HolderID: "bob"}); err != nil {
		t.Fatalf("another holder: %v", err)
	}
	h3 := v.hold("lim", time.Minute, "ann", "S005")
	if _, err := v.e.Confirm(ctx, h2, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Confirm(ctx, h3, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "lim", SeatIDs: []string{"S006"}, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("4 booked + 1: %v, want ErrHolderLimit", err)
	}
	if err := v.e.Cancel(ctx, b1.ID); err != nil {
		t.Fatal(err)
	}
	h4, err := v.e.HoldBest(ctx, BestRequest{ShowID: "lim", Count: 2, HolderID: "ann"})
	if err != nil {
		t.Fatalf("after cancelling 2 seats, best 2: %v", err)
	}
	if _, err := v.e.Confirm(ctx, h4, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := v.count("SELECT seats FROM holder_seats WHERE show_id = 'lim' AND holder_id = 'ann'"); n != 4 {
		t.Fatalf("holder_seats says %d, want 4", n)
	}
	// A hold without a holder cannot be counted: refused under a limit.
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "lim", SeatIDs: []string{"S010"}}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("anonymous hold under a holder limit: %v", err)
	}
}

// TestHolderLimitCheckedByPostgres: a Redis that lost its counts lets a hold through;
// the database refuses its confirmation, and a Resync gives Redis the counts back.
func TestHolderLimitCheckedByPostgres(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("pg", seatNames(10)...)
	v.setRules("pg", SaleRules{HolderLimit: 3})
	if _, err := v.e.Confirm(ctx, v.hold("pg", time.Minute, "ann", "S000", "S001", "S002"), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	hc := newKeys(v.cfg.KeyPrefix, "pg").base + "hc"
	if err := v.rdb.Del(ctx, hc).Err(); err != nil {
		t.Fatal(err)
	}
	h := v.hold("pg", time.Minute, "ann", "S003", "S004") // Redis no longer counts the 3 booked
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("confirm past the limit: %v, want ErrHolderLimit", err)
	}
	if n := v.count("SELECT count(*) FROM seat_claims WHERE show_id = 'pg'"); n != 3 {
		t.Fatalf("%d seats claimed, want 3", n)
	}
	// The refused hold is still the holder's: they can release it.
	if err := v.e.Release(ctx, h); err != nil {
		t.Fatalf("release the refused hold: %v", err)
	}
	if err := v.e.Resync(ctx, "pg"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "pg", SeatIDs: []string{"S005"}, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("after Resync, one more: %v, want ErrHolderLimit", err)
	}
}

// TestHolderLimitUnderConcurrency: one holder's confirmations through two engines at
// once, with Redis made to let every hold through: the database books at most the limit.
// Refusals that share a batch with others make its set-based statement fail; the batch
// is written again a statement per booking, which names the refused one.
func TestHolderLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 100 })
	ctx := t.Context()
	v.show("race", seatNames(40)...)
	var holds []Hold
	for i := range 40 {
		holds = append(holds, v.hold("race", time.Minute, "ann", fmt.Sprintf("S%03d", i)))
	}
	// The limit reaches the database only: Redis holds were granted before it.
	v.setRules("race", SaleRules{HolderLimit: 5})
	engines := []*Engine{v.e, v.twin()}
	var wg sync.WaitGroup
	var ok, limited atomic.Int64
	for i, h := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := engines[i%2].Confirm(ctx, h, ConfirmOptions{})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrHolderLimit):
				limited.Add(1)
			default:
				t.Errorf("confirm: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 5 || limited.Load() != 35 {
		t.Fatalf("%d confirmed, %d refused by the limit; want 5 and 35", ok.Load(), limited.Load())
	}
	if n := v.count("SELECT count(*) FROM seat_claims WHERE show_id = 'race'"); n != 5 {
		t.Fatalf("%d seats claimed, want 5", n)
	}
	if n := testutil.ToFloat64(engines[0].m.batchRewrites) + testutil.ToFloat64(engines[1].m.batchRewrites); n == 0 {
		t.Fatal("no batch was written again a statement per booking: the refusals never met the set-based statement")
	}
}

// TestWaitingRoomGuardsEveryHold: with a waiting room, no hold without an admission —
// not Hold, not HoldBest, not the hold script called directly with stale rules.
func TestWaitingRoomGuardsEveryHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("wr", seatNames(10)...)
	v.setRules("wr", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "wr", SeatIDs: []string{"S000"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("hold without joining: %v, want ErrNotAdmitted", err)
	}
	if _, err := v.e.HoldBest(ctx, BestRequest{ShowID: "wr", Count: 1, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("best without joining: %v, want ErrNotAdmitted", err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "wr", SeatIDs: []string{"S000"}}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("anonymous hold: %v, want ErrNotAdmitted", err)
	}
	sh, _ := v.e.show(ctx, "wr")
	tag := holderTag("bot")
	ks, _ := sh.scriptKeys(tag, []string{"S001"})
	res, err := lua.Hold.Run(ctx, v.rdb, ks, scriptArgs(tag, []any{newToken(), 60000, 0, unreadRules(sh).arg}, []string{"S001"})...).Slice()
	if err != nil || res[0] != "NOTADMITTED" {
		t.Fatalf("the hold script with no rules given: %v %v, want NOTADMITTED", res, err)
	}
	tk := v.admitted("wr", "ann")
	if tk.Position != 0 || tk.AdmittedUntil.Before(time.Now().Add(9*time.Minute)) {
		t.Fatalf("ticket %+v", tk)
	}
	h := v.hold("wr", time.Minute, "ann", "S000")
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "wr", SeatIDs: []string{"S002"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("still not admitted: %v", err)
	}
	if n := v.count("SELECT count(*) FROM seat_claims WHERE show_id = 'wr'"); n != 1 {
		t.Fatalf("%d seats sold, want 1", n)
	}
	// Turned off, the room lets everyone hold.
	v.setRules("wr", SaleRules{})
	v.hold("wr", time.Minute, "bot", "S003")
}

// spearman is the rank correlation of two permutations of 0..n-1 given as ranks.
func spearman(a, b []int) float64 {
	n := float64(len(a))
	var d2 float64
	for i := range a {
		d := float64(a[i] - b[i])
		d2 += d * d
	}
	return 1 - 6*d2/(n*(n*n-1))
}

// TestWaitingRoomDrawIsFair: 200 holders who join before the opening in a known order
// are admitted in an order uncorrelated with it (a FIFO room would give 1), drawn from
// the seed the engine logged; holders who join after the opening come after, in order.
func TestWaitingRoomDrawIsFair(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	v := newEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	})
	ctx := t.Context()
	v.show("fair", seatNames(3)...)
	v.hold("fair", 5*time.Minute, "", "S000", "S001", "S002") // nothing free: no one is admitted
	// The opening is an hour away while the 200 join; then it is moved to now.
	v.setRules("fair", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(time.Hour)}})
	const early, late = 200, 20
	name := func(i int) string { return fmt.Sprintf("early-%03d", i) }
	for i := range early {
		tk, err := v.e.Join(ctx, "fair", name(i))
		if err != nil {
			t.Fatal(err)
		}
		if tk.Opened || tk.Admitted || tk.Position != int64(i+1) {
			t.Fatalf("before the opening, join %d: %+v", i, tk)
		}
	}
	// Joining again keeps the place.
	if tk, err := v.e.Join(ctx, "fair", name(0)); err != nil || tk.Position != early {
		t.Fatalf("join again: %+v %v", tk, err)
	}
	v.setRules("fair", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now()}})
	waitFor(t, "the opening", 15*time.Second, func() bool {
		tk, err := v.e.Ticket(ctx, "fair", name(0))
		return err == nil && tk.Opened
	})
	for i := range late {
		if _, err := v.e.Join(ctx, "fair", fmt.Sprintf("late-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	pos := make([]int, early)
	seen := map[int64]bool{}
	for i := range early {
		tk, err := v.e.Ticket(ctx, "fair", name(i))
		if err != nil || tk.Admitted || tk.Position < 1 || tk.Position > early || seen[tk.Position] {
			t.Fatalf("after the opening, %s: %+v %v", name(i), tk, err)
		}
		seen[tk.Position] = true
		pos[i] = int(tk.Position - 1)
	}
	join := make([]int, early)
	for i := range join {
		join[i] = i
	}
	if rho := spearman(join, pos); math.Abs(rho) > 0.3 {
		t.Fatalf("rank correlation of admission order with join order %.3f, want near 0", rho)
	}
	for i := range late {
		tk, err := v.e.Ticket(ctx, "fair", fmt.Sprintf("late-%02d", i))
		if err != nil || tk.Position != int64(early+i+1) {
			t.Fatalf("late joiner %d: %+v %v, want position %d", i, tk, err, early+i+1)
		}
	}
	// The order is the logged seed's: ascending SHA-1(seed || holder tag).
	var seed string
	mu.Lock()
	for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["seed"] != nil && rec["show_id"] == "fair" {
			seed, _ = rec["seed"].(string)
			if d, _ := rec["drawn"].(float64); d != early {
				t.Fatalf("logged draw of %v holders, want %d", rec["drawn"], early)
			}
		}
	}
	mu.Unlock()
	if len(seed) != 32 {
		t.Fatalf("no draw seed logged")
	}
	idx := make([]int, early)
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) string {
		sum := sha1.Sum([]byte(seed + holderTag(name(i))))
		return hex.EncodeToString(sum[:])[:13]
	}
	sort.Slice(idx, func(a, b int) bool { return key(idx[a]) < key(idx[b]) })
	for place, i := range idx {
		if pos[i] != place {
			t.Fatalf("%s is at place %d, the seed puts it at %d", name(i), pos[i]+1, place+1)
		}
	}
}

// TestWaitingRoomAdmitsWhatTheSeatsCanServe: with no rate, admissions follow the free
// seats (held seats and unused admissions counted); a release admits the next holder,
// an unused admission runs out and its holder leaves, a sold-out show says so.
func TestWaitingRoomAdmitsWhatTheSeatsCanServe(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("cap", seatNames(4)...)
	v.setRules("cap", SaleRules{HolderLimit: 2, Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second), AdmissionTTL: 6 * time.Second}})
	// HolderLimit 2: a holder is expected to take 1 seat (half the limit) until holds say otherwise.
	holders := []string{"h0", "h1", "h2", "h3", "h4", "h5"}
	for _, h := range holders {
		if _, err := v.e.Join(ctx, "cap", h); err != nil {
			t.Fatal(err)
		}
	}
	ticket := func(h string) (Ticket, error) { return v.e.Ticket(ctx, "cap", h) }
	waitFor(t, "four admissions", 15*time.Second, func() bool {
		tk, err := ticket("h3")
		return err == nil && tk.Admitted
	})
	for i, h := range holders {
		tk, err := ticket(h)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 4; tk.Admitted != want {
			t.Fatalf("%s: %+v, want admitted %v", h, tk, want)
		}
		if i >= 4 && tk.Position != int64(i-3) {
			t.Fatalf("%s at position %d, want %d", h, tk.Position, i-3)
		}
	}
	// h0..h2 hold one seat each; h3 never holds. Its admission runs out, and h4 is let in.
	var hs []Hold
	for i, h := range holders[:3] {
		hs = append(hs, v.hold("cap", time.Minute, h, fmt.Sprintf("S%03d", i)))
	}
	waitFor(t, "h3's admission to run out", 15*time.Second, func() bool {
		_, err := ticket("h3")
		return errors.Is(err, ErrNotFound)
	})
	waitFor(t, "h4 admitted", 15*time.Second, func() bool {
		tk, err := ticket("h4")
		return err == nil && tk.Admitted
	})
	if tk, _ := ticket("h5"); tk.Admitted || tk.Position != 1 {
		t.Fatalf("h5: %+v, want first in line", tk)
	}
	// h4 takes the last seat; a release admits h5.
	h4 := v.hold("cap", time.Minute, "h4", "S003")
	if err := v.e.Release(ctx, hs[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "h5 admitted after a release", 15*time.Second, func() bool {
		tk, err := ticket("h5")
		return err == nil && tk.Admitted
	})
	h5 := v.hold("cap", time.Minute, "h5", "S000")
	for _, h := range append(hs[1:], h5) {
		if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := v.e.Join(ctx, "cap", "h6")
	if err != nil || tk.SoldOut || tk.Admitted || tk.Position != 1 {
		t.Fatalf("one seat still held: %+v %v", tk, err)
	}
	if _, err := v.e.Confirm(ctx, h4, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every ticket to say sold out", 15*time.Second, func() bool {
		tk, err := ticket("h6")
		return err == nil && tk.SoldOut && !tk.Admitted
	})
}

// TestWaitingRoomRate: with AdmitPerSecond, admissions never run ahead of the rate.
func TestWaitingRoomRate(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("rate", seatNames(500)...)
	start := time.Now()
	v.setRules("rate", SaleRules{Queue: &WaitingRoom{OpensAt: start, AdmitPerSecond: 4}})
	for i := range 100 {
		if _, err := v.e.Join(ctx, "rate", "r"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	var last QueueStatus
	waitFor(t, "8 admissions", 15*time.Second, func() bool {
		q, err := v.e.Queue(ctx, "rate")
		if err != nil {
			t.Fatal(err)
		}
		elapsed := time.Since(start).Seconds()
		if float64(q.AdmittedTotal) > 4+4*elapsed {
			t.Fatalf("%d admitted after %.2fs at 4/s", q.AdmittedTotal, elapsed)
		}
		last = q
		return q.AdmittedTotal >= 8
	})
	if last.Waiting != 100-last.AdmittedTotal {
		t.Fatalf("status %+v", last)
	}
}

// TestWaitingRoomSoldOut: once every seat is sold every ticket says so.
func TestWaitingRoomSoldOut(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("so", seatNames(2)...)
	v.setRules("so", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("so", "ann")
	if _, err := v.e.Confirm(ctx, v.hold("so", time.Minute, "ann", "S000", "S001"), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sold out", 15*time.Second, func() bool {
		tk, err := v.e.Join(ctx, "so", "bob")
		return err == nil && tk.SoldOut && !tk.Admitted
	})
	if q, err := v.e.Queue(ctx, "so"); err != nil || !q.SoldOut {
		t.Fatalf("status %+v %v", q, err)
	}
}

// TestWaitingRoomAfterRedisLoss: Redis forgets the show (the queue with it). The rules
// come back from PostgreSQL before any hold — no hold without an admission — and the
// room starts empty: holders join again, in order of arrival. A Resync keeps the room.
func TestWaitingRoomAfterRedisLoss(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("loss", seatNames(10)...)
	v.setRules("loss", SaleRules{HolderLimit: 4, Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("loss", "ann")
	if _, err := v.e.Confirm(ctx, v.hold("loss", time.Minute, "ann", "S000", "S001", "S002"), ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Resync leaves the room as it is.
	if err := v.e.Resync(ctx, "loss"); err != nil {
		t.Fatal(err)
	}
	if tk, err := v.e.Ticket(ctx, "loss", "ann"); err != nil || !tk.Admitted {
		t.Fatalf("after Resync: %+v %v", tk, err)
	}
	// Redis forgets everything of the show.
	keys, err := testsvc.Keys(ctx, v.rdb, newKeys(v.cfg.KeyPrefix, "loss").base+"*")
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys: %v %v", keys, err)
	}
	if err := v.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "loss", SeatIDs: []string{"S005"}, HolderID: "ann"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("hold after the loss: %v, want ErrNotAdmitted", err)
	}
	if _, err := v.e.Ticket(ctx, "loss", "ann"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ticket after the loss: %v, want ErrNotFound (join again)", err)
	}
	v.admitted("loss", "ann")
	// The holder limit counts the 3 booked seats again (the rebuild counted them).
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "loss", SeatIDs: []string{"S005", "S006"}, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("past the limit after the loss: %v, want ErrHolderLimit", err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "loss", SeatIDs: []string{"S000"}, HolderID: "ann"}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("a sold seat after the loss: %v", err)
	}
	v.hold("loss", time.Minute, "ann", "S005")
}

// TestWaitingRoomRulesComeBack: a Redis that missed a rules change (a failover lost
// the write) gets it back from the engine's copy before the next hold decides.
func TestWaitingRoomRulesComeBack(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("back", seatNames(4)...)
	v.setRules("back", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	k := newKeys(v.cfg.KeyPrefix, "back").base + "rules"
	sh, err := v.e.show(ctx, "back")
	if err != nil {
		t.Fatal(err)
	}
	older := fmt.Sprintf("%d 0 0 -1 0 0 4", sh.epoch) // an older copy of the show's rules: no room
	if err := v.rdb.Set(ctx, k, older, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "back", SeatIDs: []string{"S000"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("hold while Redis had older rules: %v, want ErrNotAdmitted", err)
	}
	// Another engine, which has not read the rules yet, sees them in Redis.
	if _, err := v.twin().Hold(ctx, HoldRequest{ShowID: "back", SeatIDs: []string{"S000"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("hold through another engine: %v, want ErrNotAdmitted", err)
	}
	// The next script of the show gives Redis the rules back: here a join.
	v.admitted("back", "ann")
	if got := v.rdb.Get(ctx, k).Val(); got == older {
		t.Fatalf("Redis still has the older rules")
	}
	v.hold("back", time.Minute, "ann", "S001")
}
