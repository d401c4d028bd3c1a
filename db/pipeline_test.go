package db_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// sentTracer counts what a connection sends: queries on their own, and batches.
type sentTracer struct {
	mu                 sync.Mutex
	alone, batches, in int
}

func (s *sentTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alone++
	return ctx
}
func (s *sentTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *sentTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	return ctx
}
func (s *sentTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.in++
}
func (s *sentTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (s *sentTracer) counts() (alone, batches, in int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.alone, s.batches, s.in
}

// tracedTx is a transaction on a connection of its own to a new migrated database, and
// the tracer of that connection.
func tracedTx(t *testing.T) (pgx.Tx, *sentTracer) {
	t.Helper()
	ctx := context.Background()
	cfg := testsvc.Database(t).Config().ConnConfig.Copy()
	tr := &sentTracer{}
	cfg.Tracer = tr
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx, tr
}

func TestPipelinedRunsTheStepsInOrderInOneBatch(t *testing.T) {
	ctx := context.Background()
	tx, tr := tracedTx(t)
	alone0, _, _ := tr.counts()

	var inserted int64
	var locked []db.SeatFencesLockSkipRow
	var exists bool
	err := db.New(tx).Pipelined(ctx,
		func(q *db.Queries) (err error) { inserted, err = q.ShowInsert(ctx, "s1"); return err },
		func(q *db.Queries) error {
			return q.SeatsInsert(ctx, db.SeatsInsertParams{ShowID: "s1", SeatIds: []string{"a", "b"}})
		},
		// Each statement sees what the ones before it wrote.
		func(q *db.Queries) (err error) {
			locked, err = q.SeatFencesLockSkip(ctx, db.SeatFencesLockSkipParams{ShowIds: []string{"s1", "s1"}, SeatIds: []string{"a", "b"}})
			return err
		},
		func(q *db.Queries) (err error) { exists, err = q.ShowExists(ctx, "s1"); return err },
	)
	if err != nil {
		t.Fatal(err)
	}
	if inserted != 1 || len(locked) != 2 || locked[0].SeatID != "a" || locked[1].SeatID != "b" || !exists {
		t.Fatalf("results: inserted %d, locked %+v, exists %v", inserted, locked, exists)
	}
	alone, batches, in := tr.counts()
	if alone != alone0 || batches != 1 || in != 4 {
		t.Fatalf("sent %d queries alone and %d batches of %d queries in all; want one batch of 4", alone-alone0, batches, in)
	}
}

func TestPipelinedStopsAtTheFirstError(t *testing.T) {
	ctx := context.Background()
	tx, _ := tracedTx(t)
	q := db.New(tx)
	if _, err := q.ShowInsert(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	seats := db.SeatsInsertParams{ShowID: "s1", SeatIds: []string{"a"}}
	if err := q.SeatsInsert(ctx, seats); err != nil {
		t.Fatal(err)
	}
	reached := false
	err := q.Pipelined(ctx,
		func(q *db.Queries) error { return q.SeatsInsert(ctx, seats) }, // the seat exists
		func(q *db.Queries) (err error) {
			_, err = q.ShowExists(ctx, "s1")
			reached = err == nil
			return err
		},
	)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("err = %v, want the unique violation of the first step", err)
	}
	if reached {
		t.Fatal("the step after the failed one read a result")
	}
}

func TestPipelinedRefusesStepsItCannotRun(t *testing.T) {
	ctx := context.Background()
	tx, _ := tracedTx(t)
	q := db.New(tx)

	// A step that makes other calls when its results are read than when recorded.
	calls := 0
	err := q.Pipelined(ctx, func(q *db.Queries) error {
		calls++
		if calls == 1 {
			_, err := q.ShowExists(ctx, "s1")
			return err
		}
		_, err := q.ShowInsert(ctx, "s1")
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "other calls") {
		t.Fatalf("a step that changed its calls: err = %v", err)
	}
	if exists, err := q.ShowExists(ctx, "s1"); err != nil || exists {
		t.Fatalf("after the refused step: exists %v, err %v; want nothing written", exists, err)
	}

	// A :batch query (a pgx.Batch of its own).
	err = q.Pipelined(ctx, func(q *db.Queries) error {
		q.BookingCreate(ctx, []db.BookingCreateParams{{ShowID: "s1"}}).Close()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), ":batch") {
		t.Fatalf("a :batch query: err = %v", err)
	}
}
