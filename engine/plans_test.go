package engine

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// planLog collects the plans auto_explain sends a connection as notices: every
// statement's, the statements of the triggers they fire included.
type planLog struct {
	mu    sync.Mutex
	plans []string
}

func (l *planLog) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if strings.Contains(n.Message, "plan:") {
		l.mu.Lock()
		l.plans = append(l.plans, n.Message)
		l.mu.Unlock()
	}
}

// explainedConn is a connection to pool's database on which every statement's plan,
// nested ones included, goes to log (auto_explain, loaded for the session).
func explainedConn(t *testing.T, ctx context.Context, url string, log *planLog) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = log.notice
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, s := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = notice"} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return conn
}

// scanNode matches a plan node that reads a table: "Seq Scan on t", "Index Scan using i
// on t", and so on.
var scanNode = regexp.MustCompile(`(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Bitmap Index Scan)( using \S+)? on (\S+)`)

// tableScans are the nodes of plan that read a table other than by a key: a sequential
// scan, or an index scan without an index condition (the whole index).
func tableScans(plan string) []string {
	var bad []string
	nodes := strings.Split(plan, "->")
	for _, node := range nodes {
		m := scanNode.FindStringSubmatch(node)
		if m == nil {
			continue
		}
		switch m[1] {
		case "Seq Scan":
			bad = append(bad, strings.TrimSpace(strings.SplitN(node, "\n", 2)[0]))
		case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
			if !strings.Contains(node, "Index Cond:") {
				bad = append(bad, strings.TrimSpace(strings.SplitN(node, "\n", 2)[0]))
			}
		}
	}
	return bad
}

// TestSQLBatchPlansProbeByKeyOnAFreshDatabase: on a freshly migrated database (empty
// booking tables, never analyzed), the generic plans of a batch's statements — the
// fence lock, the claims read, the fence advance, the bookings' write and every lookup
// of the triggers it fires, the holder counts, the outbox's delete — read each table by
// key, never by a scan: a connection keeps the plans it makes on empty tables while the
// first sale grows them. (The fence advance and the outbox's delete are the two
// exceptions, said below.)
func TestSQLBatchPlansProbeByKeyOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	sqlShow(t, pool, "fresh", "A1", "A2", "A3")
	if _, err := pool.Exec(ctx, "UPDATE shows SET holder_limit = 6 WHERE show_id = 'fresh'"); err != nil {
		t.Fatal(err)
	}
	log := &planLog{}
	conn := explainedConn(t, ctx, pool.Config().ConnConfig.ConnString(), log)

	shows, seats := []string{"fresh", "fresh"}, []string{"A1", "A2"}
	p1, p2 := bookingParams("fresh", 1, "alice", "A1"), bookingParams("fresh", 2, "bob", "A2")
	var rows []db.BookingCreateManyRow
	e := &Engine{cfg: Config{LockTimeout: defaultLockTimeout, StatementTimeout: defaultStatementTimeout}}
	err := pgx.BeginTxFunc(ctx, conn, e.txOptions(), func(tx pgx.Tx) error {
		q := db.New(tx)
		if _, err := q.SeatFencesLockSkip(ctx, db.SeatFencesLockSkipParams{ShowIds: shows, SeatIds: seats}); err != nil {
			return err
		}
		if _, err := q.SeatClaimsFind(ctx, db.SeatClaimsFindParams{ShowIds: shows, SeatIds: seats}); err != nil {
			return err
		}
		if _, err := q.SeatFencesAdvanceMany(ctx, db.SeatFencesAdvanceManyParams{ShowIds: shows, SeatIds: seats, Generations: []int64{1, 2}}); err != nil {
			return err
		}
		var err error
		if rows, err = q.BookingCreateMany(ctx, createManyParams([]db.BookingCreateParams{p1, p2})); err != nil {
			return err
		}
		_, err = q.HolderSeatsFind(ctx, db.HolderSeatsFindParams{ShowIds: shows, HolderIds: []string{"alice", "bob"}})
		return err
	})
	if err != nil {
		t.Fatalf("the batch: %v", err)
	}
	err = pgx.BeginTxFunc(ctx, conn, e.txOptions(), func(tx pgx.Tx) error {
		_, err := db.New(tx).MarkerOutboxDelete(ctx, db.MarkerOutboxDeleteParams{ShowIds: shows, Seqs: []int64{rows[0].MarkerSeq, rows[1].MarkerSeq}})
		return err
	})
	if err != nil {
		t.Fatalf("the outbox's delete: %v", err)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.plans) < 10 {
		t.Fatalf("auto_explain sent %d plans, want the batch's statements and their triggers'", len(log.plans))
	}
	for _, plan := range log.plans {
		if strings.Contains(plan, "name: SeatFencesAdvanceMany ") || strings.Contains(plan, "name: MarkerOutboxDelete ") {
			// Writes joined to the batch's keys: on a table of a few pages PostgreSQL
			// scans it whatever the statement says (a TID or index probe costs more
			// than reading those pages), and no table here grows under such a plan:
			// the fences grow by a show's creation, which autovacuum analyzes, and the
			// outbox's rows are deleted as soon as Redis has them.
			continue
		}
		if bad := tableScans(plan); len(bad) > 0 {
			t.Errorf("a plan reads a table other than by key (%s):\n%s", strings.Join(bad, "; "), plan)
		}
	}
}
