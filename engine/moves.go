package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
)

// Hold moves in the event feed. Reclaim and Transfer move holds in one Redis script,
// and that script also appends an entry for each hold it gave a new token to the show's
// stream of pending moves (<prefix>:{<show>}:moves, under the show's hash tag, so a
// move and its entry are one write for Redis Cluster and for a failover;
// internal/lua/common.lua: move_log). Before a call answers with a moved hold's new
// token, the engine relays every pending entry of the show to booking_events (relayMoves):
// in one transaction that first takes the show's advisory lock, so that two engines
// relaying one show take turns and the feed has the show's moves in the stream's order,
// it writes each entry's event once (booking_events_move_once, on the move's id), then
// deletes the entries from the stream. A new token thus leaves the engine only once its
// move's event is committed, and a booking made with it comes after the move in the
// feed. A move whose engine died before the relay, or whose relay failed, is relayed by
// the next call that moves a hold of the show or by the sweep (sweepOnce), which every
// engine's background loop (repayMarkers) starts every moveSweepEvery: it looks at the
// shows a call may have left moves of (<prefix>:moves, which a call joins its show to
// before its script: mayMove), not at every show ever created. A move Redis loses before its relay (a failover to a
// replica that had not received it, a Redis that lost everything) is lost with its entry:
// the feed never has it, as Redis never had it.

// HoldMove is a hold that Reclaim or Transfer gave a new token, generation and (Transfer)
// holder, as the feed tells it (Event.Hold). It never carries the token.
type HoldMove struct {
	ShowID     string
	SeatIDs    []string // sorted; empty when the hold has only places
	Places     []Places // by area id
	Generation int64    // the new one
	HolderID   string   // the holder now
	// FromHolderID is the holder before, for EventHoldTransferred ("" for a hold that
	// had none); "" for EventHoldReclaimed, whose holder stays.
	FromHolderID string
	ExpiresAt    time.Time
}

// moveRelayPage bounds the entries one relay transaction writes; a relay writes pages
// until the stream has none left.
const moveRelayPage = 500

// moveSweepEvery is how often the sweep looks for pending moves; moveSweepPage is how
// many shows' streams one Redis pipeline of it reads.
const (
	moveSweepEvery = 2 * time.Second
	moveSweepPage  = 1000
)

// movesKey is the set of shows whose streams of moves may have entries (outside any
// show's hash tag: it names shows), which the sweep looks at.
func (e *Engine) movesKey() string { return e.cfg.KeyPrefix + ":moves" }

// mayMove lists the show in movesKey before a call's move script runs, so that a move
// its engine does not live to relay is found by the sweep. A failed write is the call's
// failure: nothing has moved.
func (e *Engine) mayMove(ctx context.Context, sh *show) error {
	if err := e.rdb.SAdd(ctx, e.movesKey(), sh.id).Err(); err != nil {
		return e.redisErr(err)
	}
	return nil
}

// movedAnswer relays the show's pending moves before a call answers with a moved hold's
// new token (Reclaim, Transfer, and Transfer's replay under its idempotency key). A
// failed relay is ErrUnavailable: the hold has moved, and a retry relays again (a
// Transfer's under its key gets the same hold).
func (e *Engine) movedAnswer(ctx context.Context, sh *show) (err error) {
	if e.hooks.beforeRelay != nil && !e.hooks.beforeRelay(ctx) {
		return fmt.Errorf("%w: the relay of the hold moves was skipped by a test hook", ErrUnavailable)
	}
	_, span := e.step(ctx, "holdfast.moves")
	defer func() { endStep(span, err) }()
	run := e.relays.join(sh.id, func(run *relayRun) { e.runRelays(sh.id, sh.k, run) })
	select {
	case <-run.done:
		err = run.err
	case <-ctx.Done():
		err = unavailable("postgres", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("the hold moved, but its event is not in the feed yet (a retry writes it): %w", err)
	}
	return nil
}

// relayGroup shares an engine's relays of a show between the calls that need one at
// once: one relay of a show runs at a time, and a call waits for the first one to start
// after it asked, which reads the stream after the call's move. N moves of a show at
// once cost this engine two relays in a row, not N.
type relayGroup struct {
	mu     sync.Mutex
	shows  map[string]*relayRun // show -> the relay its calls asking now wait for (nil: the running one's end)
	closed bool                 // the engine is closed: no relay starts
	wg     sync.WaitGroup       // the running relays
}

// relayRun is one relay of a show: done is closed when it has ended, with err.
type relayRun struct {
	done chan struct{}
	err  error
}

// join returns the relay of the show a call waits for: a new one, started at once by
// start (in a goroutine) when none runs, else the one that starts when the running one
// ends; once the engine is closed, one that failed.
func (g *relayGroup) join(showID string, start func(*relayRun)) *relayRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	next, running := g.shows[showID]
	switch {
	case g.closed && !running:
		run := &relayRun{done: make(chan struct{}), err: fmt.Errorf("%w: the engine is closed", ErrUnavailable)}
		close(run.done)
		return run
	case !running:
		if g.shows == nil {
			g.shows = map[string]*relayRun{}
		}
		g.shows[showID] = nil
		run := &relayRun{done: make(chan struct{})}
		g.wg.Add(1)
		go start(run)
		return run
	case next == nil:
		next = &relayRun{done: make(chan struct{})}
		g.shows[showID] = next
	}
	return next
}

// close stops relays from starting and waits for those running to end (Engine.Close).
func (g *relayGroup) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// after ends the show's relay that just ran, and returns the next one to run (its
// callers asked while it ran), or nil: then none runs.
func (g *relayGroup) after(showID string) *relayRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := g.shows[showID]
	if next == nil {
		delete(g.shows, showID)
		return nil
	}
	g.shows[showID] = nil
	return next
}

// runRelays runs the show's relay run, then each one its callers asked for meanwhile,
// each bounded by relayTimeout and the engine's life (not by a caller's context: it
// serves them all).
func (e *Engine) runRelays(showID string, k keys, run *relayRun) {
	defer e.relays.wg.Done()
	for run != nil {
		ctx, cancel := context.WithTimeout(e.viewCtx, e.relayTimeout())
		run.err = e.relayMoves(ctx, showID, k)
		cancel()
		close(run.done)
		run = e.relays.after(showID)
	}
}

// relayTimeout bounds one relay of a show: its transaction's lock wait and statements,
// and its Redis calls.
func (e *Engine) relayTimeout() time.Duration {
	return e.cfg.LockTimeout + 2*e.cfg.StatementTimeout + stallGrace
}

// relayMoves writes every pending move of the show to the event feed and deletes it
// from the show's stream, a page at a time.
func (e *Engine) relayMoves(ctx context.Context, showID string, k keys) error {
	for {
		n, err := e.relayPage(ctx, showID, k)
		if err != nil || n < moveRelayPage {
			return err
		}
	}
}

// relayPage relays the first moveRelayPage entries of the show's stream, and returns how
// many it read. The entries are deleted only once their events are committed; a
// failed delete leaves them for the next relay, which writes nothing for them.
func (e *Engine) relayPage(ctx context.Context, showID string, k keys) (int, error) {
	entries, err := e.rdb.XRangeN(ctx, k.moves(), "-", "+", moveRelayPage).Result()
	if err != nil {
		return 0, unavailable("redis", fmt.Errorf("read the pending hold moves: %w", err))
	}
	if len(entries) == 0 {
		return 0, nil
	}
	rows, err := moveRows(showID, entries)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	err = pgx.BeginTxFunc(ctx, e.pool, e.txOptions(), func(tx pgx.Tx) error {
		q := e.q.WithTx(tx)
		if err := q.MovesRelayLock(ctx, showID); err != nil {
			return err
		}
		_, err := q.HoldEventInsertMany(ctx, rows)
		return err
	})
	if err != nil {
		return 0, unavailable("postgres", fmt.Errorf("write the hold moves' events: %w", err))
	}
	ids := make([]string, len(entries))
	for i, m := range entries {
		ids[i] = m.ID
	}
	if err := e.rdb.XDel(ctx, k.moves(), ids...).Err(); err != nil {
		e.log.WarnContext(ctx, "hold moves relayed but not deleted from Redis: the next relay finds their events written",
			"show_id", showID, "moves", len(ids), "error", err)
	}
	return len(entries), nil
}

// moveRows reads the stream's entries (common.lua: move_log) as the events' rows.
func moveRows(showID string, entries []redis.XMessage) (db.HoldEventInsertManyParams, error) {
	p := db.HoldEventInsertManyParams{ShowID: showID}
	for _, m := range entries {
		f := func(name string) string { s, _ := m.Values[name].(string); return s }
		gen, err1 := strconv.ParseInt(f("g"), 10, 64)
		exp, err2 := strconv.ParseInt(f("x"), 10, 64)
		kind, id, seats := f("k"), f("m"), f("s")
		if err1 != nil || err2 != nil || (kind != EventHoldReclaimed && kind != EventHoldTransferred) || id == "" || seats == "" {
			return p, fmt.Errorf("malformed hold move %s of show %q: %v", m.ID, showID, m.Values)
		}
		p.Kinds, p.Generations, p.Seats = append(p.Kinds, kind), append(p.Generations, gen), append(p.Seats, seats)
		p.HolderIds, p.FromHolderIds = append(p.HolderIds, f("h")), append(p.FromHolderIds, f("f"))
		p.ExpiresAt, p.MoveIds = append(p.ExpiresAt, time.UnixMilli(exp)), append(p.MoveIds, id)
	}
	return p, nil
}

// holdMoveOf is the move of a hold event's row: its seats and place keys split.
func holdMoveOf(r db.EventsAfterRow) *HoldMove {
	m := &HoldMove{ShowID: r.ShowID, Generation: r.Generation, HolderID: r.HolderID, FromHolderID: r.FromHolderID}
	for _, s := range r.SeatIds {
		if a, n, _, ok := parsePlaceKey(s); ok {
			m.Places = append(m.Places, Places{AreaID: a, Count: n})
		} else {
			m.SeatIDs = append(m.SeatIDs, s)
		}
	}
	slices.Sort(m.SeatIDs)
	slices.SortFunc(m.Places, func(a, b Places) int { return strings.Compare(a.AreaID, b.AreaID) })
	if r.ExpiresAt != nil {
		m.ExpiresAt = *r.ExpiresAt
	}
	return m
}

// sweepMoves starts a sweep (sweepOnce) in a goroutine of its own, unless one runs: a
// slow one (a backend that hangs) holds neither the marker repair nor the next tick.
func (e *Engine) sweepMoves(ctx context.Context) {
	if !e.sweeping.CompareAndSwap(false, true) {
		return
	}
	e.sweeps.Go(func() {
		defer e.sweeping.Store(false)
		if err := e.sweepOnce(ctx); err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "relay pending hold moves", "error", err)
		}
	})
}

// sweepOnce relays the moves calls left pending (their engine died between the script
// and the relay, or the relay failed) of every show listed in movesKey, moveSweepPage
// shows at a time: the length of their streams in one Redis pipeline, and a relay for
// each show whose stream has entries. A show whose stream is empty leaves the list
// (idleMoves). With none pending it costs a pipeline a page, and no transaction. A show
// whose stream or relay failed does not stop the others'.
func (e *Engine) sweepOnce(ctx context.Context) error {
	ids, err := e.rdb.SMembers(ctx, e.movesKey()).Result()
	if err != nil {
		return e.redisErr(err)
	}
	var failed error
	for len(ids) > 0 {
		page := ids[:min(len(ids), moveSweepPage)]
		ids = ids[len(page):]
		pending, idle, err := e.pendingMoves(ctx, page)
		if err != nil {
			failed = err
		}
		for _, id := range pending {
			rctx, cancel := context.WithTimeout(ctx, e.relayTimeout())
			if err := e.relayMoves(rctx, id, newKeys(e.cfg.KeyPrefix, id)); err != nil {
				failed = fmt.Errorf("show %q: %w", id, err)
			}
			cancel()
		}
		e.idleMoves(ctx, idle)
	}
	return failed
}

// idleMoves takes shows whose streams were empty out of movesKey, then puts back any
// whose stream has an entry now (a call lists its show before its script: one that
// listed it before this removal and moved after the first look is seen here).
func (e *Engine) idleMoves(ctx context.Context, ids []string) {
	if len(ids) == 0 || e.rdb.SRem(ctx, e.movesKey(), anySlice(ids)...).Err() != nil {
		return
	}
	pending, _, err := e.pendingMoves(ctx, ids)
	if err != nil {
		pending = ids // Redis cannot say: all go back
	}
	if len(pending) > 0 {
		_ = e.rdb.SAdd(ctx, e.movesKey(), anySlice(pending)...).Err()
	}
}

// pendingMoves returns the shows among ids whose streams of moves have entries, and
// those whose streams are empty; a show whose stream could not be read is in neither
// (err says why).
func (e *Engine) pendingMoves(ctx context.Context, ids []string) (pending, idle []string, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	lens := make([]*redis.IntCmd, len(ids))
	_, _ = e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			lens[i] = p.XLen(ctx, newKeys(e.cfg.KeyPrefix, id).moves())
		}
		return nil
	})
	for i, c := range lens {
		switch {
		case c.Err() != nil:
			err = unavailable("redis", fmt.Errorf("show %q: %w", ids[i], c.Err()))
		case c.Val() > 0:
			pending = append(pending, ids[i])
		default:
			idle = append(idle, ids[i])
		}
	}
	return pending, idle, err
}
