package engine

import (
	"context"
	"errors"
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
	c := &confirmation{sh: sh, seats: h.SeatIDs, ks: ks, h: h,
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
