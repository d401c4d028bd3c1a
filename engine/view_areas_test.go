package engine

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// floor is the FLOOR area's state in m.
func floor(t *testing.T, m *SeatMap) AreaState {
	t.Helper()
	if len(m.Areas) != 1 || m.Areas[0].AreaID != "FLOOR" {
		t.Fatalf("the map's areas: %+v, want FLOOR", m.Areas)
	}
	return m.Areas[0]
}

// TestSeatMapShowsAreas: the seat map counts an area's places free, held and sold as
// holds, releases, expiries, partial confirmations and cancellations change them; a
// watcher's events bring its copy to the same counts; an engine that builds its map
// from scratch (another process) reads the same counts; and they agree with the
// area's own counts in Redis and PostgreSQL.
func TestSeatMapShowsAreas(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("am", 20)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := v.e.WatchSeatMap(ctx, "am", 0)
	if err != nil {
		t.Fatal(err)
	}
	first := <-events
	if first.Snapshot == nil || floor(t, first.Snapshot) != (AreaState{AreaID: "FLOOR", Capacity: 20, Free: 20}) {
		t.Fatalf("first event: %+v", first)
	}
	watched := floor(t, first.Snapshot)
	other := v.twin()
	// want waits until the engine's map, the watcher's copy and a map built from
	// scratch show FLOOR as free/held/sold, and checks Redis's and PostgreSQL's counts.
	want := func(step string, free, held, sold int) {
		t.Helper()
		w := AreaState{AreaID: "FLOOR", Capacity: 20, Free: free, Held: held, Sold: sold}
		waitFor(t, step+": the seat maps' FLOOR", 10*time.Second, func() bool {
			for drained := false; !drained; {
				select {
				case ev := <-events:
					if ev.Snapshot != nil {
						watched = floor(t, ev.Snapshot)
					}
					for _, a := range ev.Areas {
						watched = a
					}
				default:
					drained = true
				}
			}
			m, err := v.e.SeatMap(t.Context(), "am")
			if err != nil {
				t.Fatal(err)
			}
			o, err := other.SeatMap(t.Context(), "am")
			if err != nil {
				t.Fatal(err)
			}
			return floor(t, m) == w && floor(t, o) == w && watched == w
		})
		if s := v.areaSold("am", "FLOOR"); s != sold {
			t.Fatalf("%s: PostgreSQL has %d sold, want %d", step, s, sold)
		}
	}

	h1, err := v.holdPlaces("am", time.Minute, "alice", 5)
	if err != nil {
		t.Fatal(err)
	}
	want("hold 5", 15, 5, 0)
	if _, err := v.e.Confirm(t.Context(), h1, ConfirmOptions{Places: []Places{{AreaID: "FLOOR", Count: 3}}}); err != nil {
		t.Fatal(err)
	}
	want("confirm 3 of the 5", 17, 0, 3)
	h2, err := v.holdPlaces("am", time.Minute, "bob", 4, "A1")
	if err != nil {
		t.Fatal(err)
	}
	want("hold 4 with a seat", 13, 4, 3)
	if err := v.e.Release(t.Context(), h2); err != nil {
		t.Fatal(err)
	}
	want("release the 4", 17, 0, 3)
	short, err := v.holdPlaces("am", minHoldTTL, "carol", 6)
	if err != nil {
		t.Fatal(err)
	}
	if short.Places[0].Count != 6 {
		t.Fatalf("the short hold: %+v", short)
	}
	h3, err := v.holdPlaces("am", time.Minute, "dave", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), h3, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want("6 held until they expire, 2 more sold", 15, 0, 5)
	if _, err := v.e.CancelSeats(t.Context(), b.ID, nil, []Places{{AreaID: "FLOOR", Count: 1}}); err != nil {
		t.Fatal(err)
	}
	want("cancel 1 of the 2", 16, 0, 4)
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	want("cancel the booking", 17, 0, 3)
	if c, h, s := v.areaState("am", "FLOOR"); c != 20 || s != 3 || h > 6 {
		t.Fatalf("Redis's FLOOR: capacity %d, held %d (expired holds are trimmed lazily), sold %d", c, h, s)
	}
}

// TestSeatMapOfAnAreasOnlyShow: a show of areas without seats has a map of its areas.
func TestSeatMapOfAnAreasOnlyShow(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if err := v.e.CreateShowVenue(t.Context(), "ga", Venue{Areas: []Area{{ID: "FLOOR", Capacity: 100}, {ID: "BAR", Capacity: 10}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "ga", HolderID: "x", Places: []Places{{AreaID: "BAR", Count: 4}}}); err != nil {
		t.Fatal(err)
	}
	m, err := v.e.SeatMap(t.Context(), "ga")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(m.Areas)
	if want := "[{BAR   10 6 4 0} {FLOOR   100 100 0 0}]"; got != want || len(m.States) != 0 {
		t.Fatalf("areas %s, %d seats; want %s and none", got, len(m.States), want)
	}
}
