package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/internal/lua"
)

// TestLapsedGiveBackRacesRecommit : a batch of commit id x reserved a hold and
// its COMMIT's outcome is unknown (the settler's); its reservation lapsed (the settler's
// renewals did not reach Redis in time). A Release finds it LAPSED and asks the database,
// which has no booking of it yet. Before the Release's give-back runs, the settler renews
// the reservation for x (reserve.lua renews a lapsed reservation of the same id) and
// commits the confirmation again (commitAgain, same id): the batch has the hold reserved
// and is inside its transaction. The give-back (unreserve.lua) then gives back a live
// reservation — it gives back any reservation of x, lapsed or not — and the Release
// deletes the hold while its booking commits: Release and Confirm of one hold both
// succeed. The interleaving is driven step by step: release.lua, holdBooked, then the
// re-commit with the give-back and Release run from its batch's afterReserve hook.
func TestLapsedGiveBackRacesRecommit(t *testing.T) {
	t.Parallel()
	v := newEnv(t, shortReservations)
	v.show("lg", "A1")
	h := v.hold("lg", 10*time.Minute, "", "A1")
	x := uuid.New()
	if res := v.reserveCheck(h, x, time.Now().Add(5*time.Second)); res[0] != h.Generation {
		t.Fatalf("reserve: %v", res)
	}
	end := v.reserveEnd("lg", "A1")
	waitFor(t, "the reservation's end", v.e.reserveLife()+2*time.Second, func() bool {
		now, err := v.rdb.Time(t.Context()).Result()
		return err == nil && now.UnixMilli() > end
	})
	sh, err := v.e.show(t.Context(), "lg")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := sh.scriptKeys("", h.SeatIDs)
	if err != nil {
		t.Fatal(err)
	}
	// The Release's first steps (runDecided): LAPSED, and no booking in the database.
	reply, err := lua.Release.Run(t.Context(), v.rdb, ks, scriptArgs("", []any{h.Token, h.Generation, releaseMemory.Milliseconds()}, h.SeatIDs)...).Slice()
	if err != nil || len(reply) != 2 || reply[0] != "LAPSED" {
		t.Fatalf("release.lua: %v %v, want LAPSED", reply, err)
	}
	if err := v.e.holdBooked(t.Context(), sh, h.Token); err != nil {
		t.Fatalf("holdBooked: %v", err)
	}
	// The settler commits x again; while its batch has the hold reserved, the Release
	// goes on: its give-back, then release.lua again (as runDecided does).
	var releaseErr error
	v.e.hooks.afterReserve = func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if err := v.e.giveBackLapsed(rctx, sh, h.Token, ks, "", h.SeatIDs, reply); err != nil {
			releaseErr = err
			return
		}
		releaseErr = v.e.Release(rctx, h)
	}
	c := &confirmation{sh: sh, seats: h.SeatIDs, fenced: fencedSeats(h.SeatIDs), ks: ks, h: h,
		fp: fingerprint(sh.id, h.SeatIDs, h.Token, h.Generation), hold: holdHash(sh.id, h.Token)}
	cctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := v.e.commit(cctx, c, h.Generation, x, time.Now().Add(v.e.reserveLife()))
	if err == nil {
		err = r.err
	}
	t.Logf("re-commit of x: %v; Release during its batch: %v; bookings %d", err, releaseErr, v.bookings("lg"))
	if err == nil && releaseErr == nil {
		t.Fatalf("Release of the hold succeeded while its booking committed (booking %s)", x)
	}
}

// TestPolledSeatMapOfAShowCreatedAgain : engine A serves show s's seat map as a
// polled (shared) map, every watched slot being taken. The show is deleted and created
// again with other seats through engine B, and A learns of the new show (a hold of one of
// its seats). A's next SeatMap of s, within the polled map's second, is the OLD show's:
// dropShow drops the watched view of the old show but not its polled map (e.polled.m is
// keyed by show id, as is its shared build "polled\x00"+id, without the epoch).
func TestPolledSeatMapOfAShowCreatedAgain(t *testing.T) {
	t.Parallel()
	v := newEnv(t, shortUnknown, func(c *Config) { c.MaxWatchedShows = 1 })
	ctx := t.Context()
	a, b := v.e, v.twin()
	v.show("w", "W1")
	v.show("s", "O1", "O2", "O3")
	if _, err := a.SeatMap(ctx, "w"); err != nil { // takes A's only watched slot
		t.Fatal(err)
	}
	m, err := a.SeatMap(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if m.Layout[0].ID != "O1" {
		t.Fatalf("setup: A's map of the old show starts with %q", m.Layout[0].ID)
	}
	built := time.Now()
	if err := b.DeleteShow(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateShow(ctx, "s", []string{"N1", "N2", "N3"}); err != nil {
		t.Fatal(err)
	}
	// A, whose copy of s is the old show's, keeps polling its map (as its readers do)
	// while a hold of a new seat through A is refused; the identity is read again a
	// second after the last read (5ac1fd3), and then the hold succeeds.
	waitFor(t, "a hold of the new show through A", 10*time.Second, func() bool {
		if _, err := a.SeatMap(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		built = time.Now()
		_, err := a.Hold(ctx, HoldRequest{ShowID: "s", SeatIDs: []string{"N1"}, TTL: time.Minute})
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatalf("engine A, a hold of the new show: %v", err)
		}
		return err == nil
	})
	m, err = a.SeatMap(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A's map of s %v after the old map was built: %d seats, first %q", time.Since(built).Round(time.Millisecond), len(m.Layout), m.Layout[0].ID)
	if m.Layout[0].ID != "N1" {
		t.Fatalf("engine A's seat map of the show created again is the deleted show's (first seat %q, want N1)", m.Layout[0].ID)
	}
}

// TestLostReplyGiveBackRacesRecommit: a batch's check of commit id x ran in Redis (the
// hold is reserved for x) and its reply was lost; the batch, whose connection was cut at
// once, answered well before its wait for the reply was over, and the give-back of that
// check waits for Redis in the background (giveBackLater). Meanwhile the settler commits
// x again (commitAgain: the same hold, generation and commit id), and its batch reserves
// the hold anew. The lost reply's give-back, running then, must leave that reservation
// alone: a Release while the re-commit books is refused (ErrUnavailable: the hold is
// being committed), never a success. Driven step by step: the lost check, then the
// re-commit, whose batch's afterReserve hook runs the give-back and the Release.
func TestLostReplyGiveBackRacesRecommit(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("lx", "A1")
	h := v.hold("lx", 10*time.Minute, "", "A1")
	sh, err := v.e.show(ctx, "lx")
	if err != nil {
		t.Fatal(err)
	}
	ks, err := sh.scriptKeys("", h.SeatIDs)
	if err != nil {
		t.Fatal(err)
	}
	c := &confirmation{sh: sh, seats: h.SeatIDs, fenced: fencedSeats(h.SeatIDs), ks: ks, h: h,
		fp: fingerprint(sh.id, h.SeatIDs, h.Token, h.Generation), hold: holdHash(sh.id, h.Token)}
	x := uuid.New()
	// The lost check: Redis ran it; its batch would have waited for the reply until by.
	by := time.Now().Add(5 * time.Second)
	lost := &confirmReq{ctx: ctx, c: c, gen: h.Generation, id: x, nonce: newNonce()}
	for _, cmd := range v.e.runScripts(ctx, v.e.reserveCalls([]*confirmReq{lost}, by)) {
		if res, err := reserveInts(cmd); err != nil || res[0] != h.Generation {
			t.Fatalf("setup: the lost check: %v %v", res, err)
		}
	}
	var releaseErr, giveBackErr error
	v.e.hooks.afterReserve = func(context.Context) {
		if failed := v.e.unreserve([]giveBack{{lost, lost.nonce, time.Time{}}}); len(failed) > 0 {
			giveBackErr = errors.New("the give-back got no answer")
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		releaseErr = v.e.Release(rctx, h)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := v.e.commit(cctx, c, h.Generation, x, time.Now().Add(v.e.reserveLife()))
	if err == nil {
		err = r.err
	}
	v.e.hooks.afterReserve = nil
	t.Logf("re-commit of x: %v; Release during its batch: %v; bookings %d", err, releaseErr, v.bookings("lx"))
	if giveBackErr != nil {
		t.Fatal(giveBackErr)
	}
	if err != nil {
		t.Fatalf("the re-commit of x: %v, want booked", err)
	}
	if !errors.Is(releaseErr, ErrUnavailable) {
		t.Fatalf("Release while the re-commit of x booked: %v, want ErrUnavailable (booking %s)", releaseErr, x)
	}
	if n := v.bookings("lx"); n != 1 {
		t.Fatalf("%d bookings, want 1", n)
	}
}

// TestGiveBackNamesItsCheck: two checks of one commit id, the later one (larger nonce)
// run by Redis first, as a frozen Redis may run two connections' calls. The reservation
// keeps the later check's nonce; the earlier check's give-back leaves it alone, and the
// later one's gives the hold back as it was.
func TestGiveBackNamesItsCheck(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	c := v.checksOf("gn")
	early, late := newNonce(), newNonce()
	c.reserve(late, early)
	if n := c.giveBack(early); n != 0 {
		t.Fatalf("the earlier check's give-back freed %d seats of the later check's reservation (%q)", n, v.holdValue("gn", "A1"))
	}
	if n := c.giveBack(late); n != 1 || v.holdValue("gn", "A1") != c.before {
		t.Fatalf("the later check's give-back: %d seats, hold %q, want 1 and %q", n, v.holdValue("gn", "A1"), c.before)
	}
}

// TestGiveBackAcrossEngines: an exchange's commit whose check's reply was lost on one
// engine, retried on another under the same commit id (its booking's). The first
// engine has drawn many nonces, the second few; the first engine's give-back of its
// lost check, sent after the retry's check, must leave the retry's reservation alone.
func TestGiveBackAcrossEngines(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	c := v.checksOf("ga")
	var first, second nonceSource // two processes
	for range 100 {
		first.next()
	}
	lost := first.next()
	retry := second.next()
	c.reserve(lost, retry)
	if n := c.giveBack(lost); n != 0 {
		t.Fatalf("the first engine's give-back (nonce %s) freed %d seats of the retry's reservation (nonce %s): %q",
			lost, n, retry, v.holdValue("ga", "A1"))
	}
	if n := c.giveBack(retry); n != 1 || v.holdValue("ga", "A1") != c.before {
		t.Fatalf("the retry's give-back: %d seats, hold %q, want 1 and %q", n, v.holdValue("ga", "A1"), c.before)
	}
}

// checks drives a batch's checks (reserve.lua) and give-backs (unreserve.lua) of one
// commit id on a hold of seat A1 by hand.
type checks struct {
	v      *env
	h      Hold
	ks     []string
	id     string
	before string // the hold's value before any check
}

// checksOf creates show with seat A1, holds it, and returns its checks for a new
// commit id.
func (v *env) checksOf(show string) *checks {
	v.t.Helper()
	v.show(show, "A1")
	h := v.hold(show, 10*time.Minute, "", "A1")
	sh, err := v.e.show(v.t.Context(), show)
	if err != nil {
		v.t.Fatal(err)
	}
	ks, err := sh.scriptKeys("", h.SeatIDs)
	if err != nil {
		v.t.Fatal(err)
	}
	return &checks{v: v, h: h, ks: ks, id: commitID(uuid.New()), before: v.holdValue(show, "A1")}
}

// reserve runs a check under each nonce, in order; each must reserve the hold.
func (c *checks) reserve(nonces ...string) {
	c.v.t.Helper()
	by := time.Now().Add(5 * time.Second).UnixMilli()
	for _, nonce := range nonces {
		args := scriptArgs("", []any{c.h.Token, c.h.Generation, c.id, nonce, c.v.e.reserveLife().Milliseconds(), by}, c.h.SeatIDs)
		if res, err := reserveInts(lua.Reserve.Run(c.v.t.Context(), c.v.rdb, c.ks, args...)); err != nil || res[0] != c.h.Generation {
			c.v.t.Fatalf("reserve under nonce %s: %v %v", nonce, res, err)
		}
	}
}

// giveBack gives back the check of nonce and returns the seats it freed.
func (c *checks) giveBack(nonce string) int64 {
	c.v.t.Helper()
	res, err := lua.Unreserve.Run(c.v.t.Context(), c.v.rdb, c.ks, scriptArgs("", []any{c.id, nonce}, c.h.SeatIDs)...).Slice()
	if err != nil {
		c.v.t.Fatalf("unreserve under nonce %s: %v", nonce, err)
	}
	return res[0].(int64)
}

// TestLateCheckIsGivenBack: a batch's check whose connection is held past the batch's
// wait (1.5 s) reaches Redis only after a give-back of its lost reply went through on
// another connection, and reserves the hold then (before its late-check bound). The
// give-back is made again after that bound has passed, so once it has the hold is its
// owner's again, not only when the reservation lapses (reserveLife, 15.5 s), and the
// confirmation's retry books it.
func TestLateCheckIsGivenBack(t *testing.T) {
	t.Parallel()
	v, proxy := newProxiedEnv(t)
	ctx := t.Context()
	v.show("s1", "A1")
	h := v.hold("s1", 10*time.Minute, "alice", "A1")
	var armed, gaveBack atomic.Bool
	var giveBacks atomic.Int32
	armed.Store(true)
	released := make(chan struct{})
	proxy.SetCut(func(chunk []byte) bool {
		switch {
		case bytes.Contains(chunk, []byte("_unreserve")):
			giveBacks.Add(1)
			gaveBack.Store(true)
		case bytes.Contains(chunk, []byte("_reserve")) && armed.CompareAndSwap(true, false):
			// This connection only: held until a give-back has passed on another one
			// (and its reply had time to come back), well before the check's bound.
			for held := time.Now(); !gaveBack.Load() && time.Since(held) < 4*time.Second; {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			close(released)
		}
		return false
	})
	start := time.Now()
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm with its check held: %v, want ErrUnavailable", err)
	}
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the held check was never let through")
	}
	if !gaveBack.Load() {
		t.Fatal("no give-back passed before the held check: the case is not the one tested")
	}
	// The check runs in Redis now, after that give-back, and reserves the hold. Once its
	// bound has passed, a give-back made since has undone it.
	bound := v.cfg.StatementTimeout + stallGrace
	waitFor(t, "the hold given back once its check's bound has passed", bound+3*time.Second, func() bool {
		return time.Since(start) > bound+v.cfg.MarkerRepairInterval && !strings.Contains(v.holdValue("s1", "A1"), "|")
	})
	// Redis answered every give-back: one while the check could still reserve and one
	// after its bound do it, not one every repair interval until the bound (24).
	if n := giveBacks.Load(); n > 4 {
		t.Errorf("%d give-backs of the lost check, want at most 4", n)
	}
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k"}); err != nil {
		t.Fatalf("the retry: %v", err)
	}
}
