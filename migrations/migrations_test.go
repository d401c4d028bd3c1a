package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/holdfast/holdfast/migrations"
)

// catalog describes every user object of the public schema, one sorted line each.
func catalog(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s *string
	err := pool.QueryRow(t.Context(), `
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
    SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
           coalesce(column_default, '') || ' ' || is_identity
    FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid::regclass::text <> 'goose_db_version'
    UNION ALL
    SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'goose_db_version'
    UNION ALL
    SELECT 'view ' || viewname || ' ' || definition FROM pg_views WHERE schemaname = 'public'
    UNION ALL
    SELECT 'function ' || pg_get_functiondef(oid) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
    UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
) objects(x)`).Scan(&s)
	if err != nil {
		t.Fatalf("read catalog: %v", err)
	}
	if s == nil {
		return ""
	}
	return *s
}

func TestUpDownUpLeavesTheSameSchema(t *testing.T) {
	t.Parallel()
	pool, _ := testsvc.EmptyDatabase(t)
	ctx := t.Context()
	if got := catalog(t, pool); got != "" {
		t.Fatalf("empty database has objects:\n%s", got)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("up: %v", err)
	}
	first := catalog(t, pool)
	for _, want := range []string{"seat_fences", "seat_claims", "booking_events", "bookings_idempotency_key_unique", "booking_details"} {
		if !strings.Contains(first, want) {
			t.Fatalf("schema after up lacks %s", want)
		}
	}
	p, err := migrations.NewProvider(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if got := catalog(t, pool); got != "" {
		t.Fatalf("objects left after down to 0:\n%s", got)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if again := catalog(t, pool); again != first {
		t.Fatalf("schema differs after up, down, up:\nfirst:\n%s\nagain:\n%s", first, again)
	}
}

func TestConcurrentUpIsSerialized(t *testing.T) {
	t.Parallel()
	pool, _ := testsvc.EmptyDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = migrations.Up(context.Background(), pool) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	p, err := migrations.NewProvider(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pending, err := p.HasPending(t.Context())
	if err != nil || pending {
		t.Fatalf("pending after concurrent up: %v %v", pending, err)
	}
}

// TestInvariantsMigrationChecksExistingRows: 00003 states the engine's invariants in the
// schema; on a database whose rows already break one, it fails and says which.
func TestInvariantsMigrationChecksExistingRows(t *testing.T) {
	t.Parallel()
	pool, _ := testsvc.EmptyDatabase(t)
	ctx := t.Context()
	p, err := migrations.NewProvider(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// A cancelled booking that kept its claim, written before the schema refused it.
	for _, q := range []string{
		`INSERT INTO shows (show_id) VALUES ('s')`,
		`INSERT INTO seats (show_id, seat_id) VALUES ('s', 'A1')`,
		`INSERT INTO seat_fences (show_id, seat_id, generation) VALUES ('s', 'A1', 3)`,
		`INSERT INTO bookings (show_id, booking_id, generation, fingerprint, status, cancelled_at)
		 VALUES ('s', '00000000-0000-4000-8000-000000000001', 3, decode(repeat('ab', 32), 'hex'), 'cancelled', now())`,
		`INSERT INTO booking_seats (show_id, booking_id, seat_id) VALUES ('s', '00000000-0000-4000-8000-000000000001', 'A1')`,
		`INSERT INTO seat_claims (show_id, seat_id, booking_id, generation) VALUES ('s', 'A1', '00000000-0000-4000-8000-000000000001', 3)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_, err = p.UpTo(ctx, 3)
	if err == nil || !strings.Contains(err.Error(), "of a cancelled booking") {
		t.Fatalf("migrating a database that breaks an invariant: %v, want a refusal naming it", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 2 {
		t.Fatalf("version %d (%v) after the refused migration, want 2", v, err)
	}
	// Repaired, it migrates.
	if _, err := pool.Exec(ctx, `DELETE FROM seat_claims`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatalf("after the repair: %v", err)
	}
}

// TestLayoutMigrationDerivesExistingLayouts: seats that existed before 00004 get one
// unnamed section and row, positions and ranks in seat id order.
func TestLayoutMigrationDerivesExistingLayouts(t *testing.T) {
	t.Parallel()
	pool, _ := testsvc.EmptyDatabase(t)
	ctx := t.Context()
	p, err := migrations.NewProvider(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO shows (show_id) VALUES ('s'), ('t')`,
		`INSERT INTO seats (show_id, seat_id) VALUES ('s', 'B'), ('s', 'A'), ('s', 'C'), ('t', 'Z')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.UpTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	var got string
	err = pool.QueryRow(ctx, `SELECT string_agg(show_id || seat_id || ':' || section || '/' || row_label || '/' || position || '/' || rank, ' ' ORDER BY show_id, seat_id) FROM seats`).Scan(&got)
	if want := "sA://1/1 sB://2/2 sC://3/3 tZ://1/1"; err != nil || got != want {
		t.Fatalf("derived layouts %q (%v), want %q", got, err, want)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO seats (show_id, seat_id, position) VALUES ('s', 'D', 2)`); err == nil {
		t.Fatal("a second seat at position 2 of the row was accepted")
	}
}

// TestHolderCountsMigrationRepairsCounts: 00017 sets every holder's count to the seats and
// places of its confirmed bookings (a partial cancellation of seats left it too high
// before) and raises its version, so that Redis's count follows.
func TestHolderCountsMigrationRepairsCounts(t *testing.T) {
	t.Parallel()
	pool, _ := testsvc.EmptyDatabase(t)
	ctx := t.Context()
	p, err := migrations.NewProvider(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.UpTo(ctx, 16); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO shows (show_id) VALUES ('s')`,
		`INSERT INTO holder_seats (show_id, holder_id, seats, version) VALUES ('s', 'alice', 3, 7)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.UpTo(ctx, 17); err != nil {
		t.Fatal(err)
	}
	var seats, version int
	err = pool.QueryRow(ctx, `SELECT seats, version FROM holder_seats WHERE show_id = 's' AND holder_id = 'alice'`).Scan(&seats, &version)
	if err != nil || seats != 0 || version <= 7 {
		t.Fatalf("alice's count %d at version %d (%v), want 0 at a version above 7", seats, version, err)
	}
}
