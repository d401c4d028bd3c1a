// Package migrations embeds holdfast's goose SQL migrations and applies them.
//
// Both the engine's users and the holdfast CLI run the same embedded files through a
// goose Provider with a PostgreSQL session locker, so several replicas may migrate at
// once: one applies, the others wait and then find nothing pending.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the migration files, named NNNNN_name.sql.
//
//go:embed *.sql
var FS embed.FS

// NewProvider returns a goose Provider over pool and the embedded migrations, guarded by
// a PostgreSQL advisory session lock. The caller must Close it (the pool stays open).
func NewProvider(pool *pgxpool.Pool, opts ...goose.ProviderOption) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("create session locker: %w", err)
	}
	opts = append([]goose.ProviderOption{goose.WithSessionLocker(locker)}, opts...)
	p, err := goose.NewProvider(goose.DialectPostgres, stdlib.OpenDBFromPool(pool), FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("create goose provider: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to the database behind pool.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	p, err := NewProvider(pool)
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Latest is the version of the newest embedded migration: the schema this build needs.
func Latest() int64 {
	entries, _ := FS.ReadDir(".")
	var v int64
	for _, e := range entries {
		if n, ok := versionOf(e.Name()); ok && n > v {
			v = n
		}
	}
	return v
}

func versionOf(name string) (int64, bool) {
	num, _, ok := strings.Cut(name, "_")
	if !ok || !strings.HasSuffix(name, ".sql") {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return n, err == nil
}

// VersionError says that the database's schema is not the one this build needs.
type VersionError struct {
	Database, Build int64
}

func (e *VersionError) Error() string {
	if e.Database < e.Build {
		return fmt.Sprintf("the database schema is at version %d and this build needs %d: run `holdfast migrate up`", e.Database, e.Build)
	}
	return fmt.Sprintf("the database schema is at version %d, newer than this build's %d: a newer holdfast migrated it", e.Database, e.Build)
}

// Version reads the schema version of the database behind pool (0: never migrated).
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int64
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v)
	return v, err
}

// Check returns a *VersionError unless the database is at least at Latest: a build
// serves a schema it knows, or a newer one (during a rolling upgrade, the new build
// migrates first and the old replicas keep serving: migrations only add).
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	v, err := Version(ctx, pool)
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if v < Latest() {
		return &VersionError{Database: v, Build: Latest()}
	}
	return nil
}

// Loss is what rolling back one migration would destroy: tables dropped (with their
// rows) and columns dropped (with the rows of their table).
type Loss struct {
	Migration string
	Tables    []Dropped // DROP TABLE
	Columns   []Dropped // ALTER TABLE … DROP COLUMN: Name is table.column
}

// Dropped is a table or a column that a rollback drops, and the rows it holds.
type Dropped struct {
	Name string
	Rows int64
}

// Data reports whether the rollback would destroy any row's data.
func (l Loss) Data() bool {
	has := func(d Dropped) bool { return d.Rows > 0 }
	return slices.ContainsFunc(l.Tables, has) || slices.ContainsFunc(l.Columns, has)
}

var (
	dropTable  = regexp.MustCompile(`(?i)\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)
	alterTable = regexp.MustCompile(`(?is)\bALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?([a-z_][a-z0-9_]*)(.*?);`)
	dropColumn = regexp.MustCompile(`(?i)\bDROP\s+COLUMN\s+(?:IF\s+EXISTS\s+)?([a-z_][a-z0-9_]*)`)
)

// DownLoss reads the Down section of the migration at version and counts, in the
// database behind pool, the rows that rolling it back would destroy.
func DownLoss(ctx context.Context, pool *pgxpool.Pool, version int64) (Loss, error) {
	entries, err := FS.ReadDir(".")
	if err != nil {
		return Loss{}, err
	}
	for _, e := range entries {
		if n, ok := versionOf(e.Name()); !ok || n != version {
			continue
		}
		src, err := FS.ReadFile(e.Name())
		if err != nil {
			return Loss{}, err
		}
		_, down, _ := strings.Cut(string(src), "-- +goose Down")
		loss := Loss{Migration: e.Name()}
		count := func(table string) (int64, error) {
			var n int64
			err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n)
			return n, err
		}
		for _, m := range dropTable.FindAllStringSubmatch(down, -1) {
			n, err := count(m[1])
			if err != nil {
				return Loss{}, fmt.Errorf("count the rows of %s: %w", m[1], err)
			}
			loss.Tables = append(loss.Tables, Dropped{Name: m[1], Rows: n})
		}
		for _, m := range alterTable.FindAllStringSubmatch(down, -1) {
			cols := dropColumn.FindAllStringSubmatch(m[2], -1)
			if len(cols) == 0 {
				continue
			}
			n, err := count(m[1])
			if err != nil {
				return Loss{}, fmt.Errorf("count the rows of %s: %w", m[1], err)
			}
			for _, c := range cols {
				loss.Columns = append(loss.Columns, Dropped{Name: m[1] + "." + c[1], Rows: n})
			}
		}
		return loss, nil
	}
	return Loss{}, fmt.Errorf("no migration has version %d", version)
}
