package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/holdfast/holdfast/internal/flight"
)

// shared runs a read that concurrent callers share — a show's inventory or rules, a
// waiting room's status, a rebuild of a show's Redis state, a polled seat map — once
// for all of them (internal/flight): the read runs detached from every caller and ends
// after d; a caller whose ctx ends first leaves at once with ErrUnavailable naming
// backend, and the read goes on for the others.
func shared[T any](ctx context.Context, g *singleflight.Group, key, backend string, d time.Duration, read func(context.Context) (T, error)) (v T, wasShared bool, err error) {
	v, wasShared, err = flight.Do(ctx, g, key, d, read)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = unavailable(backend, fmt.Errorf("waiting for a read shared with other calls: %w", err))
	}
	return v, wasShared, err
}
