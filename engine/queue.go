package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/redis/go-redis/v9"
)

// Join puts a holder in a show's waiting room and returns their ticket. It is
// idempotent: a holder waiting or admitted keeps their place. A show without a waiting
// room is ErrNotFound.
func (e *Engine) Join(ctx context.Context, showID, holderID string) (Ticket, error) {
	ctx, o := e.begin(ctx, "join", showID, 0)
	t, err := e.ticket(ctx, "join", showID, holderID)
	o.end(err, "")
	return t, err
}

// Ticket returns a holder's place in a show's waiting room: ErrNotFound if they never
// joined (or their admission ran out, or Redis lost the room: they join again).
func (e *Engine) Ticket(ctx context.Context, showID, holderID string) (Ticket, error) {
	ctx, o := e.begin(ctx, "ticket", showID, 0)
	t, err := e.ticket(ctx, "ticket", showID, holderID)
	o.end(err, "")
	return t, err
}

func (e *Engine) ticket(ctx context.Context, op, showID, holderID string) (Ticket, error) {
	if err := validateID("showID", showID); err != nil {
		return Ticket{}, err
	}
	if err := requireHolderID(holderID, "a waiting room admits holders"); err != nil {
		return Ticket{}, err
	}
	return withShow(ctx, e, showID, func(sh *show) (Ticket, error) { return e.ticketOn(ctx, sh, op, holderID) })
}

// ticketOn is a join or a ticket read on the engine's copy of the show.
func (e *Engine) ticketOn(ctx context.Context, sh *show, op, holderID string) (Ticket, error) {
	r, err := e.queueCall(ctx, sh, op, e.queueRules(ctx, sh), holderTag(holderID))
	if err != nil {
		return Ticket{}, err
	}
	switch r.status {
	case "NOQUEUE":
		return Ticket{}, notFound("waiting room of show %q (it has none)", sh.id)
	case "NONE":
		e.watchQueue(sh.id)
		return Ticket{}, notFound("place of the holder in the waiting room of show %q: join it", sh.id)
	}
	e.watchQueue(sh.id)
	t := Ticket{ShowID: sh.id, HolderID: holderID, Position: r.position, Admitted: r.status == "ADMITTED",
		Opened: r.opened, SoldOut: r.soldOut, Waiting: r.waiting, AdmittedTotal: r.total, AdmitRate: r.rate}
	if t.Admitted {
		t.AdmittedUntil = time.UnixMilli(r.until)
	} else if r.opened && r.rate > 0 {
		t.EstimatedWait = time.Duration(float64(t.Position) / r.rate * float64(time.Second)).Round(time.Second)
	}
	return t, nil
}

// Queue returns a show's waiting room as a whole, admitting whoever may be admitted
// now. A show without a waiting room is ErrNotFound. Reads within queueStatusAge of
// each other share one Redis call (shared: each waits for it until its ctx ends).
func (e *Engine) Queue(ctx context.Context, showID string) (QueueStatus, error) {
	if err := validateID("showID", showID); err != nil {
		return QueueStatus{}, err
	}
	return withShow(ctx, e, showID, func(sh *show) (QueueStatus, error) { return e.queueOn(ctx, sh) })
}

// queueOn is Queue on the engine's copy of the show.
func (e *Engine) queueOn(ctx context.Context, sh *show) (QueueStatus, error) {
	e.watchQueue(sh.id)
	if q := sh.queue.Load(); q != nil && time.Since(q.at) < queueStatusAge {
		return q.s, q.err
	}
	key := "queue\x00" + sh.id + "\x00" + strconv.FormatInt(sh.epoch, 10)
	q, _, err := shared(ctx, &e.loads, key, "redis", 2*redisCallTimeout, func(ctx context.Context) (*queueRead, error) {
		if q := sh.queue.Load(); q != nil && time.Since(q.at) < queueStatusAge {
			return q, nil
		}
		q := &queueRead{at: time.Now()}
		r, err := e.queueCall(ctx, sh, "admit", e.queueRules(ctx, sh), "")
		switch {
		case err != nil:
			q.err = err
		case r.status == "NOQUEUE":
			q.err = notFound("waiting room of show %q (it has none)", sh.id)
		default:
			q.s = QueueStatus{ShowID: sh.id, Opened: r.opened, SoldOut: r.soldOut, Waiting: r.waiting,
				AdmittedTotal: r.total, AdmitRate: r.rate}
		}
		if err == nil {
			sh.queue.Store(q)
		}
		return q, nil
	})
	if err != nil {
		return QueueStatus{}, err
	}
	return q.s, q.err
}

// queueConcurrency bounds an engine's waiting-room calls in flight.
const queueConcurrency = 64

// queueStatusAge is how long a read of a show's waiting room serves Queue.
const queueStatusAge = 250 * time.Millisecond

// queueRead is a show's last Queue read.
type queueRead struct {
	at  time.Time
	s   QueueStatus
	err error
}

// queueReply is queue.lua's reply.
type queueReply struct {
	status          string
	position, until int64
	opened, soldOut bool
	waiting, total  int64
	rate            float64
	seed            string // the draw's seed, when this call drew
	drawn           int64
}

// queueCall runs queue.lua for op (see the script) and logs the draw when this call
// made it.
func (e *Engine) queueCall(ctx context.Context, sh *show, op string, st *rulesState, tag string) (queueReply, error) {
	var seed [16]byte
	_, _ = rand.Read(seed[:])
	// A holder's calls (join, ticket) take one of the engine's queue slots and go to
	// Redis in their own stream of pipelines (e.queueScripts), never in the holds'
	// (e.scripts): a crowd joining at once waits in its own line, not in front of the
	// holds of those already admitted. The room's own rounds (admit: the ticker and
	// status reads, a few a second) and rule writes skip that line.
	//
	// The wait for a slot is the caller's to bound: under a flood it is where the crowd
	// waits (seconds, by design). Only the call itself is bounded here; and while the
	// last call found Redis unavailable (within queueDownFor, no call answered since),
	// the next ones are refused at once instead of each waiting out its bound.
	if err := e.queueDown(); err != nil {
		return queueReply{}, err
	}
	if err := e.staleCopy(sh); err != nil {
		return queueReply{}, err
	}
	if op == "join" || op == "ticket" {
		select {
		case e.queueSlots <- struct{}{}:
		case <-ctx.Done():
			return queueReply{}, unavailable("redis", ctx.Err())
		}
		defer func() { <-e.queueSlots }()
		if err := e.queueDown(); err != nil { // it went down while this one waited
			return queueReply{}, err
		}
	}
	// Bounded (boundedScripter): every call here is safe to have happened after all (a
	// join is idempotent, the rest read, or admit what is due anyway).
	res, err := lua.Queue.Run(ctx, e.queueScripts, []string{sh.k.gen()}, op, st.arg, tag, hex.EncodeToString(seed[:])).Slice()
	if err != nil {
		if ctx.Err() != nil { // the caller left: Redis said nothing
			return queueReply{}, unavailable("redis", ctx.Err())
		}
		err = e.redisErr(err)
		if errors.Is(err, ErrUnavailable) {
			e.queueFailedAt.Store(time.Now().UnixNano())
		}
		return queueReply{}, err
	}
	if e.queueFailedAt.Load() != 0 { // a load, not a store, on every call of a flood
		e.queueFailedAt.Store(0)
	}
	if len(res) < 9 {
		return queueReply{}, fmt.Errorf("%w: unexpected queue script reply %v", ErrUnavailable, res)
	}
	if status, _ := res[0].(string); status == "STALE" || status == "CLOSED" {
		return queueReply{}, e.metChange(ctx, sh, status)
	}
	i := func(k int) int64 { v, _ := res[k].(int64); return v }
	s := func(k int) string { v, _ := res[k].(string); return v }
	r := queueReply{status: s(0), position: i(1), until: i(2), opened: i(3) == 1, soldOut: i(4) == 1,
		waiting: i(5), total: i(6), seed: s(8)}
	r.rate, _ = strconv.ParseFloat(s(7), 64)
	if len(res) > 9 {
		r.drawn = i(9)
	}
	if r.seed != "" {
		e.log.InfoContext(ctx, "waiting room opened: the order of those who joined before the opening is drawn",
			"show_id", sh.id, "seed", r.seed, "drawn", r.drawn,
			"order", "ascending SHA-1(seed || holder tag), holder tag = hex of the first 16 bytes of SHA-256(\"holdfast-holder\\x00\" || holder id)")
	}
	return r, nil
}

// queueRules are the show's rules for a waiting-room call: the wait for their first
// read is bounded like a call (then noRules: Redis's copy decides); the call bounds
// itself (queueCall). Rules already read need no bound, and a crowd joining at once
// does not pay a timer each.
func (e *Engine) queueRules(ctx context.Context, sh *show) *rulesState {
	if sh.rules.cur.Load() == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, redisCallTimeout)
		defer cancel()
	}
	st, _ := e.rulesOf(ctx, sh)
	return st
}

// queueDownFor is how long after a waiting-room call found Redis unavailable the next
// ones are refused at once (unless one has answered since).
const queueDownFor = time.Second

// queueDown refuses a waiting-room call while the last one found Redis unavailable.
func (e *Engine) queueDown() error {
	at := e.queueFailedAt.Load()
	if at != 0 && time.Since(time.Unix(0, at)) < queueDownFor {
		return unavailable("redis", errors.New("the waiting room's last call found Redis unavailable"))
	}
	return nil
}

// queueWatchFor is how long the engine keeps admitting for a show's waiting room after
// anything asked about it (a join, a ticket, a refused hold, a status read).
const queueWatchFor = time.Minute

// queueTick is how often the engine admits for the waiting rooms it watches.
const queueTick = 200 * time.Millisecond

// queueWatch is the set of waiting rooms the engine admits for, by show id -> until.
type queueWatch struct {
	mu    sync.Mutex
	until map[string]time.Time
	once  sync.Once
}

// watchQueue makes the engine admit for a show's waiting room for the next
// queueWatchFor, and starts the loop that does, once. Admissions also happen on every
// join and ticket: the loop moves the line while nobody asks.
func (e *Engine) watchQueue(showID string) {
	w := &e.queues
	w.mu.Lock()
	if w.until == nil {
		w.until = map[string]time.Time{}
	}
	w.until[showID] = time.Now().Add(queueWatchFor)
	w.mu.Unlock()
	w.once.Do(func() { go e.admitLoop(e.viewCtx) })
}

// admitLoop admits, every queueTick, for each watched waiting room, until the engine
// closes.
func (e *Engine) admitLoop(ctx context.Context) {
	t := time.NewTicker(queueTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var ids []string
		e.queues.mu.Lock()
		for id, until := range e.queues.until {
			if now.After(until) {
				delete(e.queues.until, id)
				continue
			}
			ids = append(ids, id)
		}
		e.queues.mu.Unlock()
		for _, id := range ids {
			sh, known := e.shows.get(id)
			if sh == nil || !known {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			if _, err := e.queueCall(actx, sh, "admit", e.queueRules(actx, sh), ""); err != nil && ctx.Err() == nil {
				e.log.WarnContext(ctx, "waiting room admission", "show_id", id, "error", err)
			}
			cancel()
		}
	}
}

// outsideRoom refuses, before the hold takes one of its show's slots, a holder the
// show's waiting room has not admitted at all (as the engine knows the rules): the
// crowd that skips the room costs one read each, not a hold script, and never crowds
// out admitted holders. Only a certain refusal is made here — no admission — while the
// hold script decides everything else (an admission that ran out included). A read
// that fails, or is not made (admissionNone), leaves it to the script.
func (e *Engine) outsideRoom(ctx context.Context, sh *show, st *rulesState, holderID string) error {
	if st.r.Queue == nil {
		return nil
	}
	if holderID != "" && !e.admissionNone(ctx, sh, holderTag(holderID)) {
		return nil
	}
	e.watchQueue(sh.id)
	return fmt.Errorf("%w: show %s has a waiting room and the holder is not admitted", ErrNotAdmitted, sh.id)
}

// admissionNone reports whether Redis says tag has no admission to sh's room. The reads
// of a crowd share round trips in the room's stream of pipelines (queueReads), apart
// from the holds'. A command queued there does not end with its context (a Redis that
// stopped answering holds it until the pipeline's read times out), so each read is
// bounded like a script call, and at most admissionReads are in flight. A read that
// finds none free within holdAdmissionWait is not made: the script decides.
func (e *Engine) admissionNone(ctx context.Context, sh *show, tag string) bool {
	if !e.admissionSlot(ctx) {
		return false
	}
	err, waited := bounded(ctx, redisCallTimeout, func() error {
		defer func() { <-e.admissionReads }()
		return e.queueReads.ZScore(ctx, sh.k.base+"q:adm", tag).Err()
	})
	return waited == nil && errors.Is(err, redis.Nil)
}

// admissionReads bounds admissionNone's reads in flight per engine.
const admissionReads = 256

// admissionSlot takes one of the admissionReads slots, waiting no longer than
// holdAdmissionWait or ctx for one to come free; it reports whether it took one.
func (e *Engine) admissionSlot(ctx context.Context) bool {
	select {
	case e.admissionReads <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(holdAdmissionWait)
	defer t.Stop()
	select {
	case e.admissionReads <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
