package engine

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// categoryLayout is venueLayout(4, 10, 12) with categories by section: A is "A", B and
// C are "B", D has none. Ranks favour section A, so the best seats overall are of
// category A.
func categoryLayout() []Seat {
	seats := venueLayout(4, 10, 12)
	for i, s := range seats {
		seats[i].Category = map[string]string{"A": "A", "B": "B", "C": "B"}[s.Section]
	}
	return seats
}

// TestHoldBestByCategory: many goroutines take best-available holds, most of them of a
// category (some of a section too), until the show is nearly gone: every hold has only
// seats of its category (and section), no seat is held twice, each hold is the best
// choice left when it was made (replayed in generation order against an offline
// oracle), a refused request had no fitting seats even at the end, and the index is
// consistent with the keys afterwards.
func TestHoldBestByCategory(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 6 })
	if err := v.e.CreateShowLayout(t.Context(), "cat", categoryLayout()); err != nil {
		t.Fatal(err)
	}
	sh := v.showOf("cat")
	results := make([]bestResult, 800)
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < len(results); i += 24 {
				req := BestRequest{ShowID: "cat", Count: 1 + rng.IntN(6), Adjacent: rng.IntN(2) == 0, TTL: time.Minute}
				switch rng.IntN(6) {
				case 0:
				case 1:
					req.Section = string(rune('A' + rng.IntN(4)))
				case 2:
					req.Category, req.Section = "B", []string{"B", "C"}[rng.IntN(2)]
				case 3, 4:
					req.Category = "B"
				default:
					req.Category = "A"
				}
				h, err := v.e.HoldBest(t.Context(), req)
				results[i] = bestResult{req, h, err}
			}
		})
	}
	wg.Wait()
	granted, refused, held := checkBestResults(t, sh, results)
	t.Logf("%d granted, %d refused, %d of %d seats held", granted, refused, held, len(sh.layout))
	v.indexConsistent("cat")
	if refused == 0 {
		t.Fatalf("no request was refused: the show was never short of a category's seats, so the test shows nothing about refusals")
	}
}

// TestCategoriesAreKept: a show's seats' and areas' categories are kept with it: the
// layout returns them, a new engine and a Redis that lost everything choose by them as
// before, and creating the show again with a seat's or an area's category changed is
// ErrInvalidArgument. An unknown category, a section of another category, two
// categories in one section and a malformed category are refused with nothing changed.
func TestCategoriesAreKept(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t, func(c *Config) { c.MaxSeatsPerHold = 20 })
	ctx := t.Context()
	venue := Venue{Seats: categoryLayout(), Areas: []Area{{ID: "FLOOR", Capacity: 100, Category: "GA"}, {ID: "PIT", Capacity: 10}}}
	if err := v.e.CreateShowVenue(ctx, "kept", venue); err != nil {
		t.Fatal(err)
	}
	layout, err := v.e.Layout(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]Seat{}
	for _, s := range layout {
		byID[s.ID] = s
	}
	for _, s := range venue.Seats {
		if byID[s.ID] != s {
			t.Fatalf("seat %s reads %+v, was created %+v", s.ID, byID[s.ID], s)
		}
	}

	redisBefore, dbBefore := v.redisSnapshot(), v.dbSnapshot()
	for _, req := range []BestRequest{
		{ShowID: "kept", Count: 1, Category: "Z"},
		{ShowID: "kept", Count: 1, Category: "GA"}, // an area's only: best-available takes seats
		{ShowID: "kept", Count: 1, Category: "A", Section: "B"},
	} {
		if _, err := v.e.HoldBest(ctx, req); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%+v: %v, want ErrNotFound", req, err)
		}
	}
	if _, err := v.e.HoldBest(ctx, BestRequest{ShowID: "kept", Count: 13, Category: "B", Adjacent: true}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("13 together in rows of 12: %v, want ErrSeatsUnavailable", err)
	}
	if v.redisSnapshot() != redisBefore || v.dbSnapshot() != dbBefore {
		t.Fatalf("a refused best-available hold changed something")
	}

	// Redis loses everything; a new engine reads the show from the database.
	if err := v.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	v2 := newEnvWith(t, v.pool, v.rdb, func(c *Config) { c.MaxSeatsPerHold = 20 })
	h, err := v2.e.HoldBest(ctx, BestRequest{ShowID: "kept", Count: 4, Category: "B", Adjacent: true})
	if err != nil || !slices.Equal(h.SeatIDs, []string{"B01-004", "B01-005", "B01-006", "B01-007"}) {
		t.Fatalf("4 together of B after Redis's loss: %v %v", h.SeatIDs, err)
	}
	h, err = v2.e.HoldBest(ctx, BestRequest{ShowID: "kept", Count: 2, Category: "B", Section: "C"})
	if err != nil || !slices.Equal(h.SeatIDs, []string{"C01-005", "C01-006"}) {
		t.Fatalf("the 2 best of B in section C: %v %v", h.SeatIDs, err)
	}

	changed := Venue{Seats: slices.Clone(venue.Seats), Areas: venue.Areas}
	for i := range changed.Seats {
		if changed.Seats[i].Section == "D" {
			changed.Seats[i].Category = "D"
		}
	}
	if err := v2.e.CreateShowVenue(ctx, "kept", changed); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("the show again with a section's category changed: %v", err)
	}
	changed = Venue{Seats: venue.Seats, Areas: []Area{{ID: "FLOOR", Capacity: 100}, {ID: "PIT", Capacity: 10}}}
	if err := v2.e.CreateShowVenue(ctx, "kept", changed); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("the show again with an area's category dropped: %v", err)
	}
	if err := v2.e.CreateShowVenue(ctx, "kept", venue); err != nil {
		t.Fatalf("the show again as it is: %v", err)
	}
	for _, bad := range []Venue{
		{Seats: []Seat{{ID: "S1", Section: "A", Position: 1, Category: "A"}, {ID: "S2", Section: "A", Position: 2, Category: "B"}}},
		{Seats: []Seat{{ID: "S1", Section: "A", Position: 1, Category: "A"}, {ID: "S2", Section: "A", Position: 2}}},
		{Seats: []Seat{{ID: "S1", Position: 1, Category: " A"}}},
		{Areas: []Area{{ID: "F", Capacity: 1, Category: strings.Repeat("x", 33)}}},
	} {
		if err := v2.e.CreateShowVenue(ctx, "bad", bad); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "categor") {
			t.Fatalf("%+v: %v, want ErrInvalidArgument naming the category", bad, err)
		}
	}
	if _, err := v2.e.Layout(ctx, "bad"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused show exists: %v", err)
	}
}

// TestCategoriesLeaveTheIndexAsItWas: the best-available index of a layout with
// categories — each seat's meta (section number, segment, place) — is the one of the same
// layout without them, so engines older than categories that serve the same show (a
// rolling upgrade) read and keep the same index.
func TestCategoriesLeaveTheIndexAsItWas(t *testing.T) {
	with, err := validLayout("seats", categoryLayout(), 10_000)
	if err != nil {
		t.Fatal(err)
	}
	without := slices.Clone(with)
	for i := range without {
		without[i].Category = ""
	}
	a, b := newShow("p", "s", 1, with), newShow("p", "s", 1, without)
	if !slices.Equal(a.meta, b.meta) {
		t.Fatalf("the index's meta differs with categories")
	}
	if len(a.sections) != 4 || a.sections[1] != (bestSection{"B", "B"}) || a.sections[3] != (bestSection{"D", ""}) {
		t.Fatalf("sections %v", a.sections)
	}
}
