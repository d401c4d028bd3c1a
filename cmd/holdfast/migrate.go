package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/holdfast/holdfast/migrations"
)

// migrate runs goose over the embedded migrations, with the session locker.
// Exit codes: 0 done (status: up to date), 1 failed, 2 usage, 3 status: pending.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast migrate up|down|status", flag.ContinueOnError)
	var backends backendFlags
	force := fs.Bool("force", false, "down: roll back even when the migration drops tables or columns that hold data")
	backends.register(fs, false)
	positional, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 1)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return commandUsage(fs, "migrate takes one of up, down, status")
	}
	action := positional[0]
	if action != "up" && action != "down" && action != "status" {
		return commandUsage(fs, "migrate %q: want up, down or status", action)
	}
	pool, err := backends.openPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, err := migrations.NewProvider(pool)
	if err != nil {
		return err
	}
	defer p.Close()
	switch action {
	case "up":
		return migrateUp(ctx, p, stdout)
	case "down":
		return migrateDown(ctx, p, pool, *force, stdout)
	default:
		return migrateStatus(ctx, p, stdout)
	}
}

// migrateUp applies every pending migration and says which, and the version reached.
func migrateUp(ctx context.Context, p *goose.Provider, stdout io.Writer) error {
	res, err := p.Up(ctx)
	for _, r := range res {
		fmt.Fprintf(stdout, "applied %s (%s)\n", r.Source.Path, r.Duration.Round(1e6))
	}
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database at version %d\n", v)
	return nil
}

// migrateDown rolls back the newest migration, unless it would destroy data and force
// is false: it lists what the rollback drops first.
func migrateDown(ctx context.Context, p *goose.Provider, pool *pgxpool.Pool, force bool, stdout io.Writer) error {
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	if v == 0 {
		return fmt.Errorf("migrate down: nothing to roll back")
	}
	loss, err := migrations.DownLoss(ctx, pool, v)
	if err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	for _, d := range loss.Tables {
		fmt.Fprintf(stdout, "rolling back %s drops table %s (%d rows)\n", loss.Migration, d.Name, d.Rows)
	}
	for _, d := range loss.Columns {
		fmt.Fprintf(stdout, "rolling back %s drops column %s (of %d rows)\n", loss.Migration, d.Name, d.Rows)
	}
	if loss.Data() && !force {
		return &exitError{code: exitFailure, msg: fmt.Sprintf("not rolling back %s: it would destroy the data listed above, "+
			"which a later `migrate up` does not bring back; back the database up (pg_dump) and run `holdfast migrate down --force` to do it anyway", loss.Migration)}
	}
	r, err := p.Down(ctx)
	if err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	fmt.Fprintf(stdout, "rolled back %s\n", r.Source.Path)
	return nil
}

// migrateStatus lists each migration as applied or pending; pending ones are exit code 3.
func migrateStatus(ctx context.Context, p *goose.Provider, stdout io.Writer) error {
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	pending := 0
	for _, s := range st {
		state := "applied"
		if s.State == goose.StatePending {
			state = "pending"
			pending++
		}
		fmt.Fprintf(stdout, "%-8s %s\n", state, s.Source.Path)
	}
	if pending > 0 {
		return &exitError{code: exitPending, msg: fmt.Sprintf("%d migrations pending; run `holdfast migrate up`", pending)}
	}
	return nil
}
