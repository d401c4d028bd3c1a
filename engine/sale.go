package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// SaleRules are the rules of a show's sale, beyond the seats themselves: a limit of
// seats per holder across orders, and a waiting room. Both are checked inside the hold
// scripts, so that no hold can go around them; the limit is checked again by PostgreSQL
// at confirmation. They mean something only when holder ids cannot be made up: serve
// them with signed holders (package httpapi, HolderAuth).
type SaleRules struct {
	// HolderLimit bounds the seats one holder may hold plus have booked in the show,
	// across orders (a cancelled booking gives its seats back); 0: no such limit. A hold
	// past it is ErrHolderLimit, and so is a confirmation past it.
	HolderLimit int
	// Queue is the show's waiting room; nil: none.
	Queue *WaitingRoom
}

// WaitingRoom admits holders to a show's seats. Hold and HoldBest refuse a holder who is
// not admitted now with ErrNotAdmitted; Join puts a holder in the room.
type WaitingRoom struct {
	// OpensAt is the opening: who joins before it is admitted in a uniformly random
	// order, drawn once at the opening from a seed the engine logs; who joins after it,
	// in order of arrival. Required.
	OpensAt time.Time
	// AdmitPerSecond bounds admissions per second; 0: as many as the show's free seats
	// can serve (counting admissions not used yet and seats held), more as holds
	// expire or are released.
	AdmitPerSecond float64
	// AdmissionTTL is how long an admission lasts; 0: the default, 10 minutes. A
	// holder whose admission ran out leaves the room (their holds stay theirs).
	AdmissionTTL time.Duration
}

// Ticket is a holder's place in a show's waiting room.
type Ticket struct {
	ShowID   string
	HolderID string
	// Position is 1 for the next holder to be admitted and 0 once admitted. Before the
	// opening it is the number of holders in the draw (everyone's place is drawn at the
	// opening). Position + AdmittedTotal stays the same while the holder waits.
	Position int64
	// Admitted is true while the holder may hold, until AdmittedUntil.
	Admitted      bool
	AdmittedUntil time.Time
	// Opened is false before the opening (the order is not drawn yet).
	Opened bool
	// SoldOut is true once every seat of the show is sold: waiting is for nothing
	// unless a booking is cancelled.
	SoldOut bool
	// Waiting is how many holders wait now; AdmittedTotal how many were admitted so far.
	Waiting       int64
	AdmittedTotal int64
	// AdmitRate is the admissions per second of the last 5 to 10 seconds, and
	// EstimatedWait the time to this holder's turn at that rate (0: unknown).
	AdmitRate     float64
	EstimatedWait time.Duration
}

// QueueStatus is a show's waiting room as a whole (a Ticket without a holder).
type QueueStatus struct {
	ShowID        string
	Opened        bool
	SoldOut       bool
	Waiting       int64
	AdmittedTotal int64
	AdmitRate     float64
}

// defaultAdmissionTTL is an admission's life when WaitingRoom.AdmissionTTL is 0.
const defaultAdmissionTTL = 10 * time.Minute

// rulesRefresh is how old an engine's copy of a show's rules may get before it reads
// them again (in the background): a change made through another engine, whose Redis
// write a failover lost, is given back to Redis within this.
const rulesRefresh = time.Second

// maxHolderLimit is the largest SaleRules.HolderLimit.
const maxHolderLimit = 1_000_000

// rulesState is an engine's copy of a show's rules, as the scripts take it: the rules
// of one show (its epoch), at a version of them.
type rulesState struct {
	r       SaleRules
	version int64
	arg     string // the scripts' form (see sale_rules in internal/lua/common.lua)
	at      time.Time
}

// unreadRules is what the scripts are given while the engine has not read a show's
// rules: version 0 of the show's, so Redis's copy of that show's rules decides.
func unreadRules(sh *show) *rulesState {
	return &rulesState{arg: strconv.FormatInt(sh.epoch, 10) + " 0 0 -1 0 0 0", at: time.Now()}
}

// showRules is a show's rules cache, kept on the show.
type showRules struct {
	cur     atomic.Pointer[rulesState]
	reading atomic.Bool
}

func (r *SaleRules) validate() error {
	if r.HolderLimit < 0 || r.HolderLimit > maxHolderLimit {
		return invalid("SaleRules.HolderLimit", "%d is out of range [0, %d]", r.HolderLimit, maxHolderLimit)
	}
	if q := r.Queue; q != nil {
		if q.OpensAt.IsZero() {
			return invalid("SaleRules.Queue.OpensAt", "required")
		}
		if q.OpensAt.Year() < 2000 || q.OpensAt.Year() > 9999 {
			return invalid("SaleRules.Queue.OpensAt", "%s is out of range", q.OpensAt.UTC().Format(time.RFC3339))
		}
		if math.IsNaN(q.AdmitPerSecond) || q.AdmitPerSecond < 0 || q.AdmitPerSecond > 1e6 {
			return invalid("SaleRules.Queue.AdmitPerSecond", "%v is out of range [0, 1000000]", q.AdmitPerSecond)
		}
		if q.AdmissionTTL != 0 && (q.AdmissionTTL < time.Second || q.AdmissionTTL > 24*time.Hour) {
			return invalid("SaleRules.Queue.AdmissionTTL", "%v is out of range [1s, 24h] (0: the default, %v)", q.AdmissionTTL, defaultAdmissionTTL)
		}
	}
	return nil
}

// SetSaleRules replaces a show's sale rules (the zero SaleRules: none). They are stored
// in PostgreSQL, then given to Redis, where the hold scripts read them; every engine
// gives them to Redis again within a second should that write be lost. Turning a
// holder limit on counts each holder's booked seats into Redis from the database. An
// error after the rules were stored says so: they still take effect.
func (e *Engine) SetSaleRules(ctx context.Context, showID string, r SaleRules) error {
	if err := validateID("showID", showID); err != nil {
		return err
	}
	if err := r.validate(); err != nil {
		return err
	}
	_, err := withShow(ctx, e, showID, func(sh *show) (struct{}, error) { return struct{}{}, e.setSaleRules(ctx, sh, r) })
	return err
}

// setSaleRules stores the rules of the show of the engine's copy, then gives them to Redis.
func (e *Engine) setSaleRules(ctx context.Context, sh *show, r SaleRules) error {
	p := db.ShowRulesSetParams{ShowID: sh.id, Epoch: sh.epoch, HolderLimit: int32(r.HolderLimit)}
	if q := r.Queue; q != nil {
		at := q.OpensAt.UTC().Truncate(time.Millisecond)
		p.QueueOpensAt = &at
		p.QueueAdmitPerSecond = q.AdmitPerSecond
		p.QueueAdmissionTtlMs = q.AdmissionTTL.Milliseconds()
	}
	if _, err := e.q.ShowRulesSet(ctx, p); errors.Is(err, pgx.ErrNoRows) {
		return e.replaced(sh) // gone, or another show now: the next read says which
	} else if err != nil {
		return e.pgErr(err)
	}
	st, err := e.loadRules(ctx, sh)
	if err != nil {
		return fmt.Errorf("the rules are stored; Redis gets them within %v: %w", rulesRefresh, err)
	}
	if err := e.pushRules(ctx, sh, st); err != nil {
		return fmt.Errorf("the rules are stored; Redis gets them within %v: %w", rulesRefresh, err)
	}
	if st.r.HolderLimit > 0 {
		if err := e.syncCounts(ctx, sh); err != nil {
			return fmt.Errorf("the rules are stored; the booked seats per holder reach Redis with the next resync: %w", err)
		}
	}
	if st.r.Queue != nil {
		if err := e.seedHeld(ctx, sh); err != nil {
			return fmt.Errorf("the rules are stored; the waiting room does not know the holds taken before it: %w", err)
		}
		e.watchQueue(sh.id)
	}
	e.log.InfoContext(ctx, "sale rules set", "show_id", sh.id, "holder_limit", st.r.HolderLimit,
		"queue", st.r.Queue != nil, "version", st.version)
	return nil
}

// SaleRules returns a show's sale rules as stored (a waiting room's AdmissionTTL as it
// applies: the default when it was set to 0).
func (e *Engine) SaleRules(ctx context.Context, showID string) (SaleRules, error) {
	if err := validateID("showID", showID); err != nil {
		return SaleRules{}, err
	}
	return withShow(ctx, e, showID, func(sh *show) (SaleRules, error) {
		st, err := e.loadRules(ctx, sh)
		if err != nil {
			return SaleRules{}, err
		}
		return st.r, nil
	})
}

// seedHeld records the show's live holds in <base>held, which the waiting room counts
// and the hold scripts keep up only while the show has a room: the holds taken before
// it was turned on. Run after Redis has the rules (holds from then on record themselves).
func (e *Engine) seedHeld(ctx context.Context, sh *show) error {
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		return e.redisErr(err)
	}
	key := sh.k.base + "held"
	for lo := 0; lo < len(sh.seats); lo += resyncPage {
		chunk := sh.seats[lo:min(lo+resyncPage, len(sh.seats))]
		pipe := e.rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, len(chunk))
		for i, s := range chunk {
			ttls[i] = pipe.PTTL(ctx, sh.holdKeys[s])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return e.redisErr(err)
		}
		var members []redis.Z
		for i, c := range ttls {
			if d := c.Val(); d > 0 {
				members = append(members, redis.Z{Score: float64(now.Add(d).UnixMilli()), Member: chunk[i]})
			}
		}
		if len(members) > 0 {
			if err := e.rdb.ZAdd(ctx, key, members...).Err(); err != nil {
				return e.redisErr(err)
			}
		}
	}
	return nil
}

// loadRules reads a show's rules from PostgreSQL into the show's cache (unless the cache
// has a later version: a read that raced a change). A show that another show of its id
// has replaced is dropped (*showChanged).
func (e *Engine) loadRules(ctx context.Context, sh *show) (*rulesState, error) {
	st, err := e.readRules(ctx, sh)
	if err != nil {
		return nil, err
	}
	for {
		old := sh.rules.cur.Load()
		if old != nil && old.version > st.version {
			return old, nil
		}
		if sh.rules.cur.CompareAndSwap(old, st) {
			return st, nil
		}
	}
}

// readRules reads a show's rules from PostgreSQL. A show that another show of its id
// has replaced is dropped (*showChanged).
func (e *Engine) readRules(ctx context.Context, sh *show) (*rulesState, error) {
	row, err := e.q.ShowRulesGet(ctx, sh.id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("show %q", sh.id)
	}
	if err != nil {
		return nil, e.pgErr(err)
	}
	if row.Epoch != sh.epoch {
		return nil, e.replaced(sh)
	}
	st := &rulesState{version: row.RulesVersion, at: time.Now()}
	st.r.HolderLimit = int(row.HolderLimit)
	opens := int64(-1)
	ttl := int64(0)
	rate := 0.0
	if row.QueueOpensAt != nil {
		q := &WaitingRoom{OpensAt: row.QueueOpensAt.UTC(), AdmitPerSecond: row.QueueAdmitPerSecond,
			AdmissionTTL: time.Duration(row.QueueAdmissionTtlMs) * time.Millisecond}
		if q.AdmissionTTL == 0 {
			q.AdmissionTTL = defaultAdmissionTTL
		}
		st.r.Queue = q
		opens, ttl, rate = q.OpensAt.UnixMilli(), q.AdmissionTTL.Milliseconds(), q.AdmitPerSecond
	}
	st.arg = fmt.Sprintf("%d %d %d %d %s %d %d", sh.epoch, st.version, st.r.HolderLimit, opens,
		strconv.FormatFloat(rate, 'f', -1, 64), ttl, row.SeatCount)
	if len(sh.areas) > 0 {
		// The waiting room's supply counts the places with the seats, and its count of
		// what sold reads the areas' markers (queue.lua).
		places := 0
		for _, a := range sh.areas {
			places += a.Capacity
		}
		st.arg += fmt.Sprintf(" %d %d", places, len(sh.areas))
	}
	return st, nil
}

// rulesOf returns the engine's copy of a show's rules, reading them the first time and
// again in the background once older than rulesRefresh. The first read is one for
// every caller at the time, bounded by Config.StatementTimeout (shared); a caller whose
// ctx ends before it answers gets ErrUnavailable. While PostgreSQL cannot be read the
// scripts get unreadRules, and Redis's copy decides. A read that finds the show replaced
// drops the copy (sh.dropped; the caller's script must not run).
func (e *Engine) rulesOf(ctx context.Context, sh *show) (*rulesState, error) {
	st := sh.rules.cur.Load()
	if st == nil {
		st, err := e.sharedRules(ctx, sh)
		if err != nil && ctx.Err() != nil {
			return unreadRules(sh), err // this caller is out of time; the read goes on
		}
		if err != nil {
			// PostgreSQL cannot say now: Redis's copy decides, and the rules are read
			// again in the background from a second on (a hold does not wait for
			// PostgreSQL on every call meanwhile). A show found replaced is dropped:
			// its caller's script does not run (staleCopy).
			unread := unreadRules(sh)
			sh.rules.cur.CompareAndSwap(nil, unread)
			return unread, nil
		}
		return st, nil
	}
	e.refreshRules(sh)
	return st, nil
}

// sharedRules reads a show's rules from PostgreSQL (loadRules) once for every caller at
// the time, bounded by Config.StatementTimeout, each caller waiting for it until its ctx
// ends (shared).
func (e *Engine) sharedRules(ctx context.Context, sh *show) (*rulesState, error) {
	key := "rules\x00" + sh.id + "\x00" + strconv.FormatInt(sh.epoch, 10)
	st, _, err := shared(ctx, &e.loads, key, "postgres", e.cfg.StatementTimeout,
		func(ctx context.Context) (*rulesState, error) { return e.loadRules(ctx, sh) })
	return st, err
}

// refreshRules reads a cached show's rules (and with them its identity) again in the
// background once they are older than rulesRefresh, or were never read: a show deleted
// or replaced (DeleteShow or CreateShow, on any engine) is dropped then.
func (e *Engine) refreshRules(sh *show) {
	if st := sh.rules.cur.Load(); st != nil && time.Since(st.at) <= rulesRefresh {
		return
	}
	if sh.rules.reading.CompareAndSwap(false, true) {
		go func() {
			defer sh.rules.reading.Store(false)
			rctx, cancel := context.WithTimeout(e.viewCtx, e.cfg.StatementTimeout)
			defer cancel()
			st, err := e.loadRules(rctx, sh)
			switch {
			case err == nil && st.r.Queue != nil:
				e.watchQueue(sh.id)
			case errors.Is(err, ErrNotFound):
				e.dropShow(sh, true) // deleted (DeleteShow, on any engine)
			}
		}()
	}
}

// pushRules gives Redis the engine's copy of the rules (kept only when newer).
func (e *Engine) pushRules(ctx context.Context, sh *show, st *rulesState) error {
	_, err := e.queueCall(ctx, sh, "rules", st, "")
	return err
}

// saleRefusal maps a hold script's NOTADMITTED or sale LIMIT reply; nil for others.
func (e *Engine) saleRefusal(sh *show, res []any, n int) error {
	switch status, _ := res[0].(string); {
	case status == "NOTADMITTED":
		e.watchQueue(sh.id)
		return fmt.Errorf("%w: show %s has a waiting room and the holder is not admitted now", ErrNotAdmitted, sh.id)
	case status == "LIMIT" && len(res) >= 3:
		have, _ := res[1].(int64)
		limit, _ := res[2].(int64)
		return fmt.Errorf("%w: the holder holds or has booked %d seats of show %s, %d more would pass its limit of %d",
			ErrHolderLimit, have, sh.id, n, limit)
	}
	return nil
}

// holderCount is a holder's booked seats in a show as PostgreSQL says, with its version.
type holderCount struct {
	tag     string
	version int64
	seats   int32
}

// value is the count as Redis keeps it (counts.lua): "<version>:<seats>".
func (c holderCount) value() string { return fmt.Sprintf("%d:%d", c.version, c.seats) }

// countsCall writes holders' booked-seat counts to Redis (internal/lua/counts.lua).
func countsCall(sh *show, counts []holderCount) scriptCall {
	args := make([]any, 0, 3*len(counts))
	for _, c := range counts {
		args = append(args, c.tag, c.version, c.seats)
	}
	return scriptCall{script: lua.Counts, keys: []string{sh.k.gen()}, args: args}
}

// writeCounts writes holders' booked-seat counts of one show to Redis.
func (e *Engine) writeCounts(ctx context.Context, sh *show, counts []holderCount) error {
	if len(counts) == 0 {
		return nil
	}
	c := countsCall(sh, counts)
	if err := c.script.Run(ctx, e.rdb, c.keys, c.args...).Err(); err != nil {
		return e.redisErr(err)
	}
	return nil
}

// findCounts reads the booked-seat counts of (show, holder) pairs in q's transaction,
// for the shows whose rules have a holder limit; by show id.
func (e *Engine) findCounts(ctx context.Context, q *db.Queries, pairs map[*show]map[string]bool) (map[string][]holderCount, error) {
	var shows, holders []string
	for sh, hs := range pairs {
		for h := range hs {
			if h != "" {
				shows, holders = append(shows, sh.id), append(holders, h)
			}
		}
	}
	if len(shows) == 0 {
		return nil, nil
	}
	rows, err := q.HolderSeatsFind(ctx, db.HolderSeatsFindParams{ShowIds: shows, HolderIds: holders})
	if err != nil {
		return nil, err
	}
	out := map[string][]holderCount{}
	for _, r := range rows {
		out[r.ShowID] = append(out[r.ShowID], holderCount{tag: holderTag(r.HolderID), version: r.Version, seats: r.Seats})
	}
	return out, nil
}

// syncCounts writes every holder's booked-seat count of a show from PostgreSQL to
// Redis, a page at a time (Resync, a holder limit turned on, the marker repair).
func (e *Engine) syncCounts(ctx context.Context, sh *show) error {
	return e.pageCounts(ctx, sh, func(counts []holderCount) error {
		for lo := 0; lo < len(counts); lo += markChunk {
			if err := e.writeCounts(ctx, sh, counts[lo:min(lo+markChunk, len(counts))]); err != nil {
				return err
			}
		}
		return nil
	})
}

// pageCounts reads every holder's booked-seat count of a show from PostgreSQL, a page
// at a time, and gives each page to f.
func (e *Engine) pageCounts(ctx context.Context, sh *show, f func([]holderCount) error) error {
	after := ""
	for {
		rows, err := e.q.HolderSeatsByShow(ctx, db.HolderSeatsByShowParams{ShowID: sh.id, After: after, MaxRows: resyncPage})
		if err != nil {
			return e.pgErr(err)
		}
		counts := make([]holderCount, len(rows))
		for i, r := range rows {
			counts[i] = holderCount{tag: holderTag(r.HolderID), version: r.Version, seats: r.Seats}
		}
		if err := f(counts); err != nil {
			return err
		}
		if len(rows) < resyncPage {
			return nil
		}
		after = rows[len(rows)-1].HolderID
	}
}

// limited reports whether the engine's copy of a show's rules has a holder limit (none
// known when ctx ends before the first read answers: noRules).
func (e *Engine) limited(ctx context.Context, sh *show) bool {
	st, _ := e.rulesOf(ctx, sh)
	return st.r.HolderLimit > 0
}
