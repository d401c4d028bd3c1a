package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/redis/go-redis/v9"
)

// Group holds. A show's holds go to Redis at most holdCallsPerShow calls at a time:
// a hold that finds that many in flight waits, and the holds waiting when a call ends
// go out together, up to maxHoldGroup, as one call of the group function (holds.lua).
// Redis decides each as hold.lua alone would, in order, and the group shares what its
// holds would each pay alike: the call, the clock, the sale rules' parse and read, and
// the feed entry. A lone hold goes out at once, as one hold call, and pays nothing for
// this.

// holdCallsPerShow is how many hold calls of one show are in flight at once: two keep
// Redis busy with one while the other's reply travels.
const holdCallsPerShow = 2

// maxHoldGroup is the most holds one group call carries (holds.lua: MAX_GROUP).
const maxHoldGroup = 64

// holdGroups is a show's holds in flight and waiting.
type holdGroups struct {
	mu       sync.Mutex
	inFlight int
	waiting  []*holdCall
}

// holdCall is one hold's script call: its keys and arguments, and its reply once
// Redis has decided it.
type holdCall struct {
	ks    []string
	args  []any
	reply chan holdReply // buffered: the sender never waits for its caller
}

type holdReply struct {
	res []any
	err error
}

// runHold runs one hold's call (hold.lua's keys and arguments) on the show, alone or in
// a group, and returns its reply. It returns by ctx's end: a hold still waiting then is
// not sent; one already sent may still be made, as when its reply is lost, and expires
// by its TTL.
func (e *Engine) runHold(ctx context.Context, sh *show, ks []string, args []any) ([]any, error) {
	c := &holdCall{ks: ks, args: args, reply: make(chan holdReply, 1)}
	g := &sh.holdGroups
	g.mu.Lock()
	if g.inFlight < holdCallsPerShow {
		g.inFlight++
		g.mu.Unlock()
		e.sendHolds(ctx, []*holdCall{c})
		e.nextHolds(ctx, g)
	} else {
		g.waiting = append(g.waiting, c)
		g.mu.Unlock()
	}
	select {
	case r := <-c.reply:
		return r.res, r.err
	case <-ctx.Done():
		g.mu.Lock()
		g.waiting = deleteCall(g.waiting, c)
		g.mu.Unlock()
		select {
		case r := <-c.reply: // answered as its caller stopped waiting
			return r.res, r.err
		default:
			return nil, ctx.Err()
		}
	}
}

// nextHolds ends a call of g's: while holds wait, a goroutine of its own sends them in
// groups, one group after another; else the call's slot is free.
func (e *Engine) nextHolds(ctx context.Context, g *holdGroups) {
	next := g.take()
	if next == nil {
		return
	}
	go func() {
		ctx := context.WithoutCancel(ctx)
		for ; next != nil; next = g.take() {
			e.sendHolds(ctx, next)
		}
	}()
}

// take takes the next group of waiting holds, or, when none wait, frees a call's slot
// and returns nil.
func (g *holdGroups) take() []*holdCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.inFlight--
		return nil
	}
	n := min(len(g.waiting), maxHoldGroup)
	next := g.waiting[:n:n]
	g.waiting = g.waiting[n:]
	return next
}

// deleteCall is calls without c (a caller that stopped waiting), in a new slice: a
// group taken before shares the old one's array.
func deleteCall(calls []*holdCall, c *holdCall) []*holdCall {
	out := make([]*holdCall, 0, len(calls))
	for _, x := range calls {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

// sendHolds sends calls, one hold call or one group call, and gives each its reply.
func (e *Engine) sendHolds(ctx context.Context, calls []*holdCall) {
	if len(calls) == 1 {
		res, err := lua.Hold.Run(ctx, e.scripts, calls[0].ks, calls[0].args...).Slice()
		calls[0].reply <- holdReply{res, err}
		return
	}
	ks, args := groupArgs(calls)
	e.m.holdGroup.Observe(float64(len(calls)))
	res, err := lua.Holds.Run(ctx, e.scripts, ks, args...).Slice()
	if err == nil && len(res) != len(calls) {
		err = fmt.Errorf("%w: a group of %d holds answered %d replies", ErrUnavailable, len(calls), len(res))
	}
	for i, c := range calls {
		c.reply <- memberReply(res, i, err)
	}
}

// groupArgs lays out a group call's keys and arguments (holds.lua): every hold's keys,
// one after another; the number of holds, then each hold's numbers of keys and
// arguments and its arguments.
func groupArgs(calls []*holdCall) ([]string, []any) {
	var ks []string
	args := []any{len(calls)}
	for _, c := range calls {
		ks = append(ks, c.ks...)
		args = append(append(args, len(c.ks), len(c.args)), c.args...)
	}
	return ks, args
}

// memberReply is the i-th hold's reply of a group call's res (or the call's error).
func memberReply(res []any, i int, err error) holdReply {
	if err != nil {
		return holdReply{err: err}
	}
	switch r := res[i].(type) {
	case []any:
		return holdReply{res: r}
	case redis.Error:
		return holdReply{err: r}
	}
	return holdReply{err: fmt.Errorf("%w: unexpected group hold reply %v", ErrUnavailable, res[i])}
}
