package engine

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// categoryLayout is venueLayout(3, 10, 12) with categories: rows 01–03 of every section
// "A", the rest "B", but for the middle four seats of section C's rows, "P" — so that a
// row of section C has three runs (B, P, B) that adjacency must not join. Ranks favour
// section A and the front rows, so the best seats overall are of category A.
func categoryLayout() []Seat {
	seats := venueLayout(3, 10, 12)
	for i, s := range seats {
		switch {
		case s.Section == "C" && s.Position >= 5 && s.Position <= 8:
			seats[i].Category = "P"
		case s.Row <= "03":
			seats[i].Category = "A"
		default:
			seats[i].Category = "B"
		}
	}
	return seats
}

// TestHoldBestByCategory: many goroutines take best-available holds, a quarter of them
// of a category (and some of a section too), until the show is nearly gone: every hold
// has only seats of its category (and section), adjacent ones never span two categories
// of a row, no seat is held twice, each hold is the best choice left when it was made
// (replayed in generation order against an offline oracle), and a refused request had
// no fitting seats even at the end.
func TestHoldBestByCategory(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 6 })
	if err := v.e.CreateShowLayout(t.Context(), "cat", categoryLayout()); err != nil {
		t.Fatal(err)
	}
	sh := v.showOf("cat")
	type result struct {
		req BestRequest
		h   Hold
		err error
	}
	results := make([]result, 600)
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < len(results); i += 24 {
				req := BestRequest{ShowID: "cat", Count: 1 + rng.IntN(6), Adjacent: rng.IntN(2) == 0, TTL: time.Minute}
				req.Category = []string{"", "A", "B", "P"}[rng.IntN(4)]
				if rng.IntN(4) == 0 {
					req.Section = string(rune('A' + rng.IntN(3)))
				}
				if req.Category == "P" {
					req.Section = "C"
				}
				h, err := v.e.HoldBest(t.Context(), req)
				results[i] = result{req, h, err}
			}
		})
	}
	wg.Wait()
	var granted []result
	final := map[string]bool{}
	for _, r := range results {
		switch {
		case r.err == nil:
			granted = append(granted, r)
			for _, s := range r.h.SeatIDs {
				seat := sh.layout[sh.index[s]]
				if final[s] {
					t.Fatalf("seat %s in two holds", s)
				}
				if (r.req.Category != "" && seat.Category != r.req.Category) || (r.req.Section != "" && seat.Section != r.req.Section) {
					t.Fatalf("%+v got %s, of section %q and category %q", r.req, s, seat.Section, seat.Category)
				}
				final[s] = true
			}
			if len(r.h.SeatIDs) != r.req.Count || (r.req.Adjacent && !adjacentOfOneCategory(sh, r.h.SeatIDs)) {
				t.Fatalf("%+v got %v", r.req, r.h.SeatIDs)
			}
		case errors.Is(r.err, ErrSeatsUnavailable):
		default:
			t.Fatalf("HoldBest %+v: %v", r.req, r.err)
		}
	}
	sort.Slice(granted, func(i, j int) bool { return granted[i].h.Generation < granted[j].h.Generation })
	taken := map[string]bool{}
	for _, r := range granted {
		if want, ok := bestOffline(sh, taken, r.req); !ok || sumOf(sh, r.h.SeatIDs) != want {
			t.Fatalf("generation %d, %+v: chose %v (score %d), the best then scored %d (exists %v)",
				r.h.Generation, r.req, r.h.SeatIDs, sumOf(sh, r.h.SeatIDs), want, ok)
		}
		for _, s := range r.h.SeatIDs {
			taken[s] = true
		}
	}
	refused := 0
	for _, r := range results {
		if r.err != nil {
			refused++
			if _, ok := bestOffline(sh, final, r.req); ok {
				t.Fatalf("%+v refused, but such seats are free even at the end", r.req)
			}
		}
	}
	t.Logf("%d granted, %d refused, %d of %d seats held", len(granted), refused, len(final), len(sh.layout))
	v.indexConsistent("cat")
	if refused == 0 {
		t.Fatalf("no request was refused: the show was never short of a category's seats, so the test shows nothing about refusals")
	}
}

// adjacentOfOneCategory reports whether seats are side by side in one row and of one
// category.
func adjacentOfOneCategory(sh *show, seats []string) bool {
	for _, s := range seats[1:] {
		if sh.layout[sh.index[s]].Category != sh.layout[sh.index[seats[0]]].Category {
			return false
		}
	}
	return adjacentSeats(sh, seats)
}

// TestCategoriesAreKept: a show's seats' and areas' categories are kept with it: the
// layout returns them, a new engine and a Redis that lost everything choose by them as
// before, and creating the show again with a seat's or an area's category changed is
// ErrInvalidArgument. An unknown category, a category of no seat of the section asked
// for, and a malformed category are refused with nothing changed.
func TestCategoriesAreKept(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
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
	for _, c := range []struct {
		req  BestRequest
		want error
	}{
		{BestRequest{ShowID: "kept", Count: 1, Category: "Z"}, ErrNotFound},
		{BestRequest{ShowID: "kept", Count: 1, Category: "GA"}, ErrNotFound}, // an area's only: best-available takes seats
		{BestRequest{ShowID: "kept", Count: 1, Category: "P", Section: "A"}, ErrNotFound},
		{BestRequest{ShowID: "kept", Count: 5, Category: "P", Adjacent: true}, ErrSeatsUnavailable}, // P runs are 4 long
	} {
		if _, err := v.e.HoldBest(ctx, c.req); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v, want %v", c.req, err, c.want)
		}
	}
	if v.redisSnapshot() != redisBefore || v.dbSnapshot() != dbBefore {
		t.Fatalf("a refused best-available hold changed something")
	}

	// Redis loses everything; a new engine reads the show from the database.
	if err := v.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	v2 := newEnvWith(t, v.pool, v.rdb)
	h, err := v2.e.HoldBest(ctx, BestRequest{ShowID: "kept", Count: 4, Category: "P", Adjacent: true})
	if err != nil || !slices.Equal(h.SeatIDs, []string{"C01-005", "C01-006", "C01-007", "C01-008"}) {
		t.Fatalf("4 together of P after Redis's loss: %v %v", h.SeatIDs, err)
	}
	h, err = v2.e.HoldBest(ctx, BestRequest{ShowID: "kept", Count: 2, Category: "B"})
	if err != nil || !slices.Equal(h.SeatIDs, []string{"A04-005", "A04-006"}) {
		t.Fatalf("the 2 best of B: %v %v", h.SeatIDs, err)
	}

	changed := Venue{Seats: slices.Clone(venue.Seats), Areas: venue.Areas}
	changed.Seats[0].Category = "B"
	if err := v2.e.CreateShowVenue(ctx, "kept", changed); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("the show again with a seat's category changed: %v", err)
	}
	changed = Venue{Seats: venue.Seats, Areas: []Area{{ID: "FLOOR", Capacity: 100}, {ID: "PIT", Capacity: 10}}}
	if err := v2.e.CreateShowVenue(ctx, "kept", changed); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("the show again with an area's category dropped: %v", err)
	}
	if err := v2.e.CreateShowVenue(ctx, "kept", venue); err != nil {
		t.Fatalf("the show again as it is: %v", err)
	}
	bad := Venue{Seats: []Seat{{ID: "S1", Position: 1, Category: " A"}}}
	if err := v2.e.CreateShowVenue(ctx, "bad", bad); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "category") {
		t.Fatalf("a malformed seat category: %v", err)
	}
	bad = Venue{Areas: []Area{{ID: "F", Capacity: 1, Category: strings.Repeat("x", 33)}}}
	if err := v2.e.CreateShowVenue(ctx, "bad", bad); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "category") {
		t.Fatalf("a malformed area category: %v", err)
	}
	if _, err := v2.e.Layout(ctx, "bad"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused show exists: %v", err)
	}
}
