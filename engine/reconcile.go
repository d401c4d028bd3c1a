package engine

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
)

// LostBooking is a booking that Redis saw committed — its sold markers are there — and
// that the database no longer has: an asynchronous standby was promoted before it had
// received the booking. Its customer was told it succeeded. The booking's generation
// identifies it (every hold has its own), and BookingID names it when Redis knows it.
type LostBooking struct {
	ShowID     string
	Generation int64
	SeatIDs    []string
	Places     []Places // by area id
	// BookingID is the booking's id when Redis knows it (the sale's marker write
	// recorded it); the zero UUID when it does not (markers written by the repair after
	// the hold was gone, or by an older holdfast).
	BookingID uuid.UUID
	keys      []string // its seats and place keys, as its lost event names them
}

// ReconcileReport is what Reconcile found and did.
type ReconcileReport struct {
	ShowID string
	// Lowered counts the markers set back to what the database says.
	Lowered int
	// Lost lists the bookings the database no longer has, by generation.
	Lost []LostBooking
	// LostCancellations counts seats whose cancellation the database no longer has:
	// they are sold again, as the database says.
	LostCancellations int
	// Recounted counts the holders whose booked seats in Redis (the count the holder
	// limit reads) were set to the database's: a lost booking's seats count no more.
	Recounted int
	// RulesRestored is true when Redis's sale rules said what the database's do not, at
	// a version the database's did not pass (a change the failover lost): the database's
	// rules are in force again, their version moved past that one.
	RulesRestored bool
}

// Reconcile makes a show's sold markers in Redis say what PostgreSQL says, in both
// directions: where Redis is ahead of the database — a failover to an asynchronous
// standby lost bookings (or cancellations) whose markers Redis still has — the markers
// are set back, so the lost bookings' seats are sellable again, and each lost booking
// is reported (a log line, holdfast_lost_bookings_total, and the report); every booked
// count per holder that Redis keeps (what the holder limit reads) is set to the
// database's, whatever its version, so a lost booking's seats count against no one's
// limit; the sale rules, when Redis's say what the database's do not at a version the
// database's does not pass (a lost change), are the database's again (reconcileRules);
// then Resync moves every marker and count that is behind forward. Resync alone
// never lowers a marker or a count.
//
// It is safe while the show is on sale: it reads Redis before the database, so a marker
// it sees was written after its booking committed, and a booking the database has is
// in what it reads next; and it changes a marker or a count only if it still holds the
// value it read (compare and set). The engine runs it by itself when it finds
// PostgreSQL to be another server (see failover.go); holdfast resync --from-database
// runs it by hand.
func (e *Engine) Reconcile(ctx context.Context, showID string) (ReconcileReport, error) {
	if err := validateID("showID", showID); err != nil {
		return ReconcileReport{}, err
	}
	ctx, o := e.begin(ctx, "reconcile", showID, 0)
	sh, err := e.show(ctx, showID)
	var rep ReconcileReport
	if err == nil {
		rep, err = e.reconcile(ctx, sh)
	}
	if err == nil {
		err = e.resync(ctx, sh)
	}
	o.end(err, "")
	return rep, err
}

// reconcileBuckets is how many sold-marker hashes one pipeline reads.
const reconcileBuckets = 100

// reconcile is Reconcile's comparison: it sets back the markers where Redis is ahead of
// the database, recounts the holders' booked seats, and reports what a failover lost.
func (e *Engine) reconcile(ctx context.Context, sh *show) (ReconcileReport, error) {
	rep := ReconcileReport{ShowID: sh.id}
	// 1. Redis first: every marker of the show.
	inRedis, err := e.redisMarkers(ctx, sh)
	if err != nil {
		return rep, err
	}
	counts, err := e.readCounts(ctx, sh)
	if err != nil {
		return rep, err
	}
	rules, err := e.rdb.Get(ctx, sh.k.rules()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return rep, e.redisErr(err)
	}
	if e.hooks.afterRead != nil {
		e.hooks.afterRead(ctx, "reconcile")
	}
	// 2. Then the database: what every marker must say.
	inDB, err := e.dbMarkers(ctx, sh)
	if err != nil {
		return rep, err
	}
	// 3. Where Redis is ahead, set it back.
	var seats, was, to []string
	lost := map[int64][]string{}
	for _, s := range slices.Sorted(maps.Keys(inRedis)) {
		r, d := inRedis[s], inDB[s]
		if !sh.markedKey(s) || !markerAhead(r, d) || goneName(s, r, d) {
			continue
		}
		seats, was, to = append(seats, s), append(was, r), append(to, d)
		if g, err := strconv.ParseInt(r, 10, 64); err == nil && g > 0 {
			lost[g] = append(lost[g], s)
		} else {
			rep.LostCancellations++
		}
	}
	// The lost bookings' events first: if setting their markers back fails, the next
	// reconciliation finds them again (and writes no event twice).
	rep.Lost = e.lostBookings(ctx, sh, lost)
	if err := e.recordLost(ctx, rep.Lost); err != nil {
		return rep, err
	}
	if rep.Lowered, err = e.lowerMarkers(ctx, sh, seats, was, to); err != nil {
		return rep, err
	}
	e.m.reconciled.Add(float64(rep.Lowered))
	if rep.Recounted, err = e.recount(ctx, sh, counts); err != nil {
		return rep, err
	}
	if rep.RulesRestored, err = e.reconcileRules(ctx, sh, rules); err != nil {
		return rep, err
	}
	for _, b := range rep.Lost {
		e.log.ErrorContext(ctx, "a booking Redis saw committed is missing from the database (a failover lost it); its seats are sellable again",
			"show_id", sh.id, "booking_id", b.BookingID, "generation", b.Generation, "seats", strings.Join(b.SeatIDs, " "))
	}
	e.m.lostBookings.Add(float64(len(rep.Lost)))
	if rep.LostCancellations > 0 {
		e.log.ErrorContext(ctx, "cancellations missing from the database (a failover lost them); their seats are sold again",
			"show_id", sh.id, "seats", rep.LostCancellations)
	}
	return rep, nil
}

// lostBookings names the bookings of the generations in lost (generation -> seats), by
// generation, with the booking ids Redis knows.
func (e *Engine) lostBookings(ctx context.Context, sh *show, lost map[int64][]string) []LostBooking {
	gens := slices.Sorted(maps.Keys(lost))
	ids := e.lostBookingIDs(ctx, sh, gens)
	var out []LostBooking
	for i, g := range gens {
		out = append(out, LostBooking{ShowID: sh.id, Generation: g, SeatIDs: fencedSeats(lost[g]), Places: placesOf(lost[g]), BookingID: ids[i],
			keys: lost[g]})
	}
	return out
}

// redisMarkers are the sold markers Redis has for the show's seats, by seat.
func (e *Engine) redisMarkers(ctx context.Context, sh *show) (map[string]string, error) {
	inRedis := map[string]string{}
	buckets := slices.Clone(sh.buckets)
	for i := range sh.areas {
		buckets = append(buckets, sh.k.sold(areaBucketBase+i))
	}
	for lo := 0; lo < len(buckets); lo += reconcileBuckets {
		hi := min(lo+reconcileBuckets, len(buckets))
		pipe := e.rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, hi-lo)
		for i, k := range buckets[lo:hi] {
			cmds[i] = pipe.HGetAll(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, e.redisErr(err)
		}
		for _, c := range cmds {
			maps.Copy(inRedis, c.Val())
		}
	}
	return inRedis, nil
}

// dbMarkers are the markers the database says the show's seats must have, by seat.
func (e *Engine) dbMarkers(ctx context.Context, sh *show) (map[string]string, error) {
	inDB := map[string]string{}
	after := ""
	for {
		rows, err := e.q.SeatMarkListByShow(ctx, db.SeatMarkListByShowParams{ShowID: sh.id, After: after, MaxRows: resyncPage})
		if err != nil {
			return nil, e.pgErr(err)
		}
		for _, r := range rows {
			inDB[r.SeatID] = marker(r.Generation, r.Claimed)
		}
		if len(rows) < resyncPage {
			break
		}
		after = rows[len(rows)-1].SeatID
	}
	if len(sh.areas) == 0 {
		return inDB, nil
	}
	places, err := e.q.PlaceMarkListByShow(ctx, sh.id)
	if err != nil {
		return nil, e.pgErr(err)
	}
	for _, r := range places {
		inDB[r.AreaID+"~"+strconv.Itoa(int(r.Places))+"~"+r.HoldID] = marker(r.Generation, r.Claimed)
	}
	return inDB, nil
}

// lowerMarkers sets the markers of seats back from was to to (lower.lua), markChunk
// seats a call, and returns how many Redis lowered.
func (e *Engine) lowerMarkers(ctx context.Context, sh *show, seats, was, to []string) (int, error) {
	lowered := 0
	for lo := 0; lo < len(seats); lo += markChunk {
		hi := min(lo+markChunk, len(seats))
		ks, err := sh.scriptKeys("", seats[lo:hi])
		if err != nil {
			return lowered, err
		}
		args := []any{""}
		for _, part := range [][]string{seats[lo:hi], was[lo:hi], to[lo:hi]} {
			for _, v := range part {
				args = append(args, v)
			}
		}
		res, err := lua.Lower.Run(ctx, e.rdb, ks, args...).Slice()
		if err != nil {
			return lowered, e.redisErr(err)
		}
		if len(res) != 2 {
			return lowered, fmt.Errorf("%w: unexpected lower script reply %v", ErrUnavailable, res)
		}
		n, _ := res[0].(int64)
		lowered += int(n)
		e.wrote(sh, res[1])
	}
	return lowered, nil
}

// lostBookingIDs are the booking ids Redis recorded for the generations gens of the
// show (its booked hash), the zero UUID where it has none.
func (e *Engine) lostBookingIDs(ctx context.Context, sh *show, gens []int64) []uuid.UUID {
	ids := make([]uuid.UUID, len(gens))
	if len(gens) == 0 {
		return ids
	}
	fields := make([]string, len(gens))
	for i, g := range gens {
		fields[i] = strconv.FormatInt(g, 10)
	}
	if vals, err := e.rdb.HMGet(ctx, sh.k.booked(), fields...).Result(); err == nil {
		for i, v := range vals {
			if s, ok := v.(string); ok {
				if b, err := hex.DecodeString(s); err == nil && len(b) == 16 {
					ids[i] = uuid.UUID(b)
				}
			}
		}
	}
	return ids
}

// reconcileCounts is how many booked counts one HSCAN step asks Redis for.
const reconcileCounts = 1000

// readCounts reads the booked seats per holder that Redis keeps for sh (holder tag ->
// "<version>:<seats>", see counts.lua).
func (e *Engine) readCounts(ctx context.Context, sh *show) (map[string]string, error) {
	out := map[string]string{}
	var cursor uint64
	for {
		kv, next, err := e.rdb.HScan(ctx, sh.k.base+"hc", cursor, "", reconcileCounts).Result()
		if err != nil {
			return nil, e.redisErr(err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// recount sets the booked seats per holder in Redis to the database's wherever they
// differ, whichever version each has, and returns how many it set. read is what Redis
// had before the database was read: a count is set only if it still holds that value
// (recount.lua), so one written since by a confirmation stays. Versions do not decide
// here: after a failover to an asynchronous standby the counts of the bookings it lost
// have versions above the new primary's, and the forward-only writes (counts.lua)
// would keep them. A confirmation committed after the database was read, whose count
// write that stale version refused, is counted by the forward-only sync after this
// (resync), from a later read.
func (e *Engine) recount(ctx context.Context, sh *show, read map[string]string) (int, error) {
	inDB := map[string]string{}
	err := e.pageCounts(ctx, sh, func(counts []holderCount) error {
		for _, c := range counts {
			inDB[c.tag] = c.value()
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var args []any
	for _, tag := range slices.Sorted(maps.Keys(inDB)) {
		if read[tag] != inDB[tag] {
			args = append(args, tag, read[tag], inDB[tag])
		}
	}
	for _, tag := range slices.Sorted(maps.Keys(read)) {
		if _, ok := inDB[tag]; !ok {
			args = append(args, tag, read[tag], "")
		}
	}
	n := 0
	for lo := 0; lo < len(args); lo += 3 * markChunk {
		set, err := lua.Recount.Run(ctx, e.rdb, []string{sh.k.gen()}, args[lo:min(lo+3*markChunk, len(args))]...).Int()
		if err != nil {
			return n, e.redisErr(err)
		}
		n += set
	}
	if n > 0 {
		e.log.InfoContext(ctx, "booked seats per holder set to the database's", "show_id", sh.id, "holders", n)
	}
	return n, nil
}

// reconcileRules restores the database's sale rules where Redis's copy, read before the
// database was, is of this show and says anything else at a version the database's
// does not pass: a change that a failover to an asynchronous standby lost (or one the
// new primary made since at the lost one's version). Every copy of the rules — Redis's,
// each engine's — only ever moves forward by version, so lowering Redis's would not
// last (an engine's copy of the lost change gives it back). Instead the database's
// rules, as they are, get a version past the copy's (one statement, past whatever
// version the database has by then: a change made meanwhile stays), and go forward
// from there as any change does:
// to Redis now, to this engine's copy at once, to every other engine's at its next
// read (within rulesRefresh). It reports whether it did so.
func (e *Engine) reconcileRules(ctx context.Context, sh *show, read string) (bool, error) {
	var epoch, version int64
	if _, err := fmt.Sscanf(read, "%d %d ", &epoch, &version); err != nil || epoch != sh.epoch || version == 0 {
		return false, nil // none, another show's, closed, or never set (unreadRules)
	}
	inDB, err := e.readRules(ctx, sh)
	if err != nil {
		return false, err
	}
	if version < inDB.version || read == inDB.arg {
		return false, nil // behind (Resync moves it forward), or the database's
	}
	p := db.ShowRulesVersionPassParams{Above: version, ShowID: sh.id, Epoch: sh.epoch}
	if _, err := e.q.ShowRulesVersionPass(ctx, p); errors.Is(err, pgx.ErrNoRows) {
		return false, e.replaced(sh)
	} else if err != nil {
		return false, e.pgErr(err)
	}
	st, err := e.loadRules(ctx, sh)
	if err == nil {
		err = e.pushRules(ctx, sh, st)
	}
	if err != nil {
		return true, fmt.Errorf("the database's sale rules are in force again; Redis gets them within %v: %w", rulesRefresh, err)
	}
	e.log.ErrorContext(ctx, "sale rules in Redis said a change the database does not have (a failover lost it); the database's are in force again",
		"show_id", sh.id, "lost_version", version, "database_version", inDB.version, "version", st.version)
	return true, nil
}

// goneName reports whether r is the tombstone of a place key the database has no row of
// by that name (d ""): the name of places lowered since (a partial cancellation renames
// the key by its count), which the database no longer says anything of.
func goneName(s, r, d string) bool {
	return d == "" && isPlaceKey(s) && strings.HasPrefix(r, "-")
}

// markerAhead reports whether Redis's marker r is ahead of the database's d ("" for
// none): a booking or cancellation the database does not have.
func markerAhead(r, d string) bool {
	rg, rc := markOrder(r)
	dg, dc := markOrder(d)
	return rg > dg || (rg == dg && rc > dc)
}

// markOrder is mark_order of common.lua: (generation, cancelled); -1 for no marker, 0
// for a value that is not a number.
func markOrder(v string) (int64, int) {
	if v == "" {
		return -1, 0
	}
	g, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0, 0
	case g < 0:
		return -g, 1
	}
	return g, 0
}

// reconcileSoon reconciles every show this engine has loaded, now and once more when
// every batch that may have run on the previous server has ended (its markers written
// or never), in the background. At most one such run at a time.
func (e *Engine) reconcileSoon() {
	if !e.reconciling.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer e.reconciling.Store(false)
		for pass := 0; pass < 2; pass++ {
			if pass == 1 {
				select {
				case <-e.viewCtx.Done():
					return
				case <-time.After(e.reserveLife()):
				}
			}
			for _, sh := range e.shows.all() {
				ctx, cancel := context.WithTimeout(e.viewCtx, reconcileTimeout)
				if _, err := e.reconcile(ctx, sh); err != nil {
					e.log.Warn("reconcile sold markers after a failover", "show_id", sh.id, "error", err)
				} else if err := e.resync(ctx, sh); err != nil {
					e.log.Warn("resync after a failover", "show_id", sh.id, "error", err)
				}
				cancel()
			}
		}
	}()
}

// reconcileTimeout bounds the reconciliation of one show in the background.
const reconcileTimeout = time.Minute
