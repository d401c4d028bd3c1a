package engine

// SQL-level integration tests: the schema and the sqlc queries, against a real
// PostgreSQL, with concurrent sessions.

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/testsvc"
)

func sqlShow(t *testing.T, pool *pgxpool.Pool, show string, seats ...string) {
	t.Helper()
	q := db.New(pool)
	if _, err := q.ShowInsert(t.Context(), show); err != nil {
		t.Fatalf("insert show: %v", err)
	}
	if err := q.SeatsInsert(t.Context(), db.SeatsInsertParams{ShowID: show, SeatIds: seats}); err != nil {
		t.Fatalf("insert seats: %v", err)
	}
}

func fence(t *testing.T, pool *pgxpool.Pool, show, seat string) int64 {
	t.Helper()
	g, err := db.New(pool).SeatFenceGet(t.Context(), db.SeatFenceGetParams{ShowID: show, SeatID: seat})
	if err != nil {
		t.Fatalf("read fence: %v", err)
	}
	return g
}

func bookingParams(show string, gen int64, holder string, seats ...string) db.BookingCreateParams {
	return db.BookingCreateParams{ShowID: show, BookingID: uuid.New(), Generation: gen, HolderID: holder,
		Fingerprint: make([]byte, 32), HoldHash: holdHash(show, newToken()), SeatIds: seats}
}

// createBooking runs BookingCreate for one booking.
func createBooking(ctx context.Context, q *db.Queries, p db.BookingCreateParams) (row db.BookingCreateRow, err error) {
	q.BookingCreate(ctx, []db.BookingCreateParams{p}).QueryRow(func(_ int, r db.BookingCreateRow, e error) { row, err = r, e })
	return row, err
}

// sqlBook advances the fences of p's seats to its generation and creates the booking,
// in one transaction, as a confirmation does.
func sqlBook(ctx context.Context, pool *pgxpool.Pool, p db.BookingCreateParams) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if _, err := q.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: p.ShowID, SeatIds: p.SeatIds, Generation: p.Generation}); err != nil {
			return err
		}
		_, err := createBooking(ctx, q, p)
		return err
	})
}

// waitLocked waits until the server process pid waits on a lock.
func waitLocked(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		err := pool.QueryRow(t.Context(),
			"SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&waiting)
		if err == nil && waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never waited on a lock", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSQLFenceTwoTransactions(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	cases := []struct {
		first, second int64
		secondWins    bool
	}{
		{5, 6, true},  // the larger comes last: it advances the fence
		{6, 5, false}, // the smaller comes last, after the larger committed: refused
		{6, 6, false}, // an equal generation is refused
	}
	for i, c := range cases {
		show := "fence" + string(rune('a'+i))
		sqlShow(t, pool, show, "A1")
		tx1, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got1, err := db.New(pool).WithTx(tx1).SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: show, SeatIds: []string{"A1"}, Generation: c.first})
		if err != nil || len(got1) != 1 {
			t.Fatalf("first advance: %v %v", got1, err)
		}
		tx2, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []string, 1)
		go func() {
			got, err := db.New(pool).WithTx(tx2).SeatFencesAdvance(context.Background(), db.SeatFencesAdvanceParams{ShowID: show, SeatIds: []string{"A1"}, Generation: c.second})
			if err != nil {
				t.Errorf("second advance: %v", err)
			}
			done <- got
		}()
		waitLocked(t, pool, tx2.Conn().PgConn().PID()) // the second blocks on the first
		if err := tx1.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		got2 := <-done
		if err := tx2.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if won := len(got2) == 1; won != c.secondWins {
			t.Errorf("%d then %d: second advanced = %v, want %v", c.first, c.second, won, c.secondWins)
		}
		if f, want := fence(t, pool, show, "A1"), max(c.first, c.second); f != want {
			t.Errorf("%d then %d: fence %d, want %d", c.first, c.second, f, want)
		}
	}
}

func TestSQLClaimIsUnique(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	sqlShow(t, pool, "claim", "A1", "A2")
	book := func(gen int64, seats ...string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			q := db.New(pool).WithTx(tx)
			adv, err := q.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: "claim", SeatIds: seats, Generation: gen})
			if err != nil {
				return err
			}
			if len(adv) != len(seats) {
				t.Fatalf("generation %d did not pass the fence", gen)
			}
			_, err = createBooking(ctx, q, bookingParams("claim", gen, "", seats...))
			return err
		})
	}
	if err := book(5, "A1"); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	// The second passes its fence (6 > 5) but the seat is claimed.
	err := book(6, "A1", "A2")
	if !errors.Is(claimErr(err), errSeatClaimed) {
		t.Fatalf("second claim: %v, want a unique violation mapped to errSeatClaimed", err)
	}
	var claims int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM seat_claims WHERE show_id = 'claim'").Scan(&claims); err != nil || claims != 1 {
		t.Fatalf("claims = %d (%v), want 1", claims, err)
	}
	if f := fence(t, pool, "claim", "A2"); f != 0 {
		t.Fatalf("the refused transaction moved A2's fence to %d", f)
	}
}

func TestSQLCancelledBookingKeepsItsFence(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	sqlShow(t, pool, "cancel", "A1")
	q := db.New(pool)
	p := bookingParams("cancel", 5, "", "A1")
	if err := sqlBook(ctx, pool, p); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := cancelTx(ctx, db.New(tx), p.BookingID, bookingKey{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	adv, err := q.SeatFencesAdvance(ctx, db.SeatFencesAdvanceParams{ShowID: "cancel", SeatIds: []string{"A1"}, Generation: 5})
	if err != nil || len(adv) != 0 {
		t.Fatalf("generation 5 passed the fence again after cancel: %v %v", adv, err)
	}
	if f := fence(t, pool, "cancel", "A1"); f != 5 {
		t.Fatalf("fence %d after cancel, want 5", f)
	}
}

func TestSQLIdempotencyKeyIsUniquePerHolder(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	sqlShow(t, pool, "idem", "A1", "A2", "A3")
	p1 := bookingParams("idem", 1, "alice", "A1")
	p1.IdempotencyKey.String, p1.IdempotencyKey.Valid = "key-1", true
	if err := sqlBook(ctx, pool, p1); err != nil {
		t.Fatal(err)
	}
	p2 := bookingParams("idem", 2, "alice", "A2")
	p2.IdempotencyKey = p1.IdempotencyKey
	if err := sqlBook(ctx, pool, p2); !errors.Is(claimErr(err), errKeyConflict) {
		t.Fatalf("second booking with alice's key: %v, want errKeyConflict", err)
	}
	p3 := bookingParams("idem", 3, "bob", "A3")
	p3.IdempotencyKey = p1.IdempotencyKey
	if err := sqlBook(ctx, pool, p3); err != nil {
		t.Fatalf("bob may use the same key: %v", err)
	}
}

func TestSQLConstraintsRefuseBadRows(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	sqlShow(t, pool, "cons", "A1")
	q := db.New(pool)
	p := bookingParams("cons", 7, "", "A1")
	if err := sqlBook(ctx, pool, p); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		run  func() error
		code string
	}{
		{"show id with a colon", func() error { _, err := q.ShowInsert(ctx, "a:b"); return err }, "23514"},
		{"show id with braces", func() error { _, err := q.ShowInsert(ctx, "{x}"); return err }, "23514"},
		{"show id of 65 characters", func() error { _, err := q.ShowInsert(ctx, string(make65())); return err }, "23514"},
		{"seat id with a space", func() error {
			return q.SeatsInsert(ctx, db.SeatsInsertParams{ShowID: "cons", SeatIds: []string{"B 1"}})
		}, "23514"},
		{"generation zero", func() error { _, err := createBooking(ctx, q, bookingParams("cons", 0, "", "A1")); return err }, "23514"},
		{"negative generation", func() error { _, err := createBooking(ctx, q, bookingParams("cons", -3, "", "A1")); return err }, "23514"},
		{"unknown seat", func() error { _, err := createBooking(ctx, q, bookingParams("cons", 9, "", "Z9")); return err }, "23503"},
		{"unknown show", func() error { _, err := createBooking(ctx, q, bookingParams("nope", 9, "", "A1")); return err }, "23503"},
		{"unknown status", func() error {
			_, err := pool.Exec(ctx, "UPDATE bookings SET status = 'refunded' WHERE booking_id = $1", p.BookingID)
			return err
		}, "23514"},
		{"cancelled without a time", func() error {
			_, err := pool.Exec(ctx, "UPDATE bookings SET status = 'cancelled' WHERE booking_id = $1", p.BookingID)
			return err
		}, "23514"},
		{"event log update", func() error {
			_, err := pool.Exec(ctx, "UPDATE booking_events SET generation = 1")
			return err
		}, "23001"},
		{"event log delete", func() error {
			_, err := pool.Exec(ctx, "DELETE FROM booking_events")
			return err
		}, "23001"},
	}
	for _, c := range cases {
		err := c.run()
		if got := pgCode(err); got != c.code {
			t.Errorf("%s: error %v (code %q), want code %s", c.name, err, got, c.code)
		}
	}
}

func make65() []byte {
	b := make([]byte, 65)
	for i := range b {
		b[i] = 'a'
	}
	return b
}

func TestSQLFenceUnderManyWriters(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	sqlShow(t, pool, "many", "A1")
	var (
		mu       sync.Mutex
		accepted []int64
		wg       sync.WaitGroup
	)
	for range 32 {
		wg.Go(func() {
			for range 5 {
				gen := rand.Int64N(1000) + 1
				err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
					adv, err := db.New(pool).WithTx(tx).SeatFencesAdvance(context.Background(),
						db.SeatFencesAdvanceParams{ShowID: "many", SeatIds: []string{"A1"}, Generation: gen})
					if err != nil {
						return err
					}
					if len(adv) == 1 {
						// The row lock is held until commit, so appends happen in commit order.
						mu.Lock()
						accepted = append(accepted, gen)
						mu.Unlock()
					}
					return nil
				})
				if err != nil {
					t.Errorf("advance: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if len(accepted) == 0 {
		t.Fatal("no generation accepted")
	}
	for i := 1; i < len(accepted); i++ {
		if accepted[i] <= accepted[i-1] {
			t.Fatalf("accepted generations not strictly increasing: %v", accepted)
		}
	}
	if f := fence(t, pool, "many", "A1"); f != slices.Max(accepted) || f != accepted[len(accepted)-1] {
		t.Fatalf("fence %d, want the largest accepted %d", f, slices.Max(accepted))
	}
}

// TestSQLInvariants: each invariant the engine keeps is also the schema's, so a direct
// SQL write (psql, a script, a bug) that breaks one is refused.
func TestSQLInvariants(t *testing.T) {
	t.Parallel()
	pool := testsvc.Database(t)
	ctx := t.Context()
	sqlShow(t, pool, "inv", "A1", "A2", "A3")
	p := bookingParams("inv", 5, "", "A1")
	if err := sqlBook(ctx, pool, p); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE seat_fences SET generation = 6 WHERE show_id = 'inv' AND seat_id = 'A2'"); err != nil {
		t.Fatalf("raising a fence: %v", err)
	}
	inTx := func(stmts ...string) func() error {
		return func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, s := range stmts {
					var args []any
					if strings.Contains(s, "$1") {
						args = append(args, p.BookingID)
					}
					if _, err := tx.Exec(ctx, s, args...); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	cases := []struct {
		name       string
		run        func() error
		code, rule string
	}{
		{"lower a fence", inTx("UPDATE seat_fences SET generation = 4 WHERE show_id = 'inv' AND seat_id = 'A1'"),
			"23000", "seat_fences_never_lowered"},
		{"claim above its seat's fence", func() error {
			// A2's fence is 6; a booking of generation 7 that did not advance it.
			_, err := createBooking(ctx, db.New(pool), bookingParams("inv", 7, "", "A2"))
			return err
		}, "23000", "seat_claims_at_fence"},
		{"claim with another generation than its booking's", inTx(
			"INSERT INTO booking_seats (show_id, booking_id, seat_id) VALUES ('inv', $1, 'A2')",
			"INSERT INTO seat_claims (show_id, seat_id, booking_id, generation) VALUES ('inv', 'A2', $1, 6)"),
			"23503", "seat_claims_booking_fkey"},
		{"cancelled booking that keeps its claims", inTx(
			"UPDATE bookings SET status = 'cancelled', cancelled_at = now() WHERE booking_id = $1"),
			"23503", "seat_claims_booking_fkey"},
		{"confirmed booking without its claims", inTx("DELETE FROM seat_claims WHERE booking_id = $1"),
			"23000", "bookings_claims_whole"},
		{"confirmed booking created without claims", inTx(
			"INSERT INTO bookings (show_id, booking_id, generation, fingerprint, hold_hash) VALUES ('inv', gen_random_uuid(), 9, decode(repeat('ab', 32), 'hex'), decode(repeat('cd', 32), 'hex'))"),
			"23000", "bookings_claims_whole"},
		{"claim rewritten in place", inTx("UPDATE seat_claims SET claimed_at = now() WHERE booking_id = $1"),
			"23000", "seat_claims_immutable"},
		{"truncate the event log", inTx("TRUNCATE booking_events"), "23000", "booking_events_no_truncate"},
		{"truncate the fences", inTx("TRUNCATE seat_fences CASCADE"), "23000", "seat_fences_no_truncate"},
		// Rules checked by triggers under foreign-key names (migration 00008).
		{"an event of a show that does not exist", inTx(
			"INSERT INTO booking_events (show_id, kind, generation, seat_ids) VALUES ('nope', 'refused_lost', 1, '{A1}')"),
			"23503", "booking_events_show_fkey"},
		{"a marker write owed for a show that does not exist", inTx(
			"INSERT INTO marker_outbox (show_id, generation, sold, seat_ids) VALUES ('nope', 1, true, '{A1}')"),
			"23503", "marker_outbox_show_fkey"},
		{"a seat of no booking", inTx("INSERT INTO booking_seats (show_id, booking_id, seat_id) VALUES ('inv', gen_random_uuid(), 'A3')"),
			"23503", "booking_seats_booking_fkey"},
		{"delete a booking that has claims", inTx("DELETE FROM bookings WHERE booking_id = $1"),
			"23503", "seat_claims_booking_fkey"},
		{"delete a claimed seat of a booking", inTx("DELETE FROM booking_seats WHERE booking_id = $1"),
			"23503", "seat_claims_booking_seat_fkey"},
		{"rewrite a booking's generation under its claims", inTx("UPDATE bookings SET generation = 6 WHERE booking_id = $1"),
			"23503", "seat_claims_booking_fkey"},
		// Checked by a trigger under a foreign-key name (migration 00015).
		{"delete a claimed seat's fence", inTx("DELETE FROM seat_fences WHERE show_id = 'inv' AND seat_id = 'A1'"),
			"23503", "seat_claims_fence_fkey"},
		{"move a claimed seat's fence to another seat", inTx("UPDATE seat_fences SET seat_id = 'A3' WHERE show_id = 'inv' AND seat_id = 'A1'"),
			"23503", "seat_claims_fence_fkey"},
		{"delete a show that has bookings", inTx("DELETE FROM shows WHERE show_id = 'inv'"),
			"23503", "bookings_show_fkey"},
		{"a second booking of one hold", func() error {
			q := bookingParams("inv", 8, "", "A3")
			q.HoldHash = p.HoldHash
			return sqlBook(ctx, pool, q)
		}, "23505", "bookings_hold_unique"},
	}
	before := dbSnapshot(t, pool)
	for _, c := range cases {
		err := c.run()
		if got := pgCode(err); got != c.code || pgConstraint(err) != c.rule {
			t.Errorf("%s: error %v (code %q, constraint %q), want code %s from %s", c.name, err, got, pgConstraint(err), c.code, c.rule)
		}
	}
	if after := dbSnapshot(t, pool); after != before {
		t.Fatalf("refused writes changed the database:\n%s\nthen\n%s", before, after)
	}
}

// dbSnapshot is the engine's tables' contents, for "nothing changed" assertions.
func dbSnapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(show_id || seat_id || generation, ',' ORDER BY show_id, seat_id) FROM seat_fences),
		(SELECT string_agg(show_id || seat_id || booking_id || generation, ',' ORDER BY show_id, seat_id) FROM seat_claims),
		(SELECT string_agg(show_id || booking_id || status, ',' ORDER BY booking_id) FROM bookings),
		(SELECT count(*) FROM booking_events))`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
