package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestFrozenRedisAtTheCheckLeavesNoReservation (issue 36): Redis freezes between a
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
			at := <-thawed
			bound := v.e.reserveLife()
			// attempt runs op with a short deadline: a hold still reserved keeps it
			// waiting (ErrUnavailable when the deadline ends).
			attempt := func(op func(context.Context) error) func() bool {
				return func() bool {
					ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
					defer cancel()
					err := op(ctx)
					if err != nil && !errors.Is(err, ErrUnavailable) {
						t.Fatalf("%s after the thaw: %v", then, err)
					}
					return err == nil
				}
			}
			within := time.Until(at.Add(bound + 2*time.Second))
			switch then {
			case "release":
				waitFor(t, "release after the thaw", within, attempt(func(ctx context.Context) error { return v.e.Release(ctx, h) }))
			default:
				var h2 Hold
				waitFor(t, "extend after the thaw", within, attempt(func(ctx context.Context) (err error) {
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
