package engine

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/db"
)

// Seat is one seat of a venue layout: its id, where it is (section, row, and position
// in the row, so that adjacency is known), its rank (lower is better: best-available
// holds pick the lowest ranks first), optional drawing coordinates (zero when not
// given) and an optional category (a price band: BestRequest.Category asks for one),
// which is its section's: every seat of a section has the same.
type Seat struct {
	ID       string
	Section  string
	Row      string
	Position int
	Rank     int
	X, Y     float64
	Category string
}

// Layout bounds.
const (
	maxLabelLen   = 32 // section and row names
	maxPosition   = 1_000_000
	maxRank       = 1_000_000_000
	maxCoordinate = 1_000_000
)

// derivedLayout is the layout of a show created with bare seat ids: one unnamed
// section and row, positions and ranks in id order. seats must be sorted.
func derivedLayout(seats []string) []Seat {
	out := make([]Seat, len(seats))
	for i, s := range seats {
		out[i] = Seat{ID: s, Position: i + 1, Rank: i + 1}
	}
	return out
}

// validLabel reports whether s is empty or matches ^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$.
func validLabel(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > maxLabelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == ' ' || c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validLayout checks a layout — between 1 and max seats, every id well formed and once,
// labels well formed, one category per section, positions unique per (section, row),
// ranks and coordinates in range — and returns it sorted by seat id, in a slice of its
// own.
func validLayout(field string, seats []Seat, max int) ([]Seat, error) {
	if len(seats) == 0 {
		return nil, invalid(field, "no seats")
	}
	if len(seats) > max {
		return nil, invalid(field, "%d seats, at most %d", len(seats), max)
	}
	type place struct {
		section, row string
		position     int
	}
	ids := make(map[string]bool, len(seats))
	places := make(map[place]string, len(seats))
	categories := map[string]Seat{} // section -> its first seat: a section's seats share a category
	for _, s := range seats {
		switch {
		case !validID(s.ID):
			return nil, invalid(field, "seat %q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", s.ID)
		case ids[s.ID]:
			return nil, invalid(field, "seat %q appears twice", s.ID)
		case !validLabel(s.Section):
			return nil, invalid(field, "seat %q: section %q must be empty or match ^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$", s.ID, s.Section)
		case !validLabel(s.Row):
			return nil, invalid(field, "seat %q: row %q must be empty or match ^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$", s.ID, s.Row)
		case !validLabel(s.Category):
			return nil, invalid(field, "seat %q: category %q must be empty or match ^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$", s.ID, s.Category)
		case s.Position < 1 || s.Position > maxPosition:
			return nil, invalid(field, "seat %q: position %d is out of range [1, %d]", s.ID, s.Position, maxPosition)
		case s.Rank < 0 || s.Rank > maxRank:
			return nil, invalid(field, "seat %q: rank %d is out of range [0, %d]", s.ID, s.Rank, maxRank)
		case !(math.Abs(s.X) <= maxCoordinate) || !(math.Abs(s.Y) <= maxCoordinate): // NaN fails too
			return nil, invalid(field, "seat %q: coordinates must be numbers within ±%d", s.ID, maxCoordinate)
		}
		if first, ok := categories[s.Section]; !ok {
			categories[s.Section] = s
		} else if first.Category != s.Category {
			return nil, invalid(field, "seats %q and %q of section %q have categories %q and %q: a category is a whole section's (give each price band a section of its own)",
				first.ID, s.ID, s.Section, first.Category, s.Category)
		}
		p := place{s.Section, s.Row, s.Position}
		if other, ok := places[p]; ok {
			return nil, invalid(field, "seats %q and %q share position %d of row %q in section %q", other, s.ID, s.Position, s.Row, s.Section)
		}
		ids[s.ID], places[p] = true, s.ID
	}
	out := slices.Clone(seats)
	slices.SortFunc(out, func(a, b Seat) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// CreateShowLayout creates a show with a venue layout. Like CreateShow, creating a show
// that exists with the same layout does nothing; with another layout it is
// ErrInvalidArgument (a show's seats and layout are fixed).
func (e *Engine) CreateShowLayout(ctx context.Context, showID string, seats []Seat) error {
	_, err := e.EnsureShowLayout(ctx, showID, seats)
	return err
}

// EnsureShowLayout is CreateShowLayout that also reports whether it created the show.
func (e *Engine) EnsureShowLayout(ctx context.Context, showID string, seats []Seat) (created bool, err error) {
	if err := validateID("showID", showID); err != nil {
		return false, err
	}
	layout, err := validLayout("seats", seats, e.cfg.MaxSeatsPerShow)
	if err != nil {
		return false, err
	}
	return e.ensureShow(ctx, showID, layout, nil)
}

// showInsertChunk is how many seats one statement of a show's creation inserts: a
// statement stays well under a second whatever the show's size.
const showInsertChunk = 10_000

// showStatementTimeout bounds each statement of a show's creation. It is its own, not
// Config.StatementTimeout (which bounds a confirmation's statements): a show of
// MaxSeatsPerShow seats must be creatable on a busy machine.
const showStatementTimeout = 30 * time.Second

// ensureShow creates a show with its layout (sorted by seat id) unless it exists with
// exactly that layout, then makes sure Redis has the show's counter and rules (with its
// identity: an engine with a copy of an earlier show of the id meets it at its next
// script). The seats go in, with their fences, showInsertChunk at a time, in one
// transaction.
func (e *Engine) ensureShow(ctx context.Context, showID string, layout []Seat, areas []Area) (created bool, err error) {
	var epoch int64
	err = pgx.BeginTxFunc(ctx, e.pool, e.txOptionsWith(showStatementTimeout), func(tx pgx.Tx) error {
		q := e.q.WithTx(tx)
		n, err := q.ShowInsert(ctx, showID)
		if err != nil {
			return err
		}
		if epoch, err = q.ShowEpochGet(ctx, showID); err != nil {
			return err
		}
		if n == 0 {
			have, err := q.SeatLayoutListByShow(ctx, showID)
			if err != nil {
				return err
			}
			if !slices.Equal(layoutFromRows(have), layout) {
				return invalid("seats", "show %q exists with another inventory or layout (%d seats); a show's seats are fixed", showID, len(have))
			}
			return sameAreas(ctx, q, showID, areas)
		}
		created = true
		if err := insertAreas(ctx, q, showID, areas); err != nil {
			return err
		}
		for chunk := range slices.Chunk(layout, showInsertChunk) {
			p := db.SeatsInsertLayoutParams{ShowID: showID}
			for _, s := range chunk {
				p.SeatIds, p.Sections, p.RowLabels = append(p.SeatIds, s.ID), append(p.Sections, s.Section), append(p.RowLabels, s.Row)
				p.Positions, p.Ranks = append(p.Positions, int32(s.Position)), append(p.Ranks, int32(s.Rank))
				p.Xs, p.Ys, p.Categories = append(p.Xs, s.X), append(p.Ys, s.Y), append(p.Categories, s.Category)
			}
			if err := q.SeatsInsertLayout(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, e.pgErr(err)
	}
	shown := newShow(e.cfg.KeyPrefix, showID, epoch, layout)
	shown.setAreas(areas)
	sh := e.adopt(shown)
	// Start the show's counter in Redis (it stays if it exists). Should this fail, the
	// first hold finds no counter and rebuilds the show's Redis state from the database.
	if err := e.resync(ctx, sh); err != nil {
		return created, err
	}
	return created, nil
}

func layoutFromRows(rows []db.SeatLayoutListByShowRow) []Seat {
	out := make([]Seat, len(rows))
	for i, r := range rows {
		out[i] = Seat{ID: r.SeatID, Section: r.Section, Row: r.RowLabel, Position: int(r.Position), Rank: int(r.Rank), X: r.X, Y: r.Y, Category: r.Category}
	}
	return out
}

// Layout returns a show's venue layout in layout order: by section, row and position
// (sections and rows in the order of their best rank). The slice is the caller's.
func (e *Engine) Layout(ctx context.Context, showID string) ([]Seat, error) {
	if err := validateID("showID", showID); err != nil {
		return nil, err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return nil, err
	}
	return slices.Clone(sh.layout), nil
}

// layoutOrder sorts a layout for drawing and for reading row by row: sections by their
// best rank (then name), rows likewise within a section, seats by position.
func layoutOrder(seats []Seat) []Seat {
	type key struct{ section, row string }
	bestSection := map[string]int{}
	bestRow := map[key]int{}
	for _, s := range seats {
		if r, ok := bestSection[s.Section]; !ok || s.Rank < r {
			bestSection[s.Section] = s.Rank
		}
		k := key{s.Section, s.Row}
		if r, ok := bestRow[k]; !ok || s.Rank < r {
			bestRow[k] = s.Rank
		}
	}
	out := slices.Clone(seats)
	slices.SortFunc(out, func(a, b Seat) int {
		return cmp.Or(
			cmp.Compare(bestSection[a.Section], bestSection[b.Section]), cmp.Compare(a.Section, b.Section),
			cmp.Compare(bestRow[key{a.Section, a.Row}], bestRow[key{b.Section, b.Row}]), cmp.Compare(a.Row, b.Row),
			cmp.Compare(a.Position, b.Position))
	})
	return out
}
