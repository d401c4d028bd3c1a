package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A show's identity. A show id names one show at a time, but a show deleted and created
// again under it is another show: its epoch (shows.epoch, migration 00009), drawn at
// creation, is larger than any earlier show's of the id. The engine's copy of a show
// carries its epoch, and so do its rules, in the engine and in Redis (sale_rules in
// internal/lua/common.lua): a rules version is compared only within one epoch. An
// engine that meets another epoch of a show it has (PostgreSQL's in a read of its rules,
// Redis's in a script's STALE, a closing in a script's CLOSED) drops its copy and reads
// the show afresh.

// showChanged is a call that met a later show of its show's id than the engine's copy,
// which is dropped: withShow runs the call once more on the show PostgreSQL has now.
// Met twice in one call, it reaches the caller as ErrUnavailable.
type showChanged struct{ id string }

func (c *showChanged) Error() string {
	return fmt.Sprintf("%v: show %q was deleted and created again during the call", ErrUnavailable, c.id)
}

// Is reports whether target is [ErrUnavailable].
func (c *showChanged) Is(target error) bool { return target == ErrUnavailable }

// replaced drops the engine's copy of a show that another show of its id has replaced.
func (e *Engine) replaced(sh *show) error {
	e.dropShow(sh, false)
	return &showChanged{id: sh.id}
}

// withShow runs op on the engine's copy of a show, and once more on the show as
// PostgreSQL has it now when op met a later show of the id (*showChanged).
func withShow[T any](ctx context.Context, e *Engine, showID string, op func(*show) (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		sh, err := e.show(ctx, showID)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := op(sh)
		var c *showChanged
		if attempt > 0 || !errors.As(err, &c) {
			return v, err
		}
	}
}

// adopt caches sh, a show as PostgreSQL has it, in place of a copy of an earlier show of
// its id (dropped), and returns the cached copy.
func (e *Engine) adopt(sh *show) *show {
	cached, old := e.shows.put(sh)
	if old != nil {
		e.dropShow(old, false)
	}
	return cached
}

// dropShow drops the engine's copy of a show that is deleted (gone: its id is then
// remembered as unknown for Config.UnknownShowTTL) or is another show now: its
// inventory, rules and seat map. No script runs on the copy from then on; the next call
// about the id reads PostgreSQL.
func (e *Engine) dropShow(sh *show, gone bool) {
	sh.dropped.Store(true)
	e.shows.remove(sh)
	if gone {
		e.shows.forget(sh.id, time.Now().Add(e.cfg.UnknownShowTTL))
	}
	e.views.mu.Lock()
	v := e.views.m[sh.id]
	e.views.mu.Unlock()
	if v != nil && v.sh.epoch <= sh.epoch {
		e.dropView(v)
	}
}

// metChange answers a script that refused the engine's copy of a show: STALE (Redis
// knows a later show of the id) or CLOSED (DeleteShow closed the show). PostgreSQL
// says which show is current: none (the copy is forgotten: ErrNotFound), a later one
// (the copy is dropped: *showChanged), or this one: being deleted when closed
// (ErrNotFound: a refused delete opens it again), else Redis is ahead of PostgreSQL
// (ErrUnavailable).
func (e *Engine) metChange(ctx context.Context, sh *show, status string) error {
	epoch, err := e.q.ShowEpochGet(ctx, sh.id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		e.dropShow(sh, true)
		return notFound("show %q", sh.id)
	case err != nil:
		return e.pgErr(err)
	case epoch != sh.epoch:
		return e.replaced(sh)
	case status == "CLOSED":
		return notFound("show %q: it is being deleted", sh.id)
	}
	return fmt.Errorf("%w: Redis knows a later show %q (epoch above %d) than PostgreSQL does", ErrUnavailable, sh.id, sh.epoch)
}

// staleCopy refuses a call about a copy of a show the engine has dropped meanwhile (a
// read of its rules found it deleted or replaced): the call runs again on a fresh read.
func (e *Engine) staleCopy(sh *show) error {
	if !sh.dropped.Load() {
		return nil
	}
	return &showChanged{id: sh.id}
}

// unknownSeat answers a seat (or section) that the engine's copy of a show does not have,
// err: unless the copy's rules were read within rulesRefresh, they are read again — one
// read, bounded by itself, for every caller at the time (sharedRules): a flood of
// unknown seats costs the database one read, and a hung one does not keep the callers
// past that read's bound — and a copy of an earlier show of the id is dropped
// (*showChanged: the call runs again on the show as it is now, whose seats may be
// others).
func (e *Engine) unknownSeat(ctx context.Context, sh *show, err error) error {
	if serr := e.staleCopy(sh); serr != nil {
		return serr
	}
	if st := sh.rules.cur.Load(); st != nil && time.Since(st.at) <= rulesRefresh {
		return err
	}
	var c *showChanged
	if _, lerr := e.sharedRules(ctx, sh); errors.As(lerr, &c) {
		return lerr
	}
	return err
}
