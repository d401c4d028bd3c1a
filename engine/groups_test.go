package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// groupMember is one hold of a group call, as holdOn lays it out.
func (v *env) groupMember(sh *show, token string, ttl time.Duration, seats ...string) *scriptCallReq {
	v.t.Helper()
	rules, err := v.e.rulesOf(v.t.Context(), sh)
	if err != nil {
		v.t.Fatal(err)
	}
	ks, err := sh.scriptKeys("", seats)
	if err != nil {
		v.t.Fatal(err)
	}
	return &scriptCallReq{ks: ks, args: scriptArgs("", []any{token, ttl.Milliseconds(), v.e.cfg.MaxSeatsPerHolder, rules.arg}, seats)}
}

// TestGroupHoldDecidesInOrder: a group call (group.lua) decides its holds in order,
// each as hold.lua alone: a later hold of a seat an earlier one took is refused, a hold
// with a bad argument fails alone, and the holds of one expiry share one feed entry
// whose id each of their replies carries, in the order of the holds.
func TestGroupHoldDecidesInOrder(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("gh", "A1", "A2", "A3", "A4")
	sh, err := v.e.show(ctx, "gh")
	if err != nil {
		t.Fatal(err)
	}
	before, err := v.rdb.XLen(ctx, sh.k.feed()).Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := []*scriptCallReq{
		v.groupMember(sh, newToken(), time.Minute, "A1"),
		v.groupMember(sh, newToken(), time.Minute, "A1", "A3"), // A1 is the first hold's
		v.groupMember(sh, "not-a-token", time.Minute, "A3"),
		v.groupMember(sh, newToken(), 2*time.Minute, "A4"),
		v.groupMember(sh, newToken(), time.Minute, "A2"),
	}
	ks, args := groupArgs(lua.Hold, calls)
	res, err := lua.Group.Run(ctx, v.rdb, ks, args...).Slice()
	if err != nil || len(res) != len(calls) {
		t.Fatalf("group call: %v %v", res, err)
	}
	reply := func(i int) []any {
		r, ok := res[i].([]any)
		if !ok {
			t.Fatalf("hold %d answered %v", i, res[i])
		}
		return r
	}
	if r := reply(1); fmt.Sprint(r) != "[TAKEN A1]" {
		t.Fatalf("the second hold of A1: %v, want [TAKEN A1]", r)
	}
	if e, ok := res[2].(redis.Error); !ok || !strings.Contains(e.Error(), "HOLDFAST_BADARG token") {
		t.Fatalf("the hold with a bad token: %v, want its own HOLDFAST_BADARG", res[2])
	}
	for _, i := range []int{0, 3, 4} {
		if r := reply(i); r[0] != "OK" {
			t.Fatalf("hold %d: %v, want OK", i, r)
		}
	}
	if g0, g3, g4 := reply(0)[1].(int64), reply(3)[1].(int64), reply(4)[1].(int64); !(g0 < g3 && g3 < g4) {
		t.Fatalf("generations %d, %d, %d: not in the holds' order", g0, g3, g4)
	}
	if v.holdValue("gh", "A3") != "" {
		t.Fatalf("A3 held (%q) by a refused or failed hold", v.holdValue("gh", "A3"))
	}
	entries, err := v.rdb.XRange(ctx, sh.k.feed(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	entries = entries[before:]
	if len(entries) != 2 {
		t.Fatalf("%d feed entries, want 2 (one per expiry): %v", len(entries), entries)
	}
	want := []struct {
		seats   string
		replies []int
	}{{"A1 A2", []int{0, 4}}, {"A4", []int{3}}}
	for k, w := range want {
		e := entries[k]
		if e.Values["h"] != w.seats {
			t.Fatalf("entry %d holds %v, want %q", k, e.Values, w.seats)
		}
		for _, i := range w.replies {
			if r := reply(i); r[4] != e.ID || fmt.Sprint(r[2]) != e.Values["x"] {
				t.Fatalf("hold %d's reply %v, want the id %s and expiry %v of its entry", i, r, e.ID, e.Values["x"])
			}
		}
	}
}

// TestGroupHoldOfOneShow: a group call with a hold of another show is refused whole,
// and holds nothing.
func TestGroupHoldOfOneShow(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("g1", "A1")
	v.show("g2", "A1")
	sh1, _ := v.e.show(ctx, "g1")
	sh2, _ := v.e.show(ctx, "g2")
	ks, args := groupArgs(lua.Hold, []*scriptCallReq{v.groupMember(sh1, newToken(), time.Minute, "A1"), v.groupMember(sh2, newToken(), time.Minute, "A1")})
	// Refused by the script, or on a Cluster by Redis itself (the keys' slots differ).
	if err := lua.Group.Run(ctx, v.rdb, ks, args...).Err(); err == nil || !strings.Contains(err.Error(), "another show") && !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a group of two shows: %v, want refused", err)
	}
	if v.holdValue("g1", "A1") != "" || v.holdValue("g2", "A1") != "" {
		t.Fatal("a refused group held a seat")
	}
}

// TestConcurrentHoldsGoInGroups: 300 holds of one show at once, 200 of distinct seats
// and 100 fighting ten at a time over ten seats. The holds that waited went to Redis
// in groups; each distinct seat is held by its hold's token, each fought-over seat by
// exactly one hold, and the seat map shows every seat held.
func TestConcurrentHoldsGoInGroups(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := seatNames(210)
	v.show("cg", seats...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[string][]Hold{}
	for i := range 300 {
		seat := seats[i%210]
		if i >= 200 {
			seat = seats[200+i%10]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "cg", SeatIDs: []string{seat}, TTL: time.Minute})
			var taken *SeatsUnavailableError
			switch {
			case errors.As(err, &taken):
			case err != nil:
				t.Errorf("hold of %s: %v", seat, err)
			default:
				mu.Lock()
				won[seat] = append(won[seat], h)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := sampleCount(t, v.e.m.groupSize.WithLabelValues("hold").(prometheus.Histogram)); n == 0 {
		t.Fatal("300 holds at once and no group call")
	}
	for _, seat := range seats {
		if len(won[seat]) != 1 {
			t.Fatalf("seat %s won by %d holds, want 1", seat, len(won[seat]))
		}
		if val := v.holdValue("cg", seat); !strings.HasPrefix(val, won[seat][0].Token+":") {
			t.Fatalf("seat %s holds %q, not its winner's token %s", seat, val, won[seat][0].Token)
		}
	}
	waitFor(t, "the seat map showing every seat held", 10*time.Second, func() bool {
		m, err := v.e.SeatMap(t.Context(), "cg")
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range m.States {
			if st != SeatHeld {
				return false
			}
		}
		return true
	})
}

// TestWaitingHoldReturnsByItsDeadline: with both of a show's hold calls held in flight
// (their requests stopped at a proxy), a third hold waits for a group; its context ends,
// and it returns then, before the calls in flight answer, and is never sent: once they
// have, its seat is still free.
func TestWaitingHoldReturnsByItsDeadline(t *testing.T) {
	t.Parallel()
	v, proxy := newProxiedEnv(t)
	ctx := t.Context()
	v.show("wd", "A1", "A2", "A3")
	stopped, let := twoStopped(t, proxy, nil)
	wg := behindTwo(t, v, "wd", stopped)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		_, err := v.e.Hold(short, HoldRequest{ShowID: "wd", SeatIDs: []string{"A3"}, TTL: time.Minute})
		returned <- err
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the waiting hold: %v, want ErrUnavailable for its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the waiting hold did not return by its deadline")
	}
	let()
	wg.Wait()
	sh, err := v.e.show(ctx, "wd")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the show's hold calls done", 10*time.Second, func() bool {
		sh.holdGroups.mu.Lock()
		defer sh.holdGroups.mu.Unlock()
		return sh.holdGroups.inFlight == 0
	})
	if val := v.holdValue("wd", "A3"); val != "" {
		t.Fatalf("A3 held (%q) by a hold whose caller had gone", val)
	}
}

// twoStopped stops the first two requests that carry a hold or group call at the proxy
// (not the library's load, which names them too) until let, which the test's end calls
// too; then runs for each later one, k from 3, before it is let through. stopped is
// how many have come.
func twoStopped(t *testing.T, proxy *testsvc.Proxy, then func(k int32)) (stopped func() int32, let func()) {
	release := make(chan struct{})
	var once sync.Once
	let = func() { once.Do(func() { close(release) }) }
	t.Cleanup(let)
	calls := [][]byte{[]byte(lua.Hold.Name() + "\r\n"), []byte(lua.Group.Name() + "\r\n")}
	var n atomic.Int32
	proxy.SetCut(func(chunk []byte) bool {
		if !bytes.Contains(chunk, calls[0]) && !bytes.Contains(chunk, calls[1]) {
			return false
		}
		if k := n.Add(1); k <= 2 {
			<-release
		} else if then != nil {
			then(k)
		}
		return false
	})
	return n.Load, let
}

// behindTwo holds A1 and A2 of show with their calls stopped at the proxy until let,
// so that the show's next holds wait for a group; it returns when both are stopped.
func behindTwo(t *testing.T, v *env, show string, stopped func() int32) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, seat := range []string{"A1", "A2"} {
		wg.Go(func() {
			_, _ = v.e.Hold(t.Context(), HoldRequest{ShowID: show, SeatIDs: []string{seat}, TTL: time.Minute})
		})
	}
	waitFor(t, "two lone calls at the proxy", 10*time.Second, func() bool { return stopped() == 2 })
	return &wg
}

// waitingHolds waits until n of show's holds wait for a group.
func waitingHolds(t *testing.T, v *env, show string, n int) {
	sh, err := v.e.show(t.Context(), show)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("%d holds waiting for a group", n), 10*time.Second, func() bool {
		sh.holdGroups.mu.Lock()
		defer sh.holdGroups.mu.Unlock()
		return len(sh.holdGroups.waiting) == n
	})
}

// TestGroupedHoldsNotMadeAfterTheirCallersLeft: two holds (A3, A4) with a 1 s deadline
// wait behind two calls stopped at the proxy and go in one group call. That call's
// request is stalled until both callers have returned ErrUnavailable and past go-redis's
// read timeout, then its connection is severed: it never reached Redis. The group call
// is sent under its callers' latest deadline (groupContext), so go-redis does not send
// it again. Sent without one, it was: both seats were held, for the holds' whole TTL,
// by holds no one had.
func TestGroupedHoldsNotMadeAfterTheirCallersLeft(t *testing.T) {
	t.Parallel()
	v, proxy := newProxiedEnv(t)
	v.show("gl", "A1", "A2", "A3", "A4")
	returned, severed := make(chan struct{}), make(chan struct{})
	stopped, let := twoStopped(t, proxy, func(k int32) {
		if k == 3 { // the group call
			<-returned
			time.Sleep(3500 * time.Millisecond)
			proxy.Sever()
			close(severed)
		}
	})
	wg := behindTwo(t, v, "gl", stopped)
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, seat := range []string{"A3", "A4"} {
		go func() {
			_, err := v.e.Hold(short, HoldRequest{ShowID: "gl", SeatIDs: []string{seat}, TTL: 10 * time.Minute})
			errs <- err
		}()
	}
	waitingHolds(t, v, "gl", 2)
	let()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrUnavailable) {
			t.Errorf("a grouped hold: %v, want ErrUnavailable", err)
		}
	}
	close(returned)
	wg.Wait()
	<-severed
	time.Sleep(2 * time.Second) // time for go-redis to send it again, if it would

	for _, seat := range []string{"A3", "A4"} {
		if val := v.holdValue("gl", seat); val != "" {
			t.Errorf("%s held (%q) after its caller was told ErrUnavailable and its request was lost", seat, val)
		}
	}
}

// TestLoneHoldNotMadeAfterItsCallerLeft: the same for a hold sent alone by a caller
// whose context has no deadline: the call is cut at its bound (ErrUnavailable), then its
// request, stalled until then and past go-redis's read timeout, is lost with its
// connection. The call is sent under a context that ends with its bound (sendBound), so
// go-redis does not send it again; sent under the caller's context alone, it did.
func TestLoneHoldNotMadeAfterItsCallerLeft(t *testing.T) {
	t.Parallel()
	v, proxy := newProxiedEnv(t)
	v.show("lh", "A1")
	returned, severed := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	hold := []byte(lua.Hold.Name() + "\r\n")
	proxy.SetCut(func(chunk []byte) bool {
		if bytes.Contains(chunk, hold) && n.Add(1) == 1 {
			<-returned
			time.Sleep(3500 * time.Millisecond)
			proxy.Sever()
			close(severed)
		}
		return false
	})
	_, err := v.e.Hold(context.Background(), HoldRequest{ShowID: "lh", SeatIDs: []string{"A1"}, TTL: 10 * time.Minute})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a hold whose call was stalled: %v, want ErrUnavailable", err)
	}
	close(returned)
	<-severed
	time.Sleep(2 * time.Second) // time for go-redis to send it again, if it would
	if val := v.holdValue("lh", "A1"); val != "" {
		t.Fatalf("A1 held (%q) after its caller was told ErrUnavailable and its request was lost", val)
	}
}

// TestWaitingHoldCancelledIsNotSent: of two holds waiting for a group, A3's context
// ends just as the calls in flight end and take the waiting ones (take): the take,
// queued first on the show's mutex, wins over A3's caller taking it out, and leaves A3
// out because its context has ended. A4 is held; A3 is never sent. Without that check
// A3 went in A4's group call and was held.
func TestWaitingHoldCancelledIsNotSent(t *testing.T) {
	t.Parallel()
	v, proxy := newProxiedEnv(t)
	ctx := t.Context()
	v.show("wc", "A1", "A2", "A3", "A4")
	stopped, let := twoStopped(t, proxy, nil)
	wg := behindTwo(t, v, "wc", stopped)
	c3, cancel := context.WithCancel(ctx)
	errs := make(chan error, 2)
	hold := func(ctx context.Context, seat string) {
		_, err := v.e.Hold(ctx, HoldRequest{ShowID: "wc", SeatIDs: []string{seat}, TTL: 10 * time.Minute})
		errs <- err
	}
	go hold(c3, "A3")
	waitingHolds(t, v, "wc", 1)
	go hold(ctx, "A4")
	waitingHolds(t, v, "wc", 2)
	sh, _ := v.e.show(ctx, "wc")
	sh.holdGroups.mu.Lock()
	let()                              // the lone calls answer, then queue on the mutex in take
	time.Sleep(200 * time.Millisecond) // (more than 1 ms: the mutex hands over in order)
	cancel()                           // A3's caller queues on the mutex behind them
	time.Sleep(200 * time.Millisecond)
	sh.holdGroups.mu.Unlock()
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("a waiting hold: %v", err)
		}
	}
	wg.Wait()
	if v.holdValue("wc", "A4") == "" {
		t.Error("A4, whose caller waited, is not held")
	}
	if val := v.holdValue("wc", "A3"); val != "" {
		t.Fatalf("A3 held (%q): sent after its caller's context ended", val)
	}
}
