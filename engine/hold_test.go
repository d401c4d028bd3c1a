package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

func TestHoldOneSeatManyClients(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1")
	const n = 200
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []Hold
		refused int
	)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			h, err := v.e.Hold(context.Background(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, HolderID: "c" + string(rune('a'+i%26)) + string(rune('0'+i/26))})
			mu.Lock()
			defer mu.Unlock()
			var sue *SeatsUnavailableError
			switch {
			case err == nil:
				winners = append(winners, h)
			case errors.As(err, &sue) && errors.Is(err, ErrSeatsUnavailable) && slices.Equal(sue.SeatIDs, []string{"A1"}):
				refused++
			default:
				t.Errorf("hold: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 || refused != n-1 {
		t.Fatalf("%d winners and %d refusals, want 1 and %d", len(winners), refused, n-1)
	}
	if got := v.holdValue("s1", "A1"); !strings.HasPrefix(got, winners[0].Token+":") {
		t.Fatalf("A1 holds %q, not the winner's token", got)
	}
	if c := v.counter("s1"); c != 1 {
		t.Fatalf("counter %d after one grant, want 1", c)
	}
}

func TestHoldOverlappingSetsAllOrNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := seatNames(30)
	v.show("s1", seats...)
	type outcome struct {
		req   []string
		hold  Hold
		taken []string
		err   error
	}
	const n = 100
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		perm := rand.Perm(len(seats))[:3]
		req := []string{seats[perm[0]], seats[perm[1]], seats[perm[2]]}
		outs[i].req = req
		wg.Go(func() {
			<-start
			h, err := v.e.Hold(context.Background(), HoldRequest{ShowID: "s1", SeatIDs: req})
			outs[i].hold, outs[i].err = h, err
			var sue *SeatsUnavailableError
			if errors.As(err, &sue) {
				outs[i].taken = sue.SeatIDs
			}
		})
	}
	close(start)
	wg.Wait()

	owner := map[string]string{} // seat -> token of the live hold on it
	tokens := map[string]bool{}
	winners := 0
	for _, o := range outs {
		if o.err != nil {
			continue
		}
		winners++
		tokens[o.hold.Token] = true
		for _, s := range o.hold.SeatIDs {
			if prev, ok := owner[s]; ok {
				t.Fatalf("seat %s granted to two holds (%s..., %s...)", s, prev[:6], o.hold.Token[:6])
			}
			owner[s] = o.hold.Token
		}
	}
	for _, o := range outs {
		if o.err == nil {
			continue
		}
		if !errors.Is(o.err, ErrSeatsUnavailable) {
			t.Fatalf("refusal %v is not ErrSeatsUnavailable", o.err)
		}
		if len(o.taken) == 0 {
			t.Fatalf("refusal names no seat")
		}
		for _, s := range o.taken {
			if !slices.Contains(o.req, s) {
				t.Fatalf("refusal names %s, which was not requested (%v)", s, o.req)
			}
			if _, held := owner[s]; !held {
				t.Fatalf("refusal names %s, which no winner holds", s)
			}
		}
	}
	// Redis holds exactly the winners' seats, each under its winner's token: a refused
	// request left nothing behind.
	for _, s := range seats {
		val := v.holdValue("s1", s)
		tok, ok := owner[s]
		switch {
		case ok && !strings.HasPrefix(val, tok+":"):
			t.Fatalf("seat %s holds %q, want the winner's token", s, val)
		case !ok && val != "":
			t.Fatalf("seat %s no winner holds has a hold key %q", s, val)
		}
	}
	if c := v.counter("s1"); c != int64(winners) {
		t.Fatalf("counter %d, want %d (once per granted hold)", c, winners)
	}
}

func TestHoldExpiresThenAnotherHolderGetsLargerGeneration(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	first := v.hold("s1", time.Second, "alice", "A1", "A2") // outlives the refused hold below on a loaded machine
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A2"}, HolderID: "bob"}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold on a held seat: %v, want ErrSeatsUnavailable", err)
	}
	v.waitExpired(first)
	second := v.hold("s1", time.Minute, "bob", "A2")
	if second.Generation <= first.Generation {
		t.Fatalf("generation %d after expiry, want > %d", second.Generation, first.Generation)
	}
	states, err := v.e.Seats(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if states[0].Status != SeatFree || states[1].Status != SeatHeld || states[1].ExpiresAt == nil {
		t.Fatalf("seat map %+v, want A1 free and A2 held", states)
	}
}

func TestExpiredOwnerCannotTouchNewHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1")
	old := v.hold("s1", 100*time.Millisecond, "alice", "A1")
	v.waitExpired(old)
	cur := v.hold("s1", time.Minute, "bob", "A1")
	before := v.holdValue("s1", "A1")

	forged := []Hold{
		old, // the expired owner, as it was
		{ShowID: "s1", SeatIDs: []string{"A1"}, Token: old.Token, Generation: cur.Generation, HolderID: "bob"},     // old token, new generation
		{ShowID: "s1", SeatIDs: []string{"A1"}, Token: cur.Token, Generation: old.Generation, HolderID: "bob"},     // new token, old generation
		{ShowID: "s1", SeatIDs: []string{"A1"}, Token: cur.Token, Generation: cur.Generation, HolderID: "mallory"}, // right token, other holder
	}
	for i, h := range forged {
		if err := v.e.Release(t.Context(), h); !errors.Is(err, ErrHoldLost) {
			t.Errorf("forged %d: release = %v, want ErrHoldLost", i, err)
		}
		if _, err := v.e.Extend(t.Context(), h, time.Minute); !errors.Is(err, ErrHoldLost) {
			t.Errorf("forged %d: extend = %v, want ErrHoldLost", i, err)
		}
		if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
			t.Errorf("forged %d: confirm = %v, want ErrHoldLost", i, err)
		}
	}
	if after := v.holdValue("s1", "A1"); after != before {
		t.Fatalf("the new owner's hold changed: %q -> %q", before, after)
	}
	if err := v.e.Release(t.Context(), cur); err != nil {
		t.Fatalf("owner release: %v", err)
	}
	if v.holdValue("s1", "A1") != "" {
		t.Fatal("release left the hold key")
	}
}

func TestExtendBoundedByMaxAge(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) {
		c.MaxHoldAge = 2 * time.Second
		c.MaxHoldTTL = time.Second
		c.DefaultHoldTTL = time.Second
	})
	v.show("s1", "A1", "A2")
	h := v.hold("s1", 800*time.Millisecond, "alice", "A1", "A2")
	ext, err := v.e.Extend(t.Context(), h, time.Second)
	if err != nil {
		t.Fatalf("extend within the age: %v", err)
	}
	if !ext.ExpiresAt.After(h.ExpiresAt) {
		t.Fatalf("extend did not move the expiry: %v -> %v", h.ExpiresAt, ext.ExpiresAt)
	}
	pttl := v.rdb.PTTL(t.Context(), newKeys(v.cfg.KeyPrefix, "s1").hold("A2")).Val()
	if pttl < 500*time.Millisecond {
		t.Fatalf("PTTL %v after extending to 1s", pttl)
	}
	// Keep extending: within 2s of the hold's creation (by Redis's clock) it must stop.
	var limitErr error
	deadline := time.Now().Add(5 * time.Second)
	for limitErr == nil && time.Now().Before(deadline) {
		_, limitErr = v.e.Extend(t.Context(), h, time.Second)
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(limitErr, ErrExtendLimit) {
		t.Fatalf("extending past the max age: %v, want ErrExtendLimit", limitErr)
	}
	if _, err := v.e.Extend(t.Context(), h, 2*time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("extend beyond MaxHoldTTL: %v, want ErrInvalidArgument", err)
	}
}

func TestHolderCap(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 4 })
	seats := seatNames(16)
	v.show("s1", seats...)
	a := v.hold("s1", time.Minute, "alice", seats[0], seats[1], seats[2])
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: seats[3:5], HolderID: "alice"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("alice past her cap: %v, want ErrHolderLimit", err)
	}
	if v.holdValue("s1", seats[3]) != "" {
		t.Fatal("a capped hold left a key")
	}
	v.hold("s1", time.Minute, "alice", seats[3])    // up to the cap is fine
	v.hold("s1", time.Minute, "bob", seats[4:8]...) // another holder has a cap of his own
	v.hold("s1", time.Minute, "", seats[8:12]...)   // no holder, no cap
	v.hold("s1", time.Minute, "", seats[12])
	if err := v.e.Release(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	// Released seats stop counting.
	short := v.hold("s1", time.Second, "alice", seats[13], seats[14], seats[15]) // outlives the next call on a loaded machine
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: seats[0:1], HolderID: "alice"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("alice at her cap again: %v, want ErrHolderLimit", err)
	}
	// Expired holds stop counting.
	v.waitExpired(short)
	v.hold("s1", time.Minute, "alice", seats[0], seats[1], seats[2])
}

func TestHoldScriptIsIdempotentByToken(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2", "A3")
	sh, err := v.e.show(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := sh.scriptKeys("", []string{"A1", "A2"})
	token := newToken()
	args := scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2"})
	// A retried command (its reply lost) runs the script again with the same token.
	first, err := lua.Hold.Run(t.Context(), v.rdb, ks, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	second, err := lua.Hold.Run(t.Context(), v.rdb, ks, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if first[0] != "OK" || second[0] != "OK" || first[1] != second[1] || first[3] != second[3] {
		t.Fatalf("retry answered %v, first %v", second, first)
	}
	if c := v.counter("s1"); c != 1 {
		t.Fatalf("counter moved to %d on a retry, want 1", c)
	}
	if n := v.rdb.XLen(t.Context(), sh.k.feed()).Val(); n != 1 || len(first) != 5 || len(second) != 4 {
		t.Fatalf("retry: %d feed entries (want 1), replies %v then %v", n, first, second)
	}
	// The same token on another seat set is not a retry.
	ks2, _ := sh.scriptKeys("", []string{"A2", "A3"})
	if err := lua.Hold.Run(t.Context(), v.rdb, ks2, scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A2", "A3"})...).Err(); err == nil ||
		!strings.HasPrefix(err.Error(), "HOLDFAST_BADARG") {
		t.Fatalf("same token, other seats: %v, want a HOLDFAST_BADARG error", err)
	}
}

func TestScriptsRefuseBadArgumentsBeforeWriting(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2", "A3")
	sh, _ := v.e.show(t.Context(), "s1")
	good, _ := sh.scriptKeys("", []string{"A1", "A2", "A3"})
	before := v.redisSnapshot()
	token := newToken()
	badKeys := append([]string(nil), good...)
	badKeys[3] = sh.k.hold("A3") // the middle seat's key names another seat
	badSold := append([]string(nil), good...)
	badSold[6] = sh.k.hold("A2") // the middle seat's sold bucket is not a sold bucket
	cases := []struct {
		name string
		keys []string
		args []any
	}{
		{"bad seat in the middle", good, scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A:2", "A3"})},
		{"duplicate seat in the middle", good, scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A1", "A3"})},
		{"key of another seat in the middle", badKeys, scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"bad sold bucket in the middle", badSold, scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"missing sold bucket", good[:7], scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"short token", good, scriptArgs("", []any{"abc", 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"zero ttl", good, scriptArgs("", []any{token, 0, 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"fractional ttl", good, scriptArgs("", []any{token, "1.5", 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"negative cap", good, scriptArgs("", []any{token, 60000, -1, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"bad holder tag", good, scriptArgs("zz", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2", "A3"})},
		{"missing seat argument", good, scriptArgs("", []any{token, 60000, 0, unreadRules(sh).arg}, []string{"A1", "A2"})},
	}
	for _, c := range cases {
		err := lua.Hold.Run(t.Context(), v.rdb, c.keys, c.args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "HOLDFAST_BADARG") {
			t.Errorf("%s: %v, want a HOLDFAST_BADARG error", c.name, err)
		}
		if !errors.Is(v.e.redisErr(err), ErrInvalidArgument) {
			t.Errorf("%s: not mapped to ErrInvalidArgument", c.name)
		}
	}
	if after := v.redisSnapshot(); after != before {
		t.Fatalf("a refused script wrote:\nbefore %s\nafter  %s", before, after)
	}
}

// TestTokenMutationsNeverOwn: every one-character mutation of a live token, and random
// tokens, fail to release, extend or confirm the hold.
func TestTokenMutationsNeverOwn(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1")
	h := v.hold("s1", time.Minute, "alice", "A1")
	before := v.holdValue("s1", "A1")
	var guesses []string
	for i := range len(h.Token) {
		for _, c := range "0123456789abcdef" {
			if byte(c) != h.Token[i] {
				guesses = append(guesses, h.Token[:i]+string(c)+h.Token[i+1:])
			}
		}
	}
	for range 100 {
		guesses = append(guesses, newToken())
	}
	for _, g := range guesses {
		f := h
		f.Token = g
		if err := v.e.Release(t.Context(), f); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("release with a guessed token: %v", err)
		}
		if _, err := v.e.Extend(t.Context(), f, time.Minute); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("extend with a guessed token: %v", err)
		}
		if _, err := v.e.Confirm(t.Context(), f, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
			t.Fatalf("confirm with a guessed token: %v", err)
		}
	}
	if v.holdValue("s1", "A1") != before || v.bookings("s1") != 0 {
		t.Fatal("a guessed token changed the hold")
	}
	t.Logf("%d guessed tokens refused", len(guesses))
}
