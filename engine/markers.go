package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// Sold markers tell Redis which seats are sold, so that a hold on them is refused at
// once. PostgreSQL is the authority; a marker is a seat's fence generation, written as
// "g" when the booking of that generation holds the seat and "-g" once it is cancelled,
// and it only ever moves forward (mark.lua). Every marker write a transaction owes Redis
// is recorded in marker_outbox by that transaction, made right after COMMIT, and made
// again by the background loop of every engine when the first try failed.

// markSoldTimeout bounds how long a committed confirmation keeps trying to write its
// sold markers when Redis fails, before it answers and leaves them to the background.
const markSoldTimeout = 2 * time.Second

// markerRepairAge is how old an outbox row must be before the background loop takes it:
// younger ones are still being written by the engine that committed them.
const markerRepairAge = time.Second

// markerRepairBatch bounds the rows one background round takes (and writes in one Redis
// pipeline); a pass runs rounds until none is due.
const markerRepairBatch = 512

// marker is a seat's marker value for the booking of generation gen.
func marker(gen int64, sold bool) string {
	if sold {
		return strconv.FormatInt(gen, 10)
	}
	return "-" + strconv.FormatInt(gen, 10)
}

// tombstone is the marker of a cancellation of booking (of generation gen) as mark.lua
// takes it from the cancellation itself: it names the booking, so that the hold that
// made it, should its keys still be in Redis, is dropped with it.
func tombstone(gen int64, booking uuid.UUID) string {
	return marker(gen, false) + "@" + commitID(booking)
}

// markCall is the mark.lua call that writes the markers of one booking's seats: sold,
// or its tombstones.
func markCall(sh *show, seats []string, gen int64, sold bool) (scriptCall, error) {
	ks, err := sh.scriptKeys("", seats)
	if err != nil {
		return scriptCall{}, err
	}
	return scriptCall{lua.Mark, ks, markArgs("-", seats, slices.Repeat([]string{marker(gen, sold)}, len(seats)))}, nil
}

// writeMarkers moves the markers of seats forward to marks (one each); floor, unless
// "-", raises the show's counter to at least that. It returns how many holds on sold
// seats it dropped and whether the counter was raised.
func (e *Engine) writeMarkers(ctx context.Context, sh *show, seats, marks []string, floor string) (dropped int64, repaired bool, err error) {
	ks, err := sh.scriptKeys("", seats)
	if err != nil {
		return 0, false, err
	}
	return e.markReply(sh, lua.Mark.Run(ctx, e.rdb, ks, markArgs(floor, seats, marks)...))
}

// markReply reads mark.lua's reply (markers dropped, counter repaired, the feed entry)
// and records the feed entry as this engine's write to sh.
func (e *Engine) markReply(sh *show, cmd *redis.Cmd) (dropped int64, repaired bool, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, false, e.redisErr(err)
	}
	if len(res) != 4 {
		return 0, false, fmt.Errorf("%w: unexpected mark script reply %v", ErrUnavailable, res)
	}
	e.wrote(sh, res[3])
	dropped, _ = res[1].(int64)
	repairedN, _ := res[2].(int64)
	return dropped, repairedN == 1, nil
}

// markArgs are the mark script's arguments: no tag, the floor, the seats, their marks.
func markArgs(floor string, seats, marks []string) []any {
	args := make([]any, 0, 2+2*len(seats))
	args = append(args, "", floor)
	for _, s := range seats {
		args = append(args, s)
	}
	for _, m := range marks {
		args = append(args, m)
	}
	return args
}

// markBooking writes the markers of one booking's seats: mark, its sold marker or its
// tombstone.
func (e *Engine) markBooking(ctx context.Context, sh *show, seats []string, mark string) error {
	_, _, err := e.writeMarkers(ctx, sh, seats, slices.Repeat([]string{mark}, len(seats)), "-")
	return err
}

// afterCommit writes the markers a committed transaction owes Redis (its outbox row
// seq). With a wait, it keeps trying for that long, even past the caller's context (the
// transaction is committed whatever happens here); with none, it tries once. Once Redis
// has them the row is dropped; otherwise the background loop writes them later.
func (e *Engine) afterCommit(ctx context.Context, sh *show, seats []string, mark string, seq int64, wait time.Duration) (err error) {
	if e.hooks.afterCommit != nil && !e.hooks.afterCommit(ctx) {
		return fmt.Errorf("%w: marker write skipped by a test hook", ErrUnavailable)
	}
	ctx, span := e.step(ctx, "holdfast.markers")
	defer func() { endStep(span, err) }()
	err = e.markBooking(ctx, sh, seats, mark)
	if err != nil && wait > 0 {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		defer cancel()
		for attempt := 1; err != nil && sleepJitter(mctx, attempt) == nil; attempt++ {
			err = e.markBooking(mctx, sh, seats, mark)
		}
	}
	if err != nil {
		e.m.markerDeferred.Inc()
		e.log.WarnContext(ctx, "sold markers left to the background repair", "show_id", sh.id, "marker", mark, "error", err)
		return err
	}
	e.outbox.applied(sh.id, seq)
	return nil
}

// outbox collects the outbox rows whose markers this engine wrote, for the background
// loop to delete in one statement.
type outbox struct {
	mu    sync.Mutex
	shows []string
	seqs  []int64
}

func (o *outbox) applied(showID string, seq int64) {
	o.mu.Lock()
	o.shows = append(o.shows, showID)
	o.seqs = append(o.seqs, seq)
	o.mu.Unlock()
}

func (o *outbox) take() ([]string, []int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, q := o.shows, o.seqs
	o.shows, o.seqs = nil, nil
	return s, q
}

// repayMarkers is the engine's background loop: every MarkerRepairInterval it deletes
// the outbox rows whose markers it wrote, and writes the markers of rows left behind;
// every moveSweepEvery it starts a relay of the hold moves left pending to the event
// feed (sweepMoves, moves.go). It ends when the engine is closed.
func (e *Engine) repayMarkers(ctx context.Context) {
	defer close(e.done)
	t := time.NewTicker(e.cfg.MarkerRepairInterval)
	defer t.Stop()
	var probed, swept time.Time
	for {
		select {
		case <-ctx.Done():
			// Drop what was written, so that no other engine writes it again.
			dctx, cancel := context.WithTimeout(context.Background(), time.Second)
			e.deleteApplied(dctx)
			cancel()
			return
		case <-t.C:
		}
		// Every database call of the loop has a deadline: a dead or hung server costs a
		// pass, never the loop.
		pctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout+stallGrace)
		e.deleteApplied(pctx)
		e.checkServer(pctx)
		if time.Since(probed) >= healthProbeEvery {
			probed = time.Now()
			e.probeBackends(pctx)
		}
		cancel()
		if n, err := e.repayOnce(ctx); err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "repair sold markers", "rows", n, "error", err)
		}
		if time.Since(swept) >= moveSweepEvery {
			swept = time.Now()
			e.sweepMoves(ctx)
		}
	}
}

// healthProbeEvery is how often the background loop probes both backends for the
// holdfast_backend_up and holdfast_marker_outbox_* gauges.
const healthProbeEvery = 5 * time.Second

// probeBackends sets the health gauges: one small PostgreSQL query (the outbox's size
// and age) and a Redis PING.
func (e *Engine) probeBackends(ctx context.Context) {
	pg := 1.0
	if st, err := e.q.MarkerOutboxPending(ctx); err != nil {
		pg = 0
	} else {
		e.m.outboxRows.Set(float64(st.Pending))
		e.m.outboxOldest.Set(st.OldestSeconds)
	}
	e.m.backendUp.WithLabelValues("postgres").Set(pg)
	rd := 1.0
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		rd = 0
	}
	e.m.backendUp.WithLabelValues("redis").Set(rd)
}

// deleteApplied drops the outbox rows whose markers this engine wrote. On failure they
// stay, and are written once more by whichever engine takes them (harmless).
func (e *Engine) deleteApplied(ctx context.Context) {
	shows, seqs := e.outbox.take()
	if len(seqs) == 0 {
		return
	}
	if _, err := e.q.MarkerOutboxDelete(ctx, db.MarkerOutboxDeleteParams{ShowIds: shows, Seqs: seqs}); err != nil {
		e.log.WarnContext(ctx, "delete written marker rows", "rows", len(seqs), "error", err)
	}
}

// repayOnce writes the markers of every outbox row older than markerRepairAge, until
// none is due: a round at a time, each in a transaction of its own that takes up to
// markerRepairBatch rows no other engine has taken (FOR UPDATE SKIP LOCKED), writes
// their markers in one Redis pipeline, deletes the rows Redis took and commits. Engines
// repairing at once split the rows between them. A round that Redis failed ends the
// pass (the rows stay for the next); every round has a deadline, so a dead connection
// cannot stall the loop. It returns how many rows it wrote.
//
// The bound: once Redis takes writes again, a backlog of B rows is written within
// MarkerRepairInterval plus ceil(B / (markerRepairBatch × engines)) rounds.
func (e *Engine) repayOnce(ctx context.Context) (int, error) {
	// Nothing due, the usual case: no transaction.
	dctx, cancel := context.WithTimeout(ctx, e.cfg.StatementTimeout+stallGrace)
	due, err := e.q.MarkerOutboxAnyDue(dctx, markerRepairAge.Seconds())
	cancel()
	if err != nil || !due {
		return 0, e.pgErr(err)
	}
	total := 0
	for ctx.Err() == nil {
		n, more, err := e.repayRound(ctx)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
	return total, nil
}

// repayRound is one round of repayOnce: it reports the rows written and whether a full
// round was due (more may be).
func (e *Engine) repayRound(ctx context.Context) (int, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, markSoldTimeout+2*e.cfg.StatementTimeout)
	defer cancel()
	tx, err := e.pool.BeginTx(rctx, e.txOptions())
	if err != nil {
		return 0, false, e.pgErr(err)
	}
	defer rollback(rctx, tx, e.cfg.StatementTimeout+stallGrace)
	q := e.q.WithTx(tx)
	rows, err := q.MarkerOutboxClaimDue(rctx, db.MarkerOutboxClaimDueParams{
		MinAgeSeconds: markerRepairAge.Seconds(), MaxRows: markerRepairBatch})
	if err != nil || len(rows) == 0 {
		return 0, false, e.pgErr(err)
	}
	var calls []scriptCall
	var owners []*show
	var taken []db.MarkerOutboxClaimDueRow
	var failed error // a row Redis did not take: it stays for the next round
	for _, r := range rows {
		sh, err := e.show(rctx, r.ShowID)
		var call scriptCall
		if err == nil {
			call, err = markCall(sh, r.SeatIds, r.Generation, r.Sold)
		}
		if err != nil {
			failed = err
			continue
		}
		calls, owners, taken = append(calls, call), append(owners, sh), append(taken, r)
	}
	mctx, mcancel := context.WithTimeout(rctx, markSoldTimeout)
	var shows []string
	var seqs []int64
	for i, cmd := range e.runScripts(mctx, calls) {
		if _, _, err := e.markReply(owners[i], cmd); err != nil {
			failed = err
			continue
		}
		shows, seqs = append(shows, taken[i].ShowID), append(seqs, taken[i].Seq)
	}
	mcancel()
	if len(seqs) > 0 {
		if _, err := q.MarkerOutboxDelete(rctx, db.MarkerOutboxDeleteParams{ShowIds: shows, Seqs: seqs}); err != nil {
			return 0, false, e.pgErr(err)
		}
		if err := tx.Commit(rctx); err != nil {
			return 0, false, e.pgErr(err)
		}
		e.m.markerRepairs.Add(float64(len(seqs)))
		e.log.InfoContext(ctx, "sold markers repaired from the outbox", "rows", len(seqs))
		// Their bookings' holders' counts may be missing too (the process that
		// committed them did not write them): every count of those shows again.
		seen := map[*show]bool{}
		for _, sh := range owners {
			if !seen[sh] && e.limited(rctx, sh) {
				seen[sh] = true
				if err := e.syncCounts(rctx, sh); err != nil {
					e.log.WarnContext(ctx, "repair the booked seats per holder", "show_id", sh.id, "error", err)
				}
			}
		}
	}
	return len(seqs), failed == nil && len(rows) == markerRepairBatch, failed
}
