package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// exampleEngine connects to the PostgreSQL and Redis that DATABASE_URL and REDIS_URL
// name (make services prints them; these are its defaults), migrates, and returns an
// engine with a function that closes everything.
func exampleEngine(ctx context.Context) (*engine.Engine, func(), error) {
	databaseURL, redisURL := os.Getenv("DATABASE_URL"), os.Getenv("REDIS_URL")
	if databaseURL == "" {
		databaseURL = "postgres://holdfast@127.0.0.1:25432/holdfast?sslmode=disable"
	}
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:26379/0"
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, nil, err
	}
	if err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	opt.ContextTimeoutEnabled = true // go-redis must honour context deadlines
	rdb := redis.NewClient(opt)
	e, err := engine.New(pool, rdb, nil)
	if err != nil {
		rdb.Close()
		pool.Close()
		return nil, nil, err
	}
	return e, func() { e.Close(); rdb.Close(); pool.Close() }, nil
}

// newShowID names a show of its own for each run of an example.
func newShowID(name string) string { return name + "-" + uuid.NewString()[:8] }

// The whole flow: a show, a hold, a refusal, a confirmation, an idempotent retry and
// the seat map.
func Example() {
	ctx := context.Background()
	e, done, err := exampleEngine(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()

	show := newShowID("concert")
	if err := e.CreateShow(ctx, show, []string{"A1", "A2", "A3"}); err != nil {
		fmt.Println(err)
		return
	}
	h, err := e.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{"A1", "A2"},
		TTL: 5 * time.Minute, HolderID: "customer-42"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held", h.SeatIDs, "with generation", h.Generation)

	_, err = e.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{"A2", "A3"}, HolderID: "customer-7"})
	var taken *engine.SeatsUnavailableError
	if errors.As(err, &taken) {
		fmt.Println("refused, taken:", taken.SeatIDs)
	}

	b, err := e.Confirm(ctx, h, engine.ConfirmOptions{IdempotencyKey: "order-1001"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("booked", b.SeatIDs, b.Status)

	// The response was lost; the backend retries with the same key.
	again, err := e.Confirm(ctx, h, engine.ConfirmOptions{IdempotencyKey: "order-1001"})
	fmt.Println("retry returns the same booking:", err == nil && again.ID == b.ID)

	seats, err := e.Seats(ctx, show)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range seats {
		fmt.Println(s.SeatID, s.Status)
	}
	// Output:
	// held [A1 A2] with generation 1
	// refused, taken: [A2]
	// booked [A1 A2] confirmed
	// retry returns the same booking: true
	// A1 sold
	// A2 sold
	// A3 free
}

// A customer whose hold expired while it was paying cannot book: the seat went to
// someone else, and the late confirmation says why.
func Example_lateOwner() {
	ctx := context.Background()
	e, done, err := exampleEngine(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	show := newShowID("matinee")
	if err := e.CreateShow(ctx, show, []string{"B7"}); err != nil {
		fmt.Println(err)
		return
	}
	late, _ := e.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{"B7"}, TTL: 50 * time.Millisecond})
	for { // wait until Redis expired the hold
		seats, _ := e.Seats(ctx, show)
		if seats[0].Status == engine.SeatFree {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	next, err := e.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{"B7"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := e.Confirm(ctx, next, engine.ConfirmOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	_, err = e.Confirm(ctx, late, engine.ConfirmOptions{})
	fmt.Println("late owner refused:", errors.Is(err, engine.ErrHoldLost) || errors.Is(err, engine.ErrStaleGeneration))
	// Output:
	// late owner refused: true
}
