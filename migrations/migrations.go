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
