package bench

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/lua"
)

const (
	invShows    = 100
	invPerShow  = 3000
	hotSeats    = 100_000
	holdTTL     = 10 * time.Minute
	confirmPrep = 60_000 // holds prepared for group commit: 12,000/s for 5 s, 1.4 times its best so far (8,700/s)
)

var errExhausted = errors.New("prepared work exhausted")

// inventory is the shared show inventory: 100 shows of 3,000 seats and one hot show of
// 100,000. Each workload uses a fresh Redis prefix, so holds never collide across runs.
type inventory struct {
	shows []string
	seats []string // S0000 … S2999
	hot   []string // H000000 … H099999
}

func (e *env) inventory(ctx context.Context) (*inventory, error) {
	if e.inv != nil {
		return e.inv, nil
	}
	iv, err := e.newInventory(ctx, "inv")
	if err != nil {
		return nil, err
	}
	q := db.New(e.pool)
	if _, err := q.ShowInsert(ctx, "hot"); err != nil {
		return nil, err
	}
	if err := q.SeatsInsert(ctx, db.SeatsInsertParams{ShowID: "hot", SeatIds: iv.hot}); err != nil {
		return nil, err
	}
	e.inv = iv
	return iv, nil
}

// newInventory creates invShows shows named prefix000… of invPerShow seats each.
func (e *env) newInventory(ctx context.Context, prefix string) (*inventory, error) {
	iv := &inventory{}
	for i := range invPerShow {
		iv.seats = append(iv.seats, fmt.Sprintf("S%04d", i))
	}
	for i := range hotSeats {
		iv.hot = append(iv.hot, fmt.Sprintf("H%06d", i))
	}
	q := db.New(e.pool)
	for i := range invShows {
		show := fmt.Sprintf("%s%03d", prefix, i)
		iv.shows = append(iv.shows, show)
		if _, err := q.ShowInsert(ctx, show); err != nil {
			return nil, err
		}
		if err := q.SeatsInsert(ctx, db.SeatsInsertParams{ShowID: show, SeatIds: iv.seats}); err != nil {
			return nil, err
		}
	}
	return iv, nil
}

// seatOf maps a sequence number onto the inventory, wrapping around when it runs out
// (a wrapped hold is refused: counted apart, never as success).
func (iv *inventory) seatOf(seq int64) (show, seat string) {
	show, seat, _ = iv.seatAt(seq)
	return show, seat
}

// seatAt is seatOf with the seat's index in its show's sorted inventory.
func (iv *inventory) seatAt(seq int64) (show, seat string, index int) {
	i := int(seq % int64(invShows*invPerShow))
	return iv.shows[i/invPerShow], iv.seats[i%invPerShow], i % invPerShow
}

// warm prepares an engine for a fresh prefix the way CreateShow would: the show's
// inventory is loaded and its Redis counter started, so that timed runs measure holds
// and not the first-use rebuild.
func warm(ctx context.Context, eng *engine.Engine, shows ...string) error {
	return parallel(ctx, 8, len(shows), func(ctx context.Context, i int) error { return eng.Resync(ctx, shows[i]) })
}

// epochs is how many fresh Redis prefixes a timed run gets: when a run has used every
// seat of the inventory, it moves to the next prefix, where every seat is free again.
// Two hold 600,000 seats: the hold workload's three levels of its fastest variant (raw,
// no index: ~25,000/s for 5 s each) take about half; each costs a Resync of every show,
// the most of a workload's preparation. A run past them has its holds refused, which
// its row reports.
const epochs = 2

// engines returns epochs warmed engines, each with a prefix of its own.
func (e *env) engines(ctx context.Context, shows ...string) ([]*engine.Engine, error) {
	out := make([]*engine.Engine, epochs)
	for i := range out {
		eng, err := e.engine(engine.Config{})
		if err != nil {
			return nil, err
		}
		if err := warm(ctx, eng, shows...); err != nil {
			return nil, err
		}
		out[i] = eng
	}
	return out, nil
}

// closeAll closes engines before their workload ends (closing again is harmless).
func closeAll(engs []*engine.Engine) {
	for _, eng := range engs {
		eng.Close()
	}
}

func epochOf(seq, space int64) int { return int(min(seq/space, epochs-1)) }

// rawKeys are a script's keys for one seat (index: its place in the show's sorted
// inventory), built as the engine lays them out (internal/lua/common.lua).
func rawKeys(prefix, show, seat string, index int) []string {
	base := showBase(prefix, show)
	return []string{base + "gen", base + "holder:", base + "hold:" + seat, base + "sold:" + strconv.Itoa(index/100)}
}

// showBase is the prefix of a show's Redis keys, as the engine names them
// (engine/ids.go): the show's id as the hash tag.
func showBase(prefix, show string) string { return prefix + ":{" + show + "}:" }

// rawGen is a show's counter key.
func rawGen(prefix, show string) string { return showBase(prefix, show) + "gen" }

// holdWorkload drives engine.Hold and the raw hold script side by side at 1, 50 and 200
// clients, on indexed shows and on shows not indexed, and compares their rates,
// latencies and Redis CPU per hold.
func (e *env) holdWorkload(ctx context.Context, r *Report) error {
	hb, err := e.newHoldBench(ctx)
	if err != nil {
		return err
	}
	defer hb.close()
	var ratio200, p99ratio200, p50ratio1, bareRatio200, cpuIndexed, scriptIndexed, cpuPerHold float64
	for _, clients := range []int{1, 50, 200} {
		l := hb.level(ctx, clients)
		l.rows(r)
		e.progress("   %d clients: engine %.0f/s, raw %.0f/s; shows not indexed: engine %.0f/s, raw %.0f/s", clients, l.s[0].rate(), l.s[1].rate(), l.s[2].rate(), l.s[3].rate())
		switch clients {
		case 1:
			p50ratio1 = l.s[0].pct(.5) / l.s[1].pct(.5)
		case 200:
			ratio200, p99ratio200, bareRatio200 = l.s[0].rate()/l.s[1].rate(), l.s[0].pct(.99)/l.s[1].pct(.99), l.s[2].rate()/l.s[3].rate()
			cpuPerHold = 1e6 * l.cpuPerCall(0)
			cpuIndexed = l.cpuPerCall(0) / l.cpuPerCall(2)
			scriptIndexed = l.scriptPerCall(0) / l.scriptPerCall(2)
		}
	}
	// The engine's holds of a show share calls (group holds) and round trips
	// (autopipelining); the raw script's do not.
	r.goal("hold throughput, engine (grouped, autopipelined) / raw FCALL, 200 clients", ">= 1.50", ratio200, ratio200 >= 1.5)
	r.goal("hold: Redis CPU per hold, indexed show (engine, 200 clients), µs", "<= 10", cpuPerHold, cpuPerHold <= 10)
	r.goal("hold p99, engine / raw FCALL, 200 clients", "<= 1.00", p99ratio200, p99ratio200 <= 1)
	r.goal("hold p50, engine / raw FCALL, 1 client", "<= 1.10", p50ratio1, p50ratio1 <= 1.1)
	r.goal("hold throughput, engine / raw FCALL, 200 clients, shows not indexed", ">= 1.50", bareRatio200, bareRatio200 >= 1.5)
	// What the best-available index costs Redis per hold.
	r.goal("hold: Redis CPU per hold, indexed show / show not indexed (engine, 200 clients)", "<= 1.30", cpuIndexed, cpuIndexed <= 1.3)
	// The same, the scripts' own time only (INFO commandstats): steadier on a shared machine.
	r.goal("hold: script time per hold, indexed show / show not indexed (engine, 200 clients)", "<= 1.30", scriptIndexed, scriptIndexed <= 1.3)
	return nil
}

// holdBench is the hold workload's four variants: the engine and the raw script (the
// same script, keys and arguments, FCALL straight from go-redis), each on shows
// indexed for best-available (counter and index, as the engine prepares them) and on
// shows not indexed (a show no HoldBest or Resync has indexed yet: the script skips the
// index). One set of prefixes per variant serves every level: each level starts where
// the previous one stopped (from), on seats nothing has held.
type holdBench struct {
	e              *env
	iv             *inventory
	space          int64
	engs, bareEngs []*engine.Engine
	indexed, bare  []string          // the raw script's prefixes
	rules          map[string]string // by show: what the raw script is given
	ttl            string
	from           [4]int64 // next sequence number: engine, raw, engine and raw on shows not indexed
}

func (e *env) newHoldBench(ctx context.Context) (*holdBench, error) {
	iv, err := e.inventory(ctx)
	if err != nil {
		return nil, err
	}
	hb := &holdBench{e: e, iv: iv, space: int64(invShows * invPerShow), ttl: strconv.FormatInt(holdTTL.Milliseconds(), 10)}
	if hb.engs, err = e.engines(ctx, iv.shows...); err != nil {
		return nil, err
	}
	if hb.indexed, err = hb.rawPrefixes(ctx, true); err != nil {
		return hb, err
	}
	if hb.bare, err = hb.rawPrefixes(ctx, false); err != nil {
		return hb, err
	}
	bareEngPrefixes, err := hb.rawPrefixes(ctx, false)
	if err != nil {
		return hb, err
	}
	hb.bareEngs = make([]*engine.Engine, epochs)
	for i, p := range bareEngPrefixes {
		if hb.bareEngs[i], err = e.engineAt(p, engine.Config{}); err != nil {
			return hb, err
		}
	}
	// The rules the raw script is given: version 0 of each show's (its identity), so
	// that Redis's copy decides, as an engine's script is given before it read them.
	hb.rules = map[string]string{}
	for _, s := range iv.shows {
		epoch, err := db.New(e.pool).ShowEpochGet(ctx, s)
		if err != nil {
			return hb, err
		}
		hb.rules[s] = strconv.FormatInt(epoch, 10) + " 0 0 -1 0 0 0"
	}
	return hb, nil
}

func (hb *holdBench) close() {
	closeAll(hb.engs)
	closeAll(hb.bareEngs)
}

// rawPrefixes makes epochs fresh prefixes with the inventory's shows prepared as the
// engine's are: indexed (an engine warms them), or with their counter only.
func (hb *holdBench) rawPrefixes(ctx context.Context, indexed bool) ([]string, error) {
	raws := make([]string, epochs)
	for i := range raws {
		raws[i] = hb.e.prefix()
		if indexed {
			eng, err := engine.New(hb.e.pool, hb.e.rdb, &engine.Config{KeyPrefix: raws[i]})
			if err != nil {
				return nil, err
			}
			err = warm(ctx, eng, hb.iv.shows...)
			eng.Close()
			if err != nil {
				return nil, err
			}
			continue
		}
		for _, s := range hb.iv.shows {
			if err := hb.e.rdb.Set(ctx, rawGen(raws[i], s), 0, 0).Err(); err != nil {
				return nil, err
			}
		}
	}
	return raws, nil
}

// holdLevel is one level of clients: each variant's stats, and the Redis server's CPU
// seconds, script time and calls during its drives (per hold: every call, warm-up
// included).
type holdLevel struct {
	clients int
	s       [4]stats
	cpu     [4]float64
	script  [4]time.Duration
	calls   [4]int64
}

func (l *holdLevel) cpuPerCall(v int) float64 { return l.cpu[v] / float64(max(1, l.calls[v])) }
func (l *holdLevel) scriptPerCall(v int) float64 {
	return float64(l.script[v]) / float64(max(1, l.calls[v]))
}

// level runs the engine and the raw script in halves, engine-raw-raw-engine, so that a
// drift of the shared machine during the level weighs on both alike; on indexed shows,
// then on shows not indexed.
func (hb *holdBench) level(ctx context.Context, clients int) *holdLevel {
	l := &holdLevel{clients: clients}
	half := hb.e.o.Duration / 2
	for _, v := range []int{0, 2} {
		es1, rs1 := hb.drive(ctx, l, v, half), hb.drive(ctx, l, v+1, half)
		rs2, es2 := hb.drive(ctx, l, v+1, half), hb.drive(ctx, l, v, half)
		l.s[v], l.s[v+1] = es1.merge(es2), rs1.merge(rs2)
	}
	return l
}

// drive runs variant v for d, from where it last stopped, and adds what Redis spent.
func (hb *holdBench) drive(ctx context.Context, l *holdLevel, v int, d time.Duration) stats {
	e := hb.e
	before, _ := e.redisCPU(ctx)
	scriptBefore, _ := e.scriptTime(ctx)
	s := drive(ctx, l.clients, e.o.Warmup/2, d, func(ctx context.Context, seq int64) error {
		return hb.hold(ctx, v, seq+hb.from[v])
	})
	hb.from[v] += s.issued
	after, err := e.redisCPU(ctx)
	scriptAfter, err2 := e.scriptTime(ctx)
	if err == nil && err2 == nil {
		l.cpu[v] += after - before
		l.script[v] += scriptAfter - scriptBefore
		l.calls[v] += s.issued
	}
	return s
}

// hold is variant v's hold of the seq-th seat.
func (hb *holdBench) hold(ctx context.Context, v int, seq int64) error {
	epoch := epochOf(seq, hb.space)
	switch v {
	case 0, 2:
		engs := hb.engs
		if v == 2 {
			engs = hb.bareEngs
		}
		show, seat := hb.iv.seatOf(seq)
		_, err := engs[epoch].Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{seat}, TTL: holdTTL})
		return err
	default:
		raws := hb.indexed
		if v == 3 {
			raws = hb.bare
		}
		show, seat, index := hb.iv.seatAt(seq)
		res, err := lua.Hold.Run(ctx, hb.e.rdb, rawKeys(raws[epoch], show, seat, index), "", fmt.Sprintf("%032x", seq), hb.ttl, 0, hb.rules[show], seat).Slice()
		if err == nil && res[0] != "OK" {
			err = errors.New("refused")
		}
		return err
	}
}

// rows are the level's four rows.
func (l *holdLevel) rows(r *Report) {
	perHold := func(v int) string {
		return fmt.Sprintf("Redis CPU %.1f µs per hold (the script %.1f µs)", 1e6*l.cpuPerCall(v), float64(l.script[v].Microseconds())/float64(max(1, l.calls[v])))
	}
	es, rs, ebs, bs := l.s[0], l.s[1], l.s[2], l.s[3]
	r.Rows = append(r.Rows,
		Row{Workload: "hold, uncontended", Variant: "engine.Hold", Clients: l.clients, OpsPerS: es.rate(), P50ms: es.pct(.5), P99ms: es.pct(.99), Ratio: es.rate() / rs.rate(), Note: refusals(es, perHold(0))},
		Row{Workload: "hold, uncontended", Variant: "raw FCALL hold", Clients: l.clients, OpsPerS: rs.rate(), P50ms: rs.pct(.5), P99ms: rs.pct(.99), Note: refusals(rs, perHold(1))},
		Row{Workload: "hold, uncontended", Variant: "engine.Hold, show not indexed", Clients: l.clients, OpsPerS: ebs.rate(), P50ms: ebs.pct(.5), P99ms: ebs.pct(.99),
			Ratio: ebs.rate() / bs.rate(), Note: refusals(ebs, "against the raw script on shows not indexed", perHold(2))},
		Row{Workload: "hold, uncontended", Variant: "raw, show not indexed", Clients: l.clients, OpsPerS: bs.rate(), P50ms: bs.pct(.5), P99ms: bs.pct(.99),
			Ratio: bs.rate() / rs.rate(), Note: refusals(bs, "against raw on indexed shows: what the best-available index costs a hold", perHold(3))})
}

// refusals is note, followed by how many of s's operations were refused or failed if
// any were.
func refusals(s stats, note ...string) string {
	if s.errs > 0 {
		note = append(note, fmt.Sprintf("%d refused/failed", s.errs))
	}
	if s.ranOut {
		note = append(note, fmt.Sprintf("its prepared work ran out after %.1fs of the measurement", s.elapsed.Seconds()))
	}
	return strings.Join(slices.DeleteFunc(note, func(n string) bool { return n == "" }), "; ")
}

// confirmWorkload measures Confirm with group commit against one transaction per
// confirmation (ConfirmBatch 1) and against the raw SQL of that transaction, 200
// concurrent confirmers each, on booking tables seeded with history first (on empty
// tables every connection would cache sequential-scan plans for its foreign-key checks,
// which then slow as the tables grow) and on fresh connections.
func (e *env) confirmWorkload(ctx context.Context, r *Report) error {
	cb, err := e.newConfirmBench(ctx)
	if err != nil {
		return err
	}
	e.pool.Reset() // fresh connections: plans made on the seeded tables
	// Each measurement starts right after a checkpoint (e.checkpoint), so that
	// PostgreSQL's timed one (every 5 minutes, and the full-page writes after it) lands
	// in none of them.
	for _, v := range cb.variants {
		if err := cb.measure(ctx, v); err != nil {
			return err
		}
	}
	rs, rawCost, rawConns, err := cb.rawBest(ctx, r)
	if err != nil {
		return err
	}
	for _, v := range cb.variants {
		r.Rows = append(r.Rows, Row{Workload: "confirm", Variant: v.name, Clients: confirmClients, OpsPerS: v.s.rate(), P50ms: v.s.pct(.5), P99ms: v.s.pct(.99),
			Ratio: v.s.rate() / rs.rate(), Note: refusals(v.s, v.note, v.cost)})
		e.progress("   %s: %.0f/s (p99 %.1f ms)", v.name, v.s.rate(), v.s.pct(.99))
	}
	r.Rows = append(r.Rows, Row{Workload: "confirm", Variant: "raw SQL transaction (pgx), best pool", Clients: confirmClients, OpsPerS: rs.rate(), P50ms: rs.pct(.5), P99ms: rs.pct(.99),
		Note: refusals(rs, fmt.Sprintf("%d connections", rawConns), rawCost)})
	e.progress("   raw SQL, best pool (%d connections): %.0f/s (p99 %.1f ms)", rawConns, rs.rate(), rs.pct(.99))
	gs := cb.variants[0].s
	ratio := gs.rate() / rs.rate()
	r.goal("confirm throughput, group commit / raw SQL transaction (best pool), 200 confirmers", ">= 3.00", ratio, ratio >= 3)
	p99 := gs.pct(.99) / rs.pct(.99)
	r.goal("confirm p99, group commit / raw SQL transaction (best pool)", "<= 1.00", p99, p99 <= 1)
	return nil
}

// confirmClients is the confirm workload's concurrent confirmers.
const confirmClients = 200

// confirmVariant is one engine configuration of the confirm workload.
type confirmVariant struct {
	name, note string
	cfg        engine.Config
	prep       int // holds made for it: more than it confirms in a measurement
	eng        *engine.Engine
	holds      []engine.Hold
	s          stats
	cost       string // PostgreSQL's CPU and WAL per confirmation
}

// confirmBench is the confirm workload's set-up: the inventory in parts (history, each
// engine's holds, the raw SQL's), the engines with their holds made.
type confirmBench struct {
	e        *env
	iv       *inventory
	part     int64
	variants []*confirmVariant
	q        *db.Queries
}

func (e *env) newConfirmBench(ctx context.Context) (*confirmBench, error) {
	iv, err := e.newInventory(ctx, "cnf") // shows of its own: the other workloads booked seats of the shared one
	if err != nil {
		return nil, err
	}
	cb := &confirmBench{e: e, iv: iv, q: db.New(e.pool), variants: []*confirmVariant{
		{name: "engine.Confirm, group commit", cfg: engine.Config{}, prep: confirmPrep},
		{name: "engine.Confirm, group commit with savepoints", note: "Config.ConfirmSavepoints", cfg: engine.Config{ConfirmSavepoints: true}, prep: confirmPrep / 2},
		{name: "engine.Confirm, a transaction each", note: "Config.ConfirmBatch 1", cfg: engine.Config{ConfirmBatch: 1}, prep: confirmPrep / 3},
	}}
	cb.part = int64(invShows * invPerShow / (len(cb.variants) + 2))
	for _, v := range cb.variants {
		if v.eng, err = e.engine(v.cfg); err != nil {
			return nil, err
		}
		if err := warm(ctx, v.eng, iv.shows...); err != nil {
			return nil, err
		}
	}
	e.progress("   seeding %d bookings of history", min(cb.part, 5_000))
	if err := parallel(ctx, 50, int(min(cb.part, 5_000)), func(ctx context.Context, i int) error { return cb.raw(ctx, e.pool, int64(i)) }); err != nil {
		return nil, err
	}
	// VACUUM as well: otherwise autovacuum, woken by the seeded rows, runs during the
	// first variant's measurement.
	if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return nil, err
	}
	for i, v := range cb.variants {
		if err := cb.prepare(ctx, v, int64(i+1)*cb.part); err != nil {
			return nil, err
		}
	}
	return cb, nil
}

// prepare makes v's holds, on the inventory's seats from from on.
func (cb *confirmBench) prepare(ctx context.Context, v *confirmVariant, from int64) error {
	v.prep = int(min(int64(v.prep), cb.part))
	v.holds = make([]engine.Hold, v.prep)
	return parallel(ctx, 50, v.prep, func(ctx context.Context, j int) error {
		show, seat := cb.iv.seatOf(from + int64(j))
		h, err := v.eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{seat}, TTL: holdTTL})
		v.holds[j] = h
		return err
	})
}

// confirmTxOptions are the engine's bounds and generic plans (engine/backends.go): what
// it does to its own transactions, the raw design does too.
var confirmTxOptions = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL lock_timeout = '2000ms'; SET LOCAL statement_timeout = '5000ms'; SET LOCAL plan_cache_mode = force_generic_plan"}

// raw is the raw design's confirmation of the i-th seat: its fence and its booking in
// one transaction on pool.
func (cb *confirmBench) raw(ctx context.Context, pool *pgxpool.Pool, i int64) error {
	show, seat := cb.iv.seatOf(i)
	seats := []string{seat}
	fp := make([]byte, 32)
	return pgx.BeginTxFunc(ctx, pool, confirmTxOptions, func(tx pgx.Tx) error {
		qt := cb.q.WithTx(tx)
		adv, err := qt.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: show, SeatIds: seats, Generation: 1})
		if err != nil {
			return err
		}
		if len(adv) != 1 {
			return errors.New("fence refused")
		}
		hold := sha256.Sum256([]byte(show + "\x00" + seat)) // one booking per hold: a hash of its own
		qt.BookingCreate(ctx, []db.BookingCreateParams{{ShowID: show, BookingID: uuid.Must(uuid.NewV7()), Generation: 1,
			Fingerprint: fp, HoldHash: hold[:], SeatIds: seats}}).QueryRow(func(_ int, _ db.BookingCreateRow, e error) { err = e })
		return err
	})
}

// measure confirms v's holds for a measurement and records its stats and cost.
func (cb *confirmBench) measure(ctx context.Context, v *confirmVariant) error {
	e := cb.e
	e.checkpoint(ctx)
	var err error
	v.cost, err = e.pgCost(ctx, func() int64 {
		v.s = drive(ctx, confirmClients, e.o.Warmup, e.o.Duration, func(ctx context.Context, seq int64) error {
			if seq >= int64(len(v.holds)) {
				return errExhausted
			}
			_, err := v.eng.Confirm(ctx, v.holds[seq], engine.ConfirmOptions{})
			return err
		})
		return min(v.s.issued, int64(len(v.holds)))
	})
	return err
}

// rawBest runs the raw design on pools of several sizes, as its operator would size
// it, a row each, and returns the best: the baseline (on 2 cores, 64 connections each
// in a transaction lose to 8).
func (cb *confirmBench) rawBest(ctx context.Context, r *Report) (best stats, bestCost string, bestConns int, err error) {
	e := cb.e
	rawFrom := int64(len(cb.variants)+1) * cb.part
	rawPrep := cb.part / int64(len(rawPools))
	for k, conns := range rawPools {
		pool, err := e.poolOf(ctx, conns)
		if err != nil {
			return best, "", 0, err
		}
		from := rawFrom + int64(k)*rawPrep
		e.checkpoint(ctx)
		var s stats
		cost, err := e.pgCost(ctx, func() int64 {
			s = drive(ctx, confirmClients, e.o.Warmup, e.o.Duration, func(ctx context.Context, seq int64) error {
				if seq >= rawPrep {
					return errExhausted
				}
				return cb.raw(ctx, pool, from+seq)
			})
			return min(s.issued, rawPrep)
		})
		pool.Close()
		if err != nil {
			return best, "", 0, err
		}
		e.progress("   raw SQL on %d connections: %.0f/s (p99 %.1f ms)", conns, s.rate(), s.pct(.99))
		r.Rows = append(r.Rows, Row{Workload: "confirm", Variant: fmt.Sprintf("raw SQL transaction (pgx), %d connections", conns), Clients: confirmClients,
			OpsPerS: s.rate(), P50ms: s.pct(.5), P99ms: s.pct(.99), Note: refusals(s, cost)})
		if s.rate() > best.rate() || bestConns == 0 {
			best, bestCost, bestConns = s, cost, conns
		}
	}
	return best, bestCost, bestConns, nil
}

// pgCost runs a drive, which returns how many operations it ran (its warm-up's
// included: the counters cover the whole drive), and says what PostgreSQL spent on each:
// CPU (every postgres process) and WAL.
func (e *env) pgCost(ctx context.Context, run func() int64) (string, error) {
	before, err := e.measure(ctx)
	if err != nil {
		return "", err
	}
	ops := run()
	after, err := e.measure(ctx)
	if err != nil {
		return "", err
	}
	n := float64(max(1, ops))
	return fmt.Sprintf("per confirmation: %.3f ms PG CPU, %.0f WAL bytes", 1000*(after.pgCPU-before.pgCPU)/n, (after.walBytes-before.walBytes)/n), nil
}

// rawPools are the pool sizes the raw SQL design is measured on.
var rawPools = []int{4, 8, 16, 64}

// parallel runs fn for i in [0, n) from clients goroutines and returns the first error.
func parallel(ctx context.Context, clients, n int, fn func(context.Context, int) error) error {
	errs := make(chan error, clients)
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range n {
			next <- i
		}
	}()
	for range clients {
		go func() {
			var first error
			for i := range next {
				if err := fn(ctx, i); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	var first error
	for range clients {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (e *env) shapeWorkload(ctx context.Context, r *Report) error {
	iv, err := e.inventory(ctx)
	if err != nil {
		return err
	}
	const clients = 50
	var one float64
	for _, k := range []int{1, 4, 10} {
		engs, err := e.engines(ctx, iv.shows...)
		if err != nil {
			return err
		}
		perShow := int64(invPerShow / k)
		space := int64(invShows) * perShow
		s := drive(ctx, clients, e.o.Warmup/2, e.o.Duration/2, func(ctx context.Context, seq int64) error {
			i := seq % space
			show := iv.shows[i/perShow]
			first := int(i%perShow) * k
			_, err := engs[epochOf(seq, space)].Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: iv.seats[first : first+k], TTL: holdTTL})
			return err
		})
		row := Row{Workload: "shape: seats per hold", Variant: fmt.Sprintf("%d seats, 100 shows", k), Clients: clients,
			OpsPerS: s.rate(), P50ms: s.pct(.5), P99ms: s.pct(.99), Note: refusals(s, fmt.Sprintf("%.0f seats/s", s.rate()*float64(k)))}
		if k == 1 {
			one = s.rate()
		} else {
			row.Ratio = s.rate() / one
		}
		r.Rows = append(r.Rows, row)
		closeAll(engs)
	}
	engs, err := e.engines(ctx, "hot")
	if err != nil {
		return err
	}
	s := drive(ctx, clients, e.o.Warmup/2, e.o.Duration/2, func(ctx context.Context, seq int64) error {
		_, err := engs[epochOf(seq, hotSeats)].Hold(ctx, engine.HoldRequest{ShowID: "hot", SeatIDs: []string{iv.hot[seq%hotSeats]}, TTL: holdTTL})
		return err
	})
	r.Rows = append(r.Rows, Row{Workload: "shape: hot show", Variant: "1 seat, one show", Clients: clients,
		OpsPerS: s.rate(), P50ms: s.pct(.5), P99ms: s.pct(.99), Ratio: s.rate() / one, Note: refusals(s)})
	return nil
}

// usedMemory reads Redis's used_memory less what its clients' buffers take (which
// the previous workload's connections may free in the middle of a measurement).
func (e *env) usedMemory(ctx context.Context) (float64, error) {
	time.Sleep(200 * time.Millisecond) // let lazy frees and client buffers settle
	info, err := e.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	var used, clients float64
	var found bool
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, err = strconv.ParseFloat(v, 64)
			found = err == nil
		}
		if v, ok := strings.CutPrefix(line, "mem_clients_normal:"); ok {
			clients, _ = strconv.ParseFloat(v, 64)
		}
	}
	if !found {
		return 0, errors.New("INFO memory has no used_memory")
	}
	return used - clients, nil
}

// memoryWorkload measures what a live hold and a sold seat cost Redis, what the change
// feed adds, and the engine's heap and allocations per Hold and Confirm call.
func (e *env) memoryWorkload(ctx context.Context, r *Report) error {
	iv, err := e.inventory(ctx)
	if err != nil {
		return err
	}
	mrdb, prefix, done := e.emptyRedis(ctx)
	defer done()
	if err := e.redisPerHold(ctx, r, iv, mrdb, prefix); err != nil {
		return err
	}
	if err := e.redisPerSoldSeat(ctx, r, iv, mrdb, prefix+"m"); err != nil {
		return err
	}
	if err := e.heapPerCall(ctx, r, iv); err != nil {
		return err
	}
	r.goal("Redis bytes per live hold", "<= 200", r.Memory.RedisBytesPerHold, r.Memory.RedisBytesPerHold <= 200)
	r.goal("Redis bytes per sold seat", "<= 64", r.Memory.RedisBytesPerSoldSeat, r.Memory.RedisBytesPerSoldSeat <= 64)
	return nil
}

// memoryHolds is how many single-seat holds the Redis bytes per live hold are over.
const memoryHolds = 100_000

// emptyRedis is where to measure Redis memory: an empty logical database of the same
// server (one Redis, not a cluster), where the main dictionary grows from nothing, as it
// would for the holds alone, instead of rehashing around the keys earlier workloads
// left — with the engine's default key prefix, whose key lengths are what a deployment
// sees, emptied again by done. Else the run's own Redis and a fresh prefix.
func (e *env) emptyRedis(ctx context.Context) (rdb redis.UniversalClient, prefix string, done func()) {
	c, ok := e.rdb.(*redis.Client)
	if !ok {
		return e.rdb, e.prefix(), func() {}
	}
	opt := *c.Options()
	opt.DB = 15
	mc := redis.NewClient(&opt)
	if n, err := mc.DBSize(ctx).Result(); err != nil || n != 0 {
		mc.Close()
		return e.rdb, e.prefix(), func() {}
	}
	return mc, "holdfast", func() {
		mc.FlushDB(context.WithoutCancel(ctx))
		mc.Close()
	}
}

// redisPerHold is Redis bytes per live hold (memoryHolds single-seat holds), apart from
// the change feed's entries, which are bounded per show (about 4,096 entries), not per
// hold; and a show's feed at its bound (10,000 holds on the hot show).
func (e *env) redisPerHold(ctx context.Context, r *Report, iv *inventory, mrdb redis.UniversalClient, prefix string) error {
	eng, err := engine.New(e.pool, mrdb, &engine.Config{KeyPrefix: prefix})
	if err != nil {
		return err
	}
	defer eng.Close()
	if err := warm(ctx, eng, iv.shows...); err != nil { // counters first, so that they are not counted
		return err
	}
	before, err := e.usedMemory(ctx)
	if err != nil {
		return err
	}
	if err := parallel(ctx, 50, memoryHolds, func(ctx context.Context, i int) error {
		show, seat := iv.seatOf(int64(i))
		_, err := eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{seat}, TTL: holdTTL})
		return err
	}); err != nil {
		return err
	}
	after, err := e.usedMemory(ctx)
	if err != nil {
		return err
	}
	var feeds float64
	for _, show := range iv.shows {
		n, err := mrdb.MemoryUsage(ctx, showBase(prefix, show)+"feed", 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) { // nil: no hold fell on this show
			return err
		}
		m, _ := mrdb.MemoryUsage(ctx, showBase(prefix, show)+"feed:n", 0).Result()
		feeds += float64(n + m)
	}
	r.Memory.RedisBytesPerHold = (after - before - feeds) / memoryHolds
	r.Memory.RedisFeedBytesPerHold = feeds / memoryHolds
	if err := parallel(ctx, 50, 10_000, func(ctx context.Context, i int) error {
		_, err := eng.Hold(ctx, engine.HoldRequest{ShowID: "hot", SeatIDs: []string{iv.hot[i]}, TTL: holdTTL})
		return err
	}); err != nil {
		return err
	}
	fb, err := mrdb.MemoryUsage(ctx, prefix+":{hot}:feed", 0).Result()
	r.Memory.RedisFeedBytesPerShow = float64(fb)
	return err
}

// redisPerSoldSeat is Redis bytes per sold seat: the markers of 50,000 seats of one
// show, under prefix mp.
func (e *env) redisPerSoldSeat(ctx context.Context, r *Report, iv *inventory, mrdb redis.UniversalClient, mp string) error {
	const sold = 50_000
	mrdb.Set(ctx, rawGen(mp, "hot"), 0, 0)
	before, _ := e.usedMemory(ctx)
	if err := parallel(ctx, 50, sold, func(ctx context.Context, i int) error {
		seat := iv.hot[i]
		return lua.Mark.Run(ctx, mrdb, rawKeys(mp, "hot", seat, i), "", "-", seat, strconv.Itoa(100_000+i)).Err()
	}); err != nil {
		return err
	}
	after, _ := e.usedMemory(ctx)
	r.Memory.RedisBytesPerSoldSeat = (after - before) / sold
	return nil
}

// heapPerCall is the engine's heap bytes and allocations per Hold and per Confirm
// call, sequential, each after a warm-up of 100 calls.
func (e *env) heapPerCall(ctx context.Context, r *Report, iv *inventory) error {
	heng, err := e.engine(engine.Config{})
	if err != nil {
		return err
	}
	if err := warm(ctx, heng, iv.shows...); err != nil {
		return err
	}
	const calls = 2000
	held := make([]engine.Hold, calls)
	r.Memory.HoldBytesPerOp, r.Memory.HoldAllocsPerOp, err = perCall(calls, func(i int) error {
		show, seat := iv.seatOf(int64(memoryHolds + i))
		h, err := heng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{seat}, TTL: holdTTL})
		held[i] = h
		return err
	})
	if err != nil {
		return err
	}
	r.Memory.ConfirmBytesPerOp, r.Memory.ConfirmAllocsPerOp, err = perCall(calls, func(i int) error {
		_, err := heng.Confirm(ctx, held[i], engine.ConfirmOptions{})
		return err
	})
	return err
}

// perCall runs call(i) for i in [0, n), and returns the heap bytes and allocations of
// each call past the first 100 (the warm-up).
func perCall(n int, call func(i int) error) (bytes, allocs float64, err error) {
	for i := range 100 {
		if err := call(i); err != nil {
			return 0, 0, err
		}
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := 100; i < n; i++ {
		if err := call(i); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&m1)
	k := float64(n - 100)
	return float64(m1.TotalAlloc-m0.TotalAlloc) / k, float64(m1.Mallocs-m0.Mallocs) / k, nil
}
