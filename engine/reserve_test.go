package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// shortReservations makes a reservation's bound (reserveLife) 3.6 s.
func shortReservations(c *Config) {
	c.LockTimeout, c.StatementTimeout, c.MarkerRepairInterval = 100*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
}

// tryWithin runs op with a short deadline and reports whether it succeeded: a hold still
// reserved keeps it waiting (ErrUnavailable when the deadline ends); any other error
// fails the test.
func tryWithin(t *testing.T, what string, op func(context.Context) error) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		err := op(ctx)
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: %v", what, err)
		}
		return err == nil
	}
}

// reserveEnd is when the reservation in seat's hold value ends (Redis ms).
func (v *env) reserveEnd(show, seat string) int64 {
	v.t.Helper()
	val := v.holdValue(show, seat)
	i := strings.LastIndexByte(val, ':')
	end, err := strconv.ParseInt(val[i+1:], 10, 64)
	if !strings.Contains(val, "|") || err != nil {
		v.t.Fatalf("hold value %q has no reservation end", val)
	}
	return end
}

// reserveCheck runs a batch's check of h (reserve.lua) for commit id, with by as the
// time its batch stops waiting for the reply, and returns the reply.
func (v *env) reserveCheck(h Hold, id uuid.UUID, by time.Time) []int64 {
	v.t.Helper()
	sh, err := v.e.show(v.t.Context(), h.ShowID)
	if err != nil {
		v.t.Fatal(err)
	}
	tag := holderTag(h.HolderID)
	ks, err := sh.scriptKeys(tag, h.SeatIDs)
	if err != nil {
		v.t.Fatal(err)
	}
	args := scriptArgs(tag, []any{h.Token, h.Generation, commitID(id), newNonce(), v.e.reserveLife().Milliseconds(), by.UnixMilli()}, h.SeatIDs)
	res, err := reserveInts(lua.Reserve.Run(v.t.Context(), v.rdb, ks, args...))
	if err != nil {
		v.t.Fatalf("reserve: %v", err)
	}
	return res
}

// reserveInts is a reserve.lua reply's two numbers (the hold's generation or why it is
// not reserved, and its life), without the offer a reservation adds.
func reserveInts(cmd *redis.Cmd) ([]int64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(res) < 2 {
		return nil, fmt.Errorf("reserve reply %v", res)
	}
	a, _ := res[0].(int64)
	b, _ := res[1].(int64)
	return []int64{a, b}, nil
}

// reserveAs reserves h for a batch of commit id that will never decide (its process
// died after its check), as reserve.lua does for a live one.
func (v *env) reserveAs(h Hold, id uuid.UUID) {
	v.t.Helper()
	if res := v.reserveCheck(h, id, time.Now().Add(5*time.Second)); res[0] != h.Generation {
		v.t.Fatalf("reserve: %v", res)
	}
}

// TestFrozenRedisAtTheCheckLeavesNoReservation: Redis freezes between a
// batch's fence lock and its Redis check, for longer than the caller's 700 ms deadline.
// The caller gets ErrUnavailable by its deadline and nothing is booked; Redis, once it
// thaws, runs the check the batch no longer waits for. From then on, within the
// reservation's own bound (reserveLife) and whatever the hold's TTL (10 min here), the
// hold is its owner's again: Release works, or Extend and a retried Confirm, which books.
func TestFrozenRedisAtTheCheckLeavesNoReservation(t *testing.T) {
	t.Parallel()
	for _, then := range []string{"release", "extend and confirm"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel()
			v, srv := privateEnv(t)
			v.show("fz", "A1", "A2")
			// A running engine: its connections are open (a pipeline to a frozen Redis
			// on a new connection would not get past the handshake).
			v.sell("fz", "A2")
			h := v.hold("fz", 10*time.Minute, "", "A1")
			thawed := make(chan time.Time, 1)
			var once sync.Once
			v.e.hooks.beforeCommit = func(context.Context) {
				once.Do(func() {
					srv.Pause()
					time.AfterFunc(1500*time.Millisecond, func() { srv.Resume(); thawed <- time.Now() })
				})
			}
			const deadline = 700 * time.Millisecond
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			start := time.Now()
			_, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k1"})
			took := time.Since(start)
			cancel()
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("confirm with Redis frozen at its check: %v, want ErrUnavailable", err)
			}
			if took > deadline+2*time.Second {
				t.Fatalf("confirm answered after %v, its deadline was %v", took, deadline)
			}
			t.Logf("confirm answered %v after %v (its deadline: %v)", err, took.Round(time.Millisecond), deadline)
			at := <-thawed
			within := time.Until(at.Add(v.e.reserveLife() + 2*time.Second))
			switch then {
			case "release":
				waitFor(t, "release after the thaw", within, tryWithin(t, "release", func(ctx context.Context) error { return v.e.Release(ctx, h) }))
				t.Logf("released %v after the thaw (the reservation's bound: %v)", time.Since(at).Round(time.Millisecond), v.e.reserveLife())
			default:
				var h2 Hold
				waitFor(t, "extend after the thaw", within, tryWithin(t, "extend", func(ctx context.Context) (err error) {
					h2, err = v.e.Extend(ctx, h, 5*time.Minute)
					return err
				}))
				if _, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{IdempotencyKey: "k1"}); err != nil {
					t.Fatalf("confirm again after the thaw: %v", err)
				}
				if n := v.bookings("fz"); n != 2 {
					t.Fatalf("%d bookings, want 2", n)
				}
			}
			if n := v.doubleBookings(); n != 0 {
				t.Fatalf("%d double bookings", n)
			}
		})
	}
}

// TestLostReservationReplyIsGivenBack: Redis runs a batch's check (the hold is reserved)
// and its reply is lost, again on each retry, until the caller's deadline. Nothing is
// booked, and once Redis answers the engine gives the hold back as it was, well before
// its reservation would lapse: Release works.
func TestLostReservationReplyIsGivenBack(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t)
	proxy := testsvc.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(testsvc.RedisOptions(t, "redis://"+proxy.Addr()+"/0"))
	t.Cleanup(func() { rdb.Close() })
	v := newEnvWith(t, testsvc.Database(t), rdb)
	v.show("lr", "A1", "A2")
	v.sell("lr", "A2")
	h := v.hold("lr", 10*time.Minute, "", "A1")
	before := v.holdValue("lr", "A1")
	var cut atomic.Bool
	fn := []byte(lua.Reserve.Name())
	proxy.SetCut(func(chunk []byte) bool { return cut.Load() && bytes.Contains(chunk, fn) })
	cut.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	_, err := v.e.Confirm(ctx, h, ConfirmOptions{})
	cancel()
	cut.Store(false)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm whose check's reply was lost: %v, want ErrUnavailable", err)
	}
	if proxy.Cuts.Load() == 0 {
		t.Fatal("setup: no reply was cut")
	}
	took := waitFor(t, "the hold given back", v.e.reserveLife()/2, func() bool { return v.holdValue("lr", "A1") == before })
	t.Logf("given back %v after the confirmation's answer (its reservation would lapse after %v)", took.Round(time.Millisecond), v.e.reserveLife())
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatalf("release after the give-back: %v", err)
	}
	if n := v.bookings("lr"); n != 1 {
		t.Fatalf("%d bookings, want 1", n)
	}
}

// TestDeadBatchReservationLapses: a batch reserved three holds of 10 minutes and never
// decided (its process died after the check). While its reservation lasts, Release and
// Extend wait (ErrUnavailable by their deadlines); once it has lapsed, within its own
// bound, the holds are their owners' again: one releases, one extends and books, and
// one is confirmed as it is (checked first, verify.lua, then reserved anew).
func TestDeadBatchReservationLapses(t *testing.T) {
	t.Parallel()
	v := newEnv(t, shortReservations)
	v.show("dl", "A1", "A2", "A3")
	h1, h2, h4 := v.hold("dl", 10*time.Minute, "", "A1"), v.hold("dl", 10*time.Minute, "", "A2"), v.hold("dl", 10*time.Minute, "", "A3")
	start := time.Now()
	for _, h := range []Hold{h1, h2, h4} {
		v.reserveAs(h, uuid.New())
	}
	if tryWithin(t, "release while reserved", func(ctx context.Context) error { return v.e.Release(ctx, h1) })() {
		t.Fatal("a reserved hold was released")
	}
	within := time.Until(start.Add(v.e.reserveLife() + 2*time.Second))
	// A release whose answer was ErrUnavailable (its deadline, on a busy machine) may have
	// released the hold: the next one then finds it released, which is the release.
	unanswered := false
	waitFor(t, "release after the lapse", within, tryWithin(t, "release", func(ctx context.Context) error {
		err := v.e.Release(ctx, h1)
		var lost *HoldLostError
		if unanswered && errors.As(err, &lost) && lost.Cause == HoldReleased {
			return nil
		}
		unanswered = errors.Is(err, ErrUnavailable)
		return err
	}))
	t.Logf("released %v after the dead batch's check (the reservation's bound: %v)", time.Since(start).Round(time.Millisecond), v.e.reserveLife())
	var h3 Hold
	waitFor(t, "extend after the lapse", within, tryWithin(t, "extend", func(ctx context.Context) (err error) {
		h3, err = v.e.Extend(ctx, h2, 5*time.Minute)
		return err
	}))
	if v.holdValue("dl", "A2") == "" || strings.Contains(v.holdValue("dl", "A2"), "|") {
		t.Fatalf("hold value after the extension %q, want the hold's own", v.holdValue("dl", "A2"))
	}
	if _, err := v.e.Confirm(t.Context(), h3, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm after the lapse: %v", err)
	}
	h4.ExpiresAt = time.Time{} // unsaid: checked before it queues
	if _, err := v.e.Confirm(t.Context(), h4, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm of a hold whose reservation lapsed: %v", err)
	}
	if v.bookings("dl") != 2 || v.doubleBookings() != 0 {
		t.Fatalf("%d bookings (want 2), %d double", v.bookings("dl"), v.doubleBookings())
	}
}

// TestLapsedReservationOfABooking: a booking committed and its sold markers never
// reached Redis (the repair could not write them either), so its hold's keys stay,
// reserved, past the reservation's end. A Release or Extend then still answers
// ErrHoldLost — the database has the hold's booking — and another holder is refused.
func TestLapsedReservationOfABooking(t *testing.T) {
	t.Parallel()
	v := newEnv(t, shortReservations)
	v.show("lb", "A1")
	h := v.hold("lb", 10*time.Minute, "", "A1")
	v.e.hooks.afterCommit = func(ctx context.Context) bool {
		if _, err := v.pool.Exec(ctx, "DELETE FROM marker_outbox"); err != nil {
			t.Errorf("delete the owed markers: %v", err)
		}
		return false
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	end := v.reserveEnd("lb", "A1")
	waitFor(t, "the reservation's end", v.e.reserveLife()+2*time.Second, func() bool {
		now, err := v.rdb.Time(t.Context()).Result()
		return err == nil && now.UnixMilli() > end
	})
	if err := v.e.Release(t.Context(), h); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("release of a booked hold past its reservation: %v, want ErrHoldLost", err)
	}
	if _, err := v.e.Extend(t.Context(), h, time.Minute); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("extend of a booked hold past its reservation: %v, want ErrHoldLost", err)
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "lb", SeatIDs: []string{"A1"}}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("another hold on the booked seat: %v, want ErrSeatsUnavailable", err)
	}
	if v.holdValue("lb", "A1") == "" {
		t.Fatal("setup: the hold's keys are gone")
	}
}

// TestLateCheckReservesNothing: a batch's check that Redis runs only past its late-check
// bound (Redis was frozen with the call queued) changes nothing:
// the hold stays as it was, its owner's.
func TestLateCheckReservesNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("lt", "A1")
	h := v.hold("lt", 10*time.Minute, "", "A1")
	before := v.holdValue("lt", "A1")
	if res := v.reserveCheck(h, uuid.New(), time.Now().Add(-time.Second)); res[0] != holdLate {
		t.Fatalf("a check past its batch's wait: %v, want {%d, 0}", res, holdLate)
	}
	if got := v.holdValue("lt", "A1"); got != before {
		t.Fatalf("hold value after a late check %q, before %q", got, before)
	}
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatalf("release after a late check: %v", err)
	}
}
