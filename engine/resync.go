package engine

import (
	"context"
	"strconv"

	"github.com/holdfast/holdfast/db"
)

// resyncPage is how many seats one Resync step reads from PostgreSQL; it writes them to
// Redis markChunk at a time, one script call each, so Redis is never blocked for long
// (a few milliseconds a call).
const (
	resyncPage = 1000
	markChunk  = 200
)

// Resync rebuilds a show's Redis state from PostgreSQL: every seat a booking ever
// reached gets the marker the database says (sold, or free after a cancellation), holds
// on sold seats that were taken before the sale are dropped, and the generation counter
// is raised to the database's high-water mark. It works a page of seats at a time and
// only moves markers forward, so it is safe while the show is on sale: it never
// resurrects a cancelled booking's marker, never drops a marker written after it read
// the database, and never drops a hold it did not find on a sold seat.
func (e *Engine) Resync(ctx context.Context, showID string) error {
	if err := validateID("showID", showID); err != nil {
		return err
	}
	ctx, o := e.begin(ctx, "resync", showID, 0)
	sh, err := e.show(ctx, showID)
	if err == nil {
		err = e.resync(ctx, sh)
	}
	o.end(err, "")
	return err
}

// resync gives Redis the sale rules, writes every page of markers, then the
// best-available index if Redis has none, then raises the counter: while a Redis that
// lost the show has no counter, the hold scripts refuse to grant (they answer NOSTATE),
// so no hold is granted on a sold seat whose marker is not back yet. The rules come
// first: reading them finds a copy of a show deleted and created again since
// (*showChanged) before anything of it is written, and the index is written only while
// Redis has the copy's show's rules (buildIndex).
func (e *Engine) resync(ctx context.Context, sh *show) error {
	st, err := e.loadRules(ctx, sh)
	if err != nil {
		return err
	}
	if err := e.pushRules(ctx, sh, st); err != nil {
		return err
	}
	floor, err := e.q.SeatFenceMaxByShow(ctx, sh.id)
	if err != nil {
		return e.pgErr(err)
	}
	after := ""
	for {
		rows, err := e.q.SeatMarkListByShow(ctx, db.SeatMarkListByShowParams{ShowID: sh.id, After: after, MaxRows: resyncPage})
		if err != nil {
			return e.pgErr(err)
		}
		if e.hooks.afterRead != nil {
			e.hooks.afterRead(ctx, "resync")
		}
		seats := make([]string, len(rows))
		marks := make([]string, len(rows))
		for i, r := range rows {
			seats[i], marks[i] = r.SeatID, marker(r.Generation, r.Claimed)
		}
		for lo := 0; lo < len(rows); lo += markChunk {
			hi := min(lo+markChunk, len(rows))
			dropped, _, err := e.writeMarkers(ctx, sh, seats[lo:hi], marks[lo:hi], "-")
			if err != nil {
				return err
			}
			if dropped > 0 {
				e.log.InfoContext(ctx, "resync dropped holds on sold seats", "show_id", sh.id, "holds", dropped)
			}
		}
		if len(rows) < resyncPage {
			// The best-available index (built once, after the markers), then the counter.
			if err := e.buildIndex(ctx, sh); err != nil {
				return err
			}
			// The seats booked per holder, before the counter (as the rules are): the
			// first hold after it is checked against them.
			if err := e.syncCounts(ctx, sh); err != nil {
				return err
			}
			// The areas and their place markers, before the counter too.
			if err := e.pushAreas(ctx, sh); err != nil {
				return err
			}
			_, repaired, err := e.writeMarkers(ctx, sh, nil, nil, strconv.FormatInt(floor, 10))
			if err != nil {
				return err
			}
			if repaired && floor > 0 {
				e.m.counterRepairs.Inc()
				e.log.WarnContext(ctx, "generation counter raised to the database high-water mark", "show_id", sh.id, "generation", floor)
			}
			e.resyncView(sh)
			return nil
		}
		after = rows[len(rows)-1].SeatID
	}
}
