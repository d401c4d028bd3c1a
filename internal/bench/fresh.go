package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/holdfast/holdfast/engine"
)

// The first sale of a new database: the same confirmations on a freshly migrated
// database (no row in any booking table, never analyzed; the engine's connections make
// their plans during the sale) and again after the database has sold before (a history
// of bookings, VACUUM ANALYZE, fresh connections). The plans a connection makes once
// are kept for the whole sale, so a plan made for empty tables that scans them costs
// more with every seat sold.
const (
	freshSeats    = 4_000 // seats confirmed in each measurement, one a hold
	freshClients  = 8     // concurrent confirmers: batches of a few seats, as in the on-sale
	freshHistory  = 5_000 // bookings of the history before the second measurement
	freshWorkload = "first sale of a new database"
)

// freshWorkload measures PostgreSQL's CPU per sold seat on the fresh database, then on
// the seeded one, and prints what each sold seat and each booking wrote (writeCounts).
// It runs first in a run: the scratch database is fresh until then.
func (e *env) freshWorkload(ctx context.Context, r *Report) error {
	// Trigger functions' calls are counted (pg_stat_user_functions) on the connections
	// opened from now on.
	if _, err := e.pool.Exec(ctx, "DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions = ''pl''', current_database()); END$$"); err != nil {
		e.progress("   (trigger calls not counted: %v)", err)
	}
	eng, err := e.engine(engine.Config{})
	if err != nil {
		return err
	}
	fresh, err := e.freshSale(ctx, eng, "fresh-a")
	if err != nil {
		return err
	}
	e.progress("   fresh database: %.3f ms PG CPU per sold seat", fresh.cpu)
	if err := e.bookHistory(ctx, eng, "fresh-history", freshHistory); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return err
	}
	seeded, err := e.freshSale(ctx, eng, "fresh-b")
	if err != nil {
		return err
	}
	e.progress("   seeded database: %.3f ms PG CPU per sold seat", seeded.cpu)
	for _, c := range []struct {
		variant string
		m       freshCost
	}{{"fresh database", fresh}, {"after a history and VACUUM ANALYZE", seeded}} {
		r.Rows = append(r.Rows, Row{Workload: freshWorkload, Variant: c.variant, Clients: freshClients,
			OpsPerS: c.m.s.rate(), P50ms: c.m.s.pct(.5), P99ms: c.m.s.pct(.99), Ratio: c.m.cpu / seeded.cpu,
			Note: fmt.Sprintf("%d seats; per sold seat: %.3f ms PG CPU, %.2f PG transactions; %s", freshSeats, c.m.cpu, c.m.xacts, c.m.writes)})
	}
	ratio := fresh.cpu / seeded.cpu
	r.goal("PostgreSQL CPU per sold seat, fresh database / seeded", "<= 1.20", ratio, ratio <= 1.2)
	return nil
}

// freshCost is one measurement of freshWorkload.
type freshCost struct {
	s          stats
	cpu, xacts float64 // per sold seat: PostgreSQL CPU (ms), transactions
	writes     string  // what the confirmations wrote (writeCounts)
}

// freshSale creates show with freshSeats seats, holds each, and confirms them all from
// freshClients confirmers on fresh connections, measuring PostgreSQL around the
// confirmations only.
func (e *env) freshSale(ctx context.Context, eng *engine.Engine, show string) (freshCost, error) {
	ids := make([]string, freshSeats)
	for i := range ids {
		ids[i] = fmt.Sprintf("F%05d", i)
	}
	if err := eng.CreateShow(ctx, show, ids); err != nil {
		return freshCost{}, err
	}
	holds := make([]engine.Hold, freshSeats)
	if err := parallel(ctx, 50, freshSeats, func(ctx context.Context, i int) error {
		h, err := eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: ids[i : i+1], TTL: holdTTL})
		holds[i] = h
		return err
	}); err != nil {
		return freshCost{}, err
	}
	e.checkpoint(ctx)
	e.pool.Reset() // the confirmations' connections plan on the tables as they are now
	counts, err := e.writeCounters(ctx)
	if err != nil {
		return freshCost{}, err
	}
	before, err := e.measure(ctx)
	if err != nil {
		return freshCost{}, err
	}
	var s stats
	start := time.Now()
	lat := make([]time.Duration, freshSeats)
	err = parallel(ctx, freshClients, freshSeats, func(ctx context.Context, i int) error {
		t := time.Now()
		_, err := eng.Confirm(ctx, holds[i], engine.ConfirmOptions{})
		lat[i] = time.Since(t)
		return err
	})
	s.elapsed, s.ops, s.lat = time.Since(start), freshSeats, lat
	sort.Slice(s.lat, func(i, j int) bool { return s.lat[i] < s.lat[j] })
	if err != nil {
		return freshCost{}, err
	}
	after, err := e.measure(ctx)
	if err != nil {
		return freshCost{}, err
	}
	writes, err := e.writeCounts(ctx, counts, freshSeats, freshSeats)
	if err != nil {
		return freshCost{}, err
	}
	return freshCost{s: s, cpu: 1000 * (after.pgCPU - before.pgCPU) / freshSeats,
		xacts: (after.xacts - before.xacts) / freshSeats, writes: writes}, nil
}

// bookHistory creates show with n seats and books each, one a booking: a database
// that has sold before.
func (e *env) bookHistory(ctx context.Context, eng *engine.Engine, show string, n int) error {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("H%05d", i)
	}
	if err := eng.CreateShow(ctx, show, ids); err != nil {
		return err
	}
	e.progress("   seeding %d bookings of history", n)
	return parallel(ctx, 50, n, func(ctx context.Context, i int) error {
		h, err := eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: ids[i : i+1], TTL: time.Minute})
		if err != nil {
			return err
		}
		_, err = eng.Confirm(ctx, h, engine.ConfirmOptions{})
		return err
	})
}

// writeCounter is a snapshot of what PostgreSQL counts of the writes to one table.
type writeCounter struct {
	ins, upd, hot, del float64 // rows inserted, updated (of which HOT), deleted
	indexes            float64 // its indexes (partial ones by the rows they hold: partial)
	partial            float64 // rows in its partial indexes now
	fkeys              float64 // foreign keys it checks (it references another table)
}

// writeCounters reads, per table of the schema, the counters writeCounts compares, and
// PostgreSQL's WAL position, trigger calls (track_functions) and CPU are read apart.
func (e *env) writeCounters(ctx context.Context) (map[string]writeCounter, error) {
	e.pool.Reset() // every backend's counts flushed (they are sent when it exits)
	time.Sleep(300 * time.Millisecond)
	rows, err := e.pool.Query(ctx, `
		SELECT t.relname, t.n_tup_ins::float8, t.n_tup_upd::float8, t.n_tup_hot_upd::float8, t.n_tup_del::float8,
		       (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid AND i.indpred IS NULL)::float8,
		       (SELECT count(*) FROM pg_constraint c WHERE c.conrelid = t.relid AND c.contype = 'f')::float8,
		       (SELECT string_agg(pg_get_expr(i.indpred, i.indrelid), ' | ') FROM pg_index i WHERE i.indrelid = t.relid AND i.indpred IS NOT NULL)
		FROM pg_stat_user_tables t WHERE t.schemaname = 'public'`)
	if err != nil {
		return nil, err
	}
	type pred struct{ table, preds string }
	var preds []pred
	out := map[string]writeCounter{}
	for rows.Next() {
		var name string
		var c writeCounter
		var p *string
		if err := rows.Scan(&name, &c.ins, &c.upd, &c.hot, &c.del, &c.indexes, &c.fkeys, &p); err != nil {
			rows.Close()
			return nil, err
		}
		out[name] = c
		if p != nil {
			preds = append(preds, pred{name, *p})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, p := range preds {
		c := out[p.table]
		for _, expr := range strings.Split(p.preds, " | ") {
			var n float64
			if err := e.pool.QueryRow(ctx, "SELECT count(*)::float8 FROM "+p.table+" WHERE "+expr).Scan(&n); err != nil {
				return nil, err
			}
			c.partial += n
		}
		out[p.table] = c
	}
	var wal, triggers float64
	if err := e.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8,
		COALESCE((SELECT sum(calls) FROM pg_stat_user_functions), 0)::float8`).Scan(&wal, &triggers); err != nil {
		return nil, err
	}
	e.xactProbes += 2 + len(preds)
	out[walKey], out[triggerKey] = writeCounter{ins: wal}, writeCounter{ins: triggers}
	return out, nil
}

// Keys of writeCounters's map that are not tables.
const (
	walKey     = " wal"
	triggerKey = " triggers"
)

// writeCounts says what was written since before (writeCounters), per sold seat (of
// seats) and per booking (of bookings): rows, index entries, foreign-key checks and
// trigger function calls, by table, and WAL bytes. An index entry is written by every
// inserted row and every update that is not HOT; a foreign key is checked for every
// inserted row of its table.
func (e *env) writeCounts(ctx context.Context, before map[string]writeCounter, seats, bookings int) (string, error) {
	after, err := e.writeCounters(ctx)
	if err != nil {
		return "", err
	}
	var rows, entries, fks float64
	var tables []string
	for name, a := range after {
		if strings.HasPrefix(name, " ") {
			continue
		}
		b := before[name]
		ins, upd, hot, del := a.ins-b.ins, a.upd-b.upd, a.hot-b.hot, a.del-b.del
		if ins+upd+del == 0 {
			continue
		}
		idx := (ins+upd-hot)*a.indexes + max(0, a.partial-b.partial)
		rows += ins + upd + del
		entries += idx
		fks += ins * a.fkeys
		tables = append(tables, fmt.Sprintf("%s %.2g+%.2g~%.2g-%.2g/%.2g", name, ins/float64(seats), upd/float64(seats), hot/float64(seats), del/float64(seats), idx/float64(seats)))
	}
	sort.Strings(tables)
	n, m := float64(seats), float64(bookings)
	wal := after[walKey].ins - before[walKey].ins
	trig := after[triggerKey].ins - before[triggerKey].ins
	return fmt.Sprintf("per sold seat: %.2f rows written, %.2f index entries, %.2f foreign-key checks, %.2f trigger calls, %.0f WAL bytes; per booking: %.2f rows, %.2f index entries, %.0f WAL bytes; by table (inserted+updated~HOT-deleted/index entries, per seat): %s",
		rows/n, entries/n, fks/n, trig/n, wal/n, rows/m, entries/m, wal/m, strings.Join(tables, ", ")), nil
}
