// This file is not generated: it runs sqlc's own queries pipelined.

package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Pipelined runs the queries that steps make, in order, in one round trip to the server
// (one pgx.Batch) instead of one each. Each step makes its calls on the Queries it is
// given and keeps their results; a step makes the same calls every time it is called,
// and only calls that read through Query, QueryRow or Exec (not the :batch ones).
//
// Each query runs on its own: in READ COMMITTED each sees what the ones before it
// wrote and what other transactions committed before it started, as if sent one by
// one. A query that fails ends the run: Pipelined returns its step's error, and inside
// a transaction the queries after it did nothing (the transaction is aborted); outside
// one, the batch is one implicit transaction and nothing of it stays.
//
// It calls each step twice: first to record the queries (their calls fail with
// errRecorded, which the step returns or drops), then, after the batch is sent, to read
// their results in the same order.
func (q *Queries) Pipelined(ctx context.Context, steps ...func(q *Queries) error) error {
	rec := &recorder{}
	for _, step := range steps {
		if err := step(New(rec)); err != nil && !errors.Is(err, errRecorded) {
			return err
		}
	}
	if rec.err != nil {
		return rec.err
	}
	if len(rec.queued) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, c := range rec.queued {
		b.Queue(c.sql, c.args...)
	}
	br := q.db.SendBatch(ctx, b)
	r := &reader{br: br, queued: rec.queued}
	var err error
	for _, step := range steps {
		if err = step(New(r)); err != nil {
			break
		}
	}
	if err == nil && r.next != len(rec.queued) {
		err = fmt.Errorf("db.Queries.Pipelined: the steps read %d of %d results", r.next, len(rec.queued))
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

var (
	// errRecorded is what a query answers while its step is recorded.
	errRecorded = errors.New("db.Queries.Pipelined: query recorded, not run")
	// errBatchQuery refuses a :batch query: it sends a pgx.Batch of its own.
	errBatchQuery = errors.New("db.Queries.Pipelined: a :batch query cannot be pipelined")
)

type queued struct {
	sql  string
	args []any
}

// recorder is the DBTX of the recording pass.
type recorder struct {
	queued []queued
	err    error
}

func (r *recorder) add(sql string, args []any) { r.queued = append(r.queued, queued{sql, args}) }

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.add(sql, args)
	return pgconn.CommandTag{}, errRecorded
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.add(sql, args)
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.add(sql, args)
	return errRow{errRecorded}
}

func (r *recorder) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	r.err = errBatchQuery
	return errBatch{err: r.err}
}

// reader is the DBTX of the reading pass: each call takes the next result of the batch,
// which must be the query it recorded.
type reader struct {
	br     pgx.BatchResults
	queued []queued
	next   int
}

func (r *reader) take(sql string) error {
	if r.next >= len(r.queued) || r.queued[r.next].sql != sql {
		return fmt.Errorf("db.Queries.Pipelined: a step made other calls than it recorded (call %d)", r.next+1)
	}
	r.next++
	return nil
}

func (r *reader) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	if err := r.take(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.br.Exec()
}

func (r *reader) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	if err := r.take(sql); err != nil {
		return nil, err
	}
	return r.br.Query()
}

func (r *reader) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if err := r.take(sql); err != nil {
		return errRow{err}
	}
	return r.br.QueryRow()
}

func (r *reader) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	return errBatch{err: errBatchQuery}
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

// errBatch answers err to a :batch query's calls (sqlc's code makes no others).
type errBatch struct {
	pgx.BatchResults
	err error
}

func (e errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errBatch) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errBatch) QueryRow() pgx.Row                { return errRow{e.err} }
func (e errBatch) Close() error                     { return e.err }
