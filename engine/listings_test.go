package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestListShowsPagesNewestFirst: shows come newest first with their seat and sold
// counts, a page at a time, each show once.
func TestListShowsPagesNewestFirst(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ids := []string{"a", "b", "c", "d", "e"}
	for _, id := range ids {
		v.show(id, "A1", "A2", "A3")
	}
	h := v.hold("c", time.Minute, "alice", "A1", "A2")
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []ShowInfo
	after := ""
	for range 10 {
		page, err := v.e.ListShows(t.Context(), Page{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("a page of %d, limit 2", len(page))
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1].ID
	}
	if len(got) != len(ids) {
		t.Fatalf("listed %d shows, created %d: %+v", len(got), len(ids), got)
	}
	for i, s := range got {
		if want := ids[len(ids)-1-i]; s.ID != want {
			t.Fatalf("show %d is %s, want %s (newest first)", i, s.ID, want)
		}
		wantSold := 0
		if s.ID == "c" {
			wantSold = 2
		}
		if s.Seats != 3 || s.Sold != wantSold || s.CreatedAt.IsZero() {
			t.Fatalf("%+v: want 3 seats, %d sold", s, wantSold)
		}
	}
	for _, p := range []Page{{Limit: -1}, {Limit: MaxPage + 1}, {After: "bad:id"}} {
		if _, err := v.e.ListShows(t.Context(), p); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("ListShows(%+v): %v, want ErrInvalidArgument", p, err)
		}
	}
}

// TestDeleteShow: a show with a live hold or any booking is refused (ErrShowInUse) and
// left whole; one without goes from PostgreSQL and Redis but its generation counter and
// its rules key (which says it is closed), every engine forgets it, and a show created again under its id hands out larger
// generations.
func TestDeleteShow(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	other := v.twin()
	v.show("booked", "A1", "A2")
	h := v.hold("booked", time.Minute, "alice", "A1")
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := v.e.HolderBookings(t.Context(), "alice", Page{})
	if err != nil || len(b) != 1 {
		t.Fatal(b, err)
	}
	if err := v.e.Cancel(t.Context(), b[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := v.e.DeleteShow(t.Context(), "booked"); !errors.Is(err, ErrShowInUse) {
		t.Fatalf("delete a show with a (cancelled) booking: %v, want ErrShowInUse", err)
	}
	v.show("gone", "A1", "A2")
	held := v.hold("gone", time.Minute, "bob", "A1")
	if _, err := other.Seats(t.Context(), "gone"); err != nil { // the other engine knows it
		t.Fatal(err)
	}
	if err := v.e.DeleteShow(t.Context(), "gone"); !errors.Is(err, ErrShowInUse) || !strings.Contains(err.Error(), "live holds") {
		t.Fatalf("delete a show with a live hold: %v, want ErrShowInUse", err)
	}
	if n := v.count("SELECT count(*) FROM seats WHERE show_id = 'gone'"); n != 2 {
		t.Fatalf("a refused delete left %d seats", n)
	}
	if err := v.e.Release(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	if err := v.e.DeleteShow(t.Context(), "gone"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if n := v.count("SELECT count(*) FROM shows WHERE show_id = 'gone'") + v.count("SELECT count(*) FROM seats WHERE show_id = 'gone'"); n != 0 {
		t.Fatalf("%d rows of the deleted show remain", n)
	}
	keys, err := testsvc.Keys(t.Context(), v.rdb, v.cfg.KeyPrefix+":{gone}:*")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if len(keys) != 2 || !strings.HasSuffix(keys[0], ":gen") || !strings.HasSuffix(keys[1], ":rules") ||
		!strings.HasSuffix(v.rdb.Get(t.Context(), keys[1]).Val(), " closed") {
		t.Fatalf("Redis keys left of the deleted show: %v, want only its generation counter and its rules key, closed", keys)
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "gone", SeatIDs: []string{"A2"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("hold on a deleted show: %v", err)
	}
	waitFor(t, "the other engine forgets the deleted show", 5*time.Second, func() bool {
		_, err := other.Hold(t.Context(), HoldRequest{ShowID: "gone", SeatIDs: []string{"A2"}})
		return errors.Is(err, ErrNotFound)
	})
	if err := v.e.DeleteShow(t.Context(), "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete it again: %v, want ErrNotFound", err)
	}
	v.show("gone", "A1", "A2")
	again := v.hold("gone", time.Minute, "carol", "A1")
	if again.Generation <= held.Generation {
		t.Fatalf("a show created again gave generation %d, not above the deleted one's %d", again.Generation, held.Generation)
	}
}

// TestHolderBookingsAndHolds: a holder sees their own bookings in every show, newest
// first and a page at a time, and the seats they hold now, without tokens; never
// another holder's.
func TestHolderBookingsAndHolds(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("x", "A1", "A2", "A3", "A4")
	v.show("y", "A1", "A2")
	var ids []string
	for _, hs := range []struct{ show, seat string }{{"x", "A1"}, {"y", "A1"}, {"x", "A2"}} {
		h := v.hold(hs.show, time.Minute, "alice", hs.seat)
		b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, b.ID.String())
	}
	v.hold("x", time.Minute, "bob", "A4")
	v.hold("x", time.Minute, "alice", "A3")
	var got []string
	after := ""
	for {
		page, err := v.e.HolderBookings(t.Context(), "alice", Page{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, b := range page {
			if b.HolderID != "alice" {
				t.Fatalf("alice's list has %s's booking", b.HolderID)
			}
			got = append(got, b.ID.String())
		}
		after = page[len(page)-1].ID.String()
	}
	if strings.Join(got, " ") != strings.Join([]string{ids[2], ids[1], ids[0]}, " ") {
		t.Fatalf("alice's bookings %v, want %v newest first", got, ids)
	}
	if b, err := v.e.HolderBookings(t.Context(), "carol", Page{}); err != nil || len(b) != 0 {
		t.Fatalf("carol's bookings: %v %v", b, err)
	}
	held, err := v.e.HolderHolds(t.Context(), "x", "alice")
	if err != nil || len(held) != 1 || held[0].SeatID != "A3" || time.Until(held[0].ExpiresAt) < 30*time.Second {
		t.Fatalf("alice's holds in x: %+v %v, want A3 for about a minute", held, err)
	}
	if _, err := v.e.HolderBookings(t.Context(), "", Page{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("no holder: %v", err)
	}
	if _, err := v.e.HolderBookings(t.Context(), "alice", Page{After: "nope"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a bad cursor: %v", err)
	}
}
