package engine

import (
	"context"
	"fmt"

	"github.com/holdfast/holdfast/internal/lua"
)

// After a COMMIT: the sold markers of the batch's bookings, written in one pipeline
// (mark.lua), which replace their reserved holds.

// markGroupSeats bounds the seats of one mark.lua call of a batch: a script runs alone in
// Redis, so one call's time is bounded too.
const markGroupSeats = 256

// markGroup is one mark.lua call of a batch: seats of one show, each with the sold
// marker of its confirmation's generation, and the confirmations whose seats they are.
type markGroup struct {
	sh           *show
	seats, marks []string
	owners       []*confirmReq
}

func (g *markGroup) add(r *confirmReq) {
	for _, s := range r.c.sold {
		g.seats, g.marks = append(g.seats, s), append(g.marks, marker(r.gen, true))
	}
	g.owners = append(g.owners, r)
}

// markBatch writes the sold markers of the batch's bookings to Redis in one pipeline.
// A confirmation whose markers did not make it writes them itself (afterCommit, with
// its retries), as does every one while a test hook stands in for the write.
func (e *Engine) markBatch(ctx context.Context, batch []*confirmReq) {
	if e.hooks.afterCommit != nil {
		return
	}
	var calls []scriptCall
	var owners []*confirmReq
	// The holder counts go first: a seat leaves its holder's holds (mark.lua) only once
	// it is counted as booked.
	counts := map[*show][]holderCount{}
	for _, r := range batch {
		if r.err == nil && len(r.res.counts) > 0 {
			counts[r.c.sh] = append(counts[r.c.sh], r.res.counts...)
		}
	}
	var countShows []*show
	for sh, cs := range counts {
		calls, countShows = append(calls, countsCall(sh, cs)), append(countShows, sh)
	}
	// The sold markers: one mark.lua call for the batch's confirmations of a show (each
	// seat with its own booking's generation), up to markGroupSeats seats a call, so a
	// batch of one show pays one script call and one feed entry, not one per booking.
	var groups []markGroup
	open := map[*show]int{} // the show's group still taking seats
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		g, ok := open[r.c.sh]
		if !ok || len(groups[g].seats)+len(r.c.sold) > markGroupSeats {
			g = len(groups)
			groups = append(groups, markGroup{sh: r.c.sh})
			open[r.c.sh] = g
		}
		groups[g].add(r)
	}
	var called []markGroup
	for _, g := range groups {
		ks, err := g.sh.scriptKeys("", g.seats)
		if err != nil {
			continue // its confirmations write their markers themselves (confirm)
		}
		calls = append(calls, scriptCall{lua.Mark, ks, markArgs("-", g.seats, g.marks)})
		owners, called = append(owners, g.owners...), append(called, g)
	}
	if len(calls) == 0 {
		return
	}
	spans := e.steps(owners, "holdfast.markers")
	mctx, cancel := context.WithTimeout(ctx, markSoldTimeout)
	defer cancel()
	cmds := e.runScripts(mctx, calls)
	uncounted := map[*show]bool{} // its counts did not make it: its confirmations write them again
	for i, sh := range countShows {
		if cmds[i].Err() != nil {
			uncounted[sh] = true
		}
	}
	k := 0 // owners[k], spans[k]: the confirmation, in the order the groups were called
	for i, cmd := range cmds[len(countShows):] {
		_, _, markErr := e.markReply(called[i].sh, cmd)
		for _, r := range called[i].owners {
			err := markErr
			if err == nil && uncounted[r.c.sh] && len(r.res.counts) > 0 {
				err = fmt.Errorf("%w: holder counts not written", ErrUnavailable)
			}
			endStep(spans[k], err)
			k++
			if err == nil {
				e.outbox.applied(r.c.sh.id, r.res.seq)
				r.marked = true
			}
		}
	}
}
