package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/redis/go-redis/v9"
)

// Group calls. A show's holds go to Redis at most callsPerShow calls at a time: a hold
// that finds that many in flight waits, and the holds waiting when one ends go out
// together, up to maxGroup, as one call of the group function (group.lua). Redis
// decides each as its script alone would, in order, and the group shares what its
// members would each pay alike: the call, the clock, the sale rules' parse and read,
// the show's counter and waitlist checks, and the holds' feed entry. A lone call goes
// out at once, as one call of its script, and pays nothing for this. Every call, alone
// or grouped, goes through e.scripts (boundedScripter), which bounds it.

// callsPerShow is how many calls of a grouped script on one show are in flight at once:
// two keep Redis busy with one while the other's reply travels.
const callsPerShow = 2

// maxGroup is the most calls one group call carries (group.lua: MAX_GROUP).
const maxGroup = 64

// callGroups is a show's calls of one script in flight and waiting.
type callGroups struct {
	mu       sync.Mutex
	inFlight int
	waiting  []*scriptCallReq
}

// scriptCallReq is one call of a script: its caller's context, its keys and arguments,
// and its reply once Redis has decided it.
type scriptCallReq struct {
	ctx   context.Context
	ks    []string
	args  []any
	reply chan callReply // buffered: the sender never waits for its caller
}

type callReply struct {
	res []any
	err error
}

// grouped is where a grouped script's calls on a show go: the show's groups of them,
// the script, and the caller that sends them.
type grouped struct {
	g   *callGroups
	fn  *lua.Function
	via lua.Caller
}

// holdCalls is where a show's holds go.
func (e *Engine) holdCalls(sh *show) grouped { return grouped{&sh.holdGroups, lua.Hold, e.scripts} }

// runGrouped runs one call of to's script (its keys and arguments), alone or in a
// group, and returns its reply. It returns by ctx's end: a call still waiting then is
// not sent; one already sent may still run, as when its reply is lost (a hold expires
// by its TTL), but not after the latest deadline of its group's callers (groupContext)
// nor after the call's bound (boundedScripter).
func (e *Engine) runGrouped(ctx context.Context, to grouped, ks []string, args []any) ([]any, error) {
	c := &scriptCallReq{ctx: ctx, ks: ks, args: args, reply: make(chan callReply, 1)}
	g := to.g
	g.mu.Lock()
	if g.inFlight < callsPerShow {
		g.inFlight++
		g.mu.Unlock()
		e.sendGroup(to, []*scriptCallReq{c})
		e.nextGroups(to)
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

// nextGroups ends a call of to's: while calls wait, a goroutine of its own sends them in
// groups, one group after another; else the call's slot is free.
func (e *Engine) nextGroups(to grouped) {
	next := to.g.take()
	if next == nil {
		return
	}
	go func() {
		for ; next != nil; next = to.g.take() {
			e.sendGroup(to, next)
		}
	}()
}

// take takes the next group of waiting calls whose callers still wait, or, when none
// do, frees a call's slot and returns nil. A call whose caller's context has ended is
// answered with its error and never sent.
func (g *callGroups) take() []*scriptCallReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		if len(g.waiting) == 0 {
			g.inFlight--
			return nil
		}
		n := min(len(g.waiting), maxGroup)
		next := make([]*scriptCallReq, 0, n)
		for _, c := range g.waiting[:n] {
			if err := c.ctx.Err(); err != nil {
				c.reply <- callReply{err: err}
				continue
			}
			next = append(next, c)
		}
		g.waiting = g.waiting[n:]
		if len(next) > 0 {
			return next
		}
	}
}

// deleteCall is calls without c (a caller that stopped waiting), in a new slice: a
// group taken before shares the old one's array.
func deleteCall(calls []*scriptCallReq, c *scriptCallReq) []*scriptCallReq {
	out := make([]*scriptCallReq, 0, len(calls))
	for _, x := range calls {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

// sendGroup sends calls, one call of to's script (under its caller's context) or one
// group call (groupContext), and gives each its reply.
func (e *Engine) sendGroup(to grouped, calls []*scriptCallReq) {
	if len(calls) == 1 {
		res, err := to.fn.Run(calls[0].ctx, to.via, calls[0].ks, calls[0].args...).Slice()
		calls[0].reply <- callReply{res, err}
		return
	}
	ks, args := groupArgs(to.fn, calls)
	e.m.groupSize.WithLabelValues(to.fn.ScriptName()).Observe(float64(len(calls)))
	ctx, cancel := groupContext(calls)
	defer cancel()
	res, err := lua.Group.Run(ctx, to.via, ks, args...).Slice()
	if err == nil && len(res) != len(calls) {
		err = fmt.Errorf("%w: a group of %d calls answered %d replies", ErrUnavailable, len(calls), len(res))
	}
	for i, c := range calls {
		c.reply <- memberReply(res, i, err)
	}
}

// groupContext is a group call's context: the first caller's values, ending at the
// latest of its callers' deadlines (none when a caller has none), so that go-redis
// stops sending it again (after a lost connection) once no caller waits for it. The
// call's bound (boundedScripter) ends it sooner.
func groupContext(calls []*scriptCallReq) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// groupArgs lays out a group call of fn's calls (group.lua).
func groupArgs(fn *lua.Function, calls []*scriptCallReq) ([]string, []any) {
	keys, args := make([][]string, len(calls)), make([][]any, len(calls))
	for i, c := range calls {
		keys[i], args[i] = c.ks, c.args
	}
	return lua.GroupArgs(fn, keys, args)
}

// memberReply is the i-th call's reply of a group call's res (or the call's error).
func memberReply(res []any, i int, err error) callReply {
	if err != nil {
		return callReply{err: err}
	}
	switch r := res[i].(type) {
	case []any:
		return callReply{res: r}
	case redis.Error:
		return callReply{err: r}
	}
	return callReply{err: fmt.Errorf("%w: unexpected group call reply %v", ErrUnavailable, res[i])}
}
