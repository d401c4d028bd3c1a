// Package flight runs a read that concurrent callers share (a cache fill: a show's
// inventory, its rules, a readiness check) once for all of them, bounded by itself, and
// lets each caller wait for it only as long as its own context allows.
package flight

import (
	"context"
	"time"

	"golang.org/x/sync/singleflight"
)

// Do runs fn once for every caller of g with key at one time (golang.org/x/sync/singleflight)
// and returns its result, or, as soon as ctx ends first, ctx's error: a caller never
// waits past its own deadline for a read another caller started. fn runs with a context
// of its own, detached from every caller's cancellation (a caller that leaves fails no
// one else, and the read goes on for those still waiting) and ended after d, so that a
// hung backend bounds the shared read by itself. ctx's values (a trace span) carry over.
// shared reports whether the result was given to other callers too.
func Do[T any](ctx context.Context, g *singleflight.Group, key string, d time.Duration, fn func(context.Context) (T, error)) (v T, shared bool, err error) {
	if err := ctx.Err(); err != nil {
		return v, false, err
	}
	ch := g.DoChan(key, func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		defer cancel()
		return fn(rctx)
	})
	select {
	case r := <-ch:
		v, _ = r.Val.(T)
		return v, r.Shared, r.Err
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}
