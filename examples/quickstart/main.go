// Quickstart is the README's first program: a show, a hold, a refusal, a confirmation
// and an idempotent retry, against the PostgreSQL and Redis that DATABASE_URL and
// REDIS_URL name (`make services` prints both).
//
//	set -a; eval "$(make -s services)"; go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/migrations"
)

func main() {
	if err := run(context.Background(), os.Getenv("DATABASE_URL"), os.Getenv("REDIS_URL"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, databaseURL, redisURL string, out io.Writer) error {
	if databaseURL == "" || redisURL == "" {
		return errors.New("set DATABASE_URL and REDIS_URL (make services prints them)")
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	opt.ContextTimeoutEnabled = true // the engine needs go-redis to honour deadlines
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	// README:begin
	e, err := engine.New(pool, rdb, nil) // nil: the default Config
	if err != nil {
		return err
	}
	defer e.Close()

	show := "concert-" + uuid.NewString()[:8]
	if err := e.CreateShow(ctx, show, []string{"A1", "A2", "A3"}); err != nil {
		return err
	}
	h, err := e.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{"A1", "A2"}, HolderID: "customer-42"})
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	fmt.Fprintln(out, "customer-42 holds", h.SeatIDs)

	_, err = e.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{"A2", "A3"}, HolderID: "customer-7"})
	var taken *engine.SeatsUnavailableError
	if !errors.As(err, &taken) {
		return fmt.Errorf("a second hold on A2: %v, want it refused", err)
	}
	fmt.Fprintln(out, "customer-7 is refused; taken:", taken.SeatIDs)

	b, err := e.Confirm(ctx, h, engine.ConfirmOptions{IdempotencyKey: "order-1001"})
	switch {
	case errors.Is(err, engine.ErrHoldLost), errors.Is(err, engine.ErrStaleGeneration):
		return fmt.Errorf("too late, someone else has the seats: %w", err)
	case errors.Is(err, engine.ErrUnavailable):
		return fmt.Errorf("a backend failed; retry with the same idempotency key: %w", err)
	case err != nil:
		return err
	}
	fmt.Fprintln(out, "booked", b.SeatIDs, b.Status)

	// The response was lost on its way; the backend retries with the same key.
	again, err := e.Confirm(ctx, h, engine.ConfirmOptions{IdempotencyKey: "order-1001"})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "the retry returns the same booking:", again.ID == b.ID)
	// README:end
	return nil
}
