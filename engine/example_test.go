package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// exampleEngine connects to the test PostgreSQL (a fresh migrated database) and Redis.
func exampleEngine(ctx context.Context) (*engine.Engine, func(), error) {
	pool, _, drop, err := testsvc.OpenDatabase(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := testsvc.NewRedisClient() // with ContextTimeoutEnabled: go-redis honours deadlines
	if err != nil {
		return nil, nil, err
	}
	e, err := engine.New(pool, rdb, &engine.Config{KeyPrefix: testsvc.RandomName("example")})
	if err != nil {
		return nil, nil, err
	}
	return e, func() { e.Close(); rdb.Close(); _ = drop() }, nil
}

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

	if err := e.CreateShow(ctx, "concert-2027", []string{"A1", "A2", "A3"}); err != nil {
		fmt.Println(err)
		return
	}
	h, err := e.Hold(ctx, engine.HoldRequest{ShowID: "concert-2027", SeatIDs: []string{"A1", "A2"},
		TTL: 5 * time.Minute, HolderID: "customer-42"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held", h.SeatIDs, "with generation", h.Generation)

	_, err = e.Hold(ctx, engine.HoldRequest{ShowID: "concert-2027", SeatIDs: []string{"A2", "A3"}, HolderID: "customer-7"})
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

	seats, err := e.Seats(ctx, "concert-2027")
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
	if err := e.CreateShow(ctx, "matinee", []string{"B7"}); err != nil {
		fmt.Println(err)
		return
	}
	late, _ := e.Hold(ctx, engine.HoldRequest{ShowID: "matinee", SeatIDs: []string{"B7"}, TTL: 50 * time.Millisecond})
	for { // wait until Redis expired the hold
		seats, _ := e.Seats(ctx, "matinee")
		if seats[0].Status == engine.SeatFree {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	next, _ := e.Hold(ctx, engine.HoldRequest{ShowID: "matinee", SeatIDs: []string{"B7"}})
	if _, err := e.Confirm(ctx, next, engine.ConfirmOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	_, err = e.Confirm(ctx, late, engine.ConfirmOptions{})
	fmt.Println("late owner refused:", errors.Is(err, engine.ErrHoldLost) || errors.Is(err, engine.ErrStaleGeneration))
	// Output:
	// late owner refused: true
}
