package engine

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func venue() []Seat {
	return []Seat{
		{ID: "B-2-1", Section: "Balcony", Row: "2", Position: 1, Rank: 300, X: 10, Y: 90},
		{ID: "A-1-2", Section: "Stalls", Row: "1", Position: 2, Rank: 1, X: 20, Y: 10},
		{ID: "A-1-1", Section: "Stalls", Row: "1", Position: 1, Rank: 2, X: 10, Y: 10},
		{ID: "A-2-1", Section: "Stalls", Row: "2", Position: 1, Rank: 10, X: 10, Y: 20},
		{ID: "B-1-1", Section: "Balcony", Row: "1", Position: 1, Rank: 200, X: 10, Y: 80},
	}
}

// TestCreateShowLayout: a show's layout is stored, served in layout order (sections
// and rows by their best rank, seats by position), fixed once created, and every seat
// of it can be held.
func TestCreateShowLayout(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	if err := v.e.CreateShowLayout(ctx, "gala", venue()); err != nil {
		t.Fatal(err)
	}
	got, err := v.e.Layout(ctx, "gala")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if want := []string{"A-1-1", "A-1-2", "A-2-1", "B-1-1", "B-2-1"}; !slices.Equal(ids, want) {
		t.Fatalf("layout order %v, want %v", ids, want)
	}
	if got[0] != venue()[2] {
		t.Fatalf("seat A-1-1 came back as %+v", got[0])
	}
	// Another engine (another process) reads the same layout from PostgreSQL.
	other, err := v.twin().Layout(ctx, "gala")
	if err != nil || !slices.Equal(other, got) {
		t.Fatalf("the layout read back: %v %v", other, err)
	}
	// Fixed: the same layout is a no-op, another one is refused.
	created, err := v.e.EnsureShowLayout(ctx, "gala", venue())
	if err != nil || created {
		t.Fatalf("the same layout again: created %v, %v", created, err)
	}
	moved := venue()
	moved[0].Rank = 301
	if err := v.e.CreateShowLayout(ctx, "gala", moved); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("another layout for the show: %v, want ErrInvalidArgument", err)
	}
	if err := v.e.CreateShow(ctx, "gala", ids); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bare ids for a show with a layout: %v, want ErrInvalidArgument", err)
	}
	h := v.hold("gala", time.Minute, "alice", "B-2-1", "A-1-1")
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestBareIDsDeriveALayout: CreateShow with bare ids gives one unnamed section and row,
// positions and ranks in id order.
func TestBareIDsDeriveALayout(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("plain", "C", "A", "B")
	got, err := v.e.Layout(t.Context(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	want := []Seat{{ID: "A", Position: 1, Rank: 1}, {ID: "B", Position: 2, Rank: 2}, {ID: "C", Position: 3, Rank: 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("derived layout %+v, want %+v", got, want)
	}
	if _, err := v.e.Layout(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("layout of an unknown show: %v", err)
	}
}

// TestBadLayoutChangesNothing: a malformed layout is refused with a clear error before
// anything is written.
func TestBadLayoutChangesNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerShow = 5 })
	before := v.dbSnapshot()
	with := func(f func(s []Seat) []Seat) []Seat { return f(venue()) }
	cases := map[string][]Seat{
		"no seats":             {},
		"too many seats":       with(func(s []Seat) []Seat { return append(s, Seat{ID: "X", Position: 1}) }),
		"seat twice":           with(func(s []Seat) []Seat { s[1].ID = s[0].ID; return s }),
		"bad seat id":          with(func(s []Seat) []Seat { s[0].ID = "a:b"; return s }),
		"shared position":      with(func(s []Seat) []Seat { s[1].Position = 1; return s }),
		"position zero":        with(func(s []Seat) []Seat { s[0].Position = 0; return s }),
		"negative rank":        with(func(s []Seat) []Seat { s[0].Rank = -1; return s }),
		"section with a colon": with(func(s []Seat) []Seat { s[0].Section = "a:b"; return s }),
		"row too long":         with(func(s []Seat) []Seat { s[0].Row = "r123456789012345678901234567890123"; return s }),
		"x not a number":       with(func(s []Seat) []Seat { s[0].X = math.NaN(); return s }),
		"y infinite":           with(func(s []Seat) []Seat { s[0].Y = math.Inf(1); return s }),
		"x far away":           with(func(s []Seat) []Seat { s[0].X = 2e6; return s }),
	}
	for name, seats := range cases {
		var iae *InvalidArgumentError
		if err := v.e.CreateShowLayout(t.Context(), "bad", seats); !errors.As(err, &iae) || iae.Field != "seats" {
			t.Errorf("%s: %v, want an InvalidArgumentError on seats", name, err)
		}
	}
	if err := v.e.CreateShowLayout(t.Context(), "bad:id", venue()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad show id: %v", err)
	}
	if after := v.dbSnapshot(); after != before {
		t.Fatalf("a refused layout wrote:\n%s", after)
	}
}
