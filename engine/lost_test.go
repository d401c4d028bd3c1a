package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// lostBy calls Confirm, Extend and Release with h and returns what each answered.
func (v *env) lostBy(h Hold) map[string]error {
	v.t.Helper()
	_, cerr := v.e.Confirm(v.t.Context(), h, ConfirmOptions{})
	_, eerr := v.e.Extend(v.t.Context(), h, time.Minute)
	rerr := v.e.Release(v.t.Context(), h)
	return map[string]error{"confirm": cerr, "extend": eerr, "release": rerr}
}

// wantLost checks that every answer is ErrHoldLost from a *HoldLostError of cause, and
// returns those errors.
func wantLost(t *testing.T, what string, errs map[string]error, cause HoldLostCause) map[string]*HoldLostError {
	t.Helper()
	out := map[string]*HoldLostError{}
	for op, err := range errs {
		var hl *HoldLostError
		if !errors.Is(err, ErrHoldLost) || !errors.As(err, &hl) || hl.Cause != cause {
			t.Fatalf("%s: %s: %v, want ErrHoldLost of cause %s", what, op, err, cause)
		}
		if !strings.Contains(err.Error(), op+": ") {
			t.Errorf("%s: %s: %q does not say which call", what, op, err)
		}
		out[op] = hl
	}
	return out
}

// TestHoldLostSaysWhy: a hold presented to Confirm, Extend or Release that is not
// current is refused with the cause its caller may know: expired at its expiry, released
// at the release, confirmed with its booking; and otherwise not current.
func TestHoldLostSaysWhy(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2", "A3", "A4")

	t.Run("expired", func(t *testing.T) {
		h := v.hold("s1", 50*time.Millisecond, "alice", "A1")
		v.waitExpired(h)
		for op, hl := range wantLost(t, "an expired hold", v.lostBy(h), HoldExpired) {
			if !hl.At.Equal(h.ExpiresAt) || !strings.Contains(hl.Error(), "expired at "+h.ExpiresAt.UTC().Format(time.RFC3339Nano)) {
				t.Errorf("%s: %v, want expired at %v", op, hl, h.ExpiresAt)
			}
		}
		// Without its expiry the engine cannot tell an expired hold from a forged one.
		unknown := h
		unknown.ExpiresAt = time.Time{}
		wantLost(t, "an expired hold without its expiry", v.lostBy(unknown), HoldNotCurrent)
	})

	t.Run("released", func(t *testing.T) {
		h := v.hold("s1", time.Minute, "alice", "A2")
		before := time.Now().Add(-time.Second) // Redis's clock, give or take
		if err := v.e.Release(t.Context(), h); err != nil {
			t.Fatal(err)
		}
		after := time.Now().Add(time.Second)
		for op, hl := range wantLost(t, "a released hold", v.lostBy(h), HoldReleased) {
			if hl.At.Before(before) || hl.At.After(after) {
				t.Errorf("%s: released at %v, want between %v and %v", op, hl.At, before, after)
			}
		}
		// The tombstone outlives the hold's expiry by releaseMemory, no more.
		k := newKeys(v.cfg.KeyPrefix, "s1").released(holderTag("alice"), h.Token)
		if d := v.rdb.PTTL(t.Context(), k).Val(); d <= releaseMemory || d > releaseMemory+time.Minute {
			t.Errorf("the release's tombstone lives %v, want the hold's minute left + %v", d, releaseMemory)
		}
	})

	t.Run("confirmed", func(t *testing.T) {
		h := v.hold("s1", time.Minute, "alice", "A3")
		b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for op, hl := range wantLost(t, "a confirmed hold", v.lostBy(h), HoldConfirmed) {
			var se *HoldSpentError
			if hl.BookingID != b.ID || !errors.As(hl, &se) || se.BookingID != b.ID || !strings.Contains(hl.Error(), b.ID.String()) {
				t.Errorf("%s: %v, want booking %s named", op, hl, b.ID)
			}
		}
	})
}

// TestHoldLostSaysNothingOfOthers: a hold presented by another holder (with the owner's
// token), or with a forged token, is refused the same way whatever the seats' state —
// free, held by someone, released by someone, sold — and never names a time or a
// booking: the refusal tells nothing of another holder's hold.
func TestHoldLostSaysNothingOfOthers(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "F1", "H1", "R1", "S1")
	held := v.hold("s1", time.Minute, "alice", "H1")
	released := v.hold("s1", time.Minute, "alice", "R1")
	if err := v.e.Release(t.Context(), released); err != nil {
		t.Fatal(err)
	}
	sold := v.hold("s1", time.Minute, "alice", "S1")
	b, err := v.e.Confirm(t.Context(), sold, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	free := held
	free.SeatIDs = []string{"F1"}
	// What mallory can present: alice's holds under her own holder id, and holds of
	// alice's seats and generations with a token of her own.
	var presented []Hold
	for _, h := range []Hold{free, held, released, sold} {
		stolen := h
		stolen.HolderID = "mallory"
		forged := h
		forged.Token = newToken()
		presented = append(presented, stolen, forged)
	}
	answers := map[string]string{}
	for i, h := range presented {
		for op, hl := range wantLost(t, "mallory's hold "+h.SeatIDs[0], v.lostBy(h), HoldNotCurrent) {
			if !hl.At.IsZero() || hl.BookingID != uuid.Nil || strings.Contains(hl.Error(), b.ID.String()) {
				t.Fatalf("mallory's %s of %v learned something: %+v %v", op, h.SeatIDs, hl, hl)
			}
			var se *HoldSpentError
			if errors.As(hl, &se) {
				t.Fatalf("mallory's %s of %v learned the hold made a booking: %v", op, h.SeatIDs, hl)
			}
			if prev, ok := answers[op]; ok && prev != hl.Error() {
				t.Fatalf("presented hold %d: %s answered %q, another %q: the answer depends on the seat", i, op, hl.Error(), prev)
			}
			answers[op] = hl.Error()
		}
	}
	// Alice's own holds are still as they were.
	if _, err := v.e.Extend(t.Context(), held, time.Minute); err != nil {
		t.Fatalf("alice's hold after mallory's calls: %v", err)
	}
}
