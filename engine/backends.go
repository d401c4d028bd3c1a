package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
)

// txOptions begins every transaction with bounds on lock waits and statements, so that a
// stuck row lock becomes ErrUnavailable instead of a hang, and with generic plans: the
// engine's statements look rows up by key, where a plan made for the parameters is no
// better, and PostgreSQL would otherwise plan the batch statements (arrays of a batch's
// rows) again at every execution — measured, about half the CPU of a batch of six.
func (e *Engine) txOptions() pgx.TxOptions { return e.txOptionsWith(e.cfg.StatementTimeout) }

// txOptionsWith is txOptions with another statement timeout.
func (e *Engine) txOptionsWith(statementTimeout time.Duration) pgx.TxOptions {
	return pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL lock_timeout = '" + strconv.FormatInt(e.cfg.LockTimeout.Milliseconds(), 10) +
		"ms'; SET LOCAL statement_timeout = '" + strconv.FormatInt(statementTimeout.Milliseconds(), 10) + "ms'; SET LOCAL plan_cache_mode = force_generic_plan"}
}

// rollback ends tx, waiting for the server's reply no longer than d (from now, whether
// or not ctx has ended): a ROLLBACK sent to a server that stopped answering — frozen,
// partitioned — would wait as long as the server does, and with it whoever waits for
// the transaction's end. Past d, pgx closes the connection, which ends the transaction
// on the server too. It reports false when d passed without a reply.
func rollback(ctx context.Context, tx pgx.Tx, d time.Duration) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	_ = tx.Rollback(rctx)
	return !errors.Is(rctx.Err(), context.DeadlineExceeded)
}

// maxTxAttempts bounds the retries of a transaction that hit a serialization failure or
// a deadlock.
const maxTxAttempts = 4

// retryTx runs attempt (one whole transaction) and runs it again, with jitter, when it
// hit a serialization failure or a deadlock (40001, 40P01), at most maxTxAttempts
// times. attempt must have no effect outside the database.
func retryTx[T any](ctx context.Context, attempt func() (T, error)) (T, error) {
	for n := 1; ; n++ {
		v, err := attempt()
		if !retryable(err) || n == maxTxAttempts {
			return v, err
		}
		if sleepJitter(ctx, n) != nil {
			return v, err
		}
	}
}

func retryable(err error) bool {
	code := pgCode(err)
	return code == "40001" || code == "40P01"
}

func sleepJitter(ctx context.Context, attempt int) error {
	d := time.Duration(attempt) * time.Duration(1+rand.IntN(5)) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func pgConstraint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.ConstraintName
	}
	return ""
}

// pgErr translates a PostgreSQL error at the boundary: engine errors pass through,
// constraint violations become ErrInvalidArgument or ErrNotFound, everything else
// (connection loss, timeouts, lock waits) is ErrUnavailable.
func (e *Engine) pgErr(err error) error {
	var iae *InvalidArgumentError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &iae), errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable):
		return err
	}
	switch pgCode(err) {
	case "23514", "22001", "22P02":
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	case "23503":
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return unavailable("postgres", err)
}

// redisErr translates a Redis error: a script's argument check is ErrInvalidArgument,
// everything else (connection loss, timeouts, OOM, BUSY) is ErrUnavailable.
func (e *Engine) redisErr(err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "HOLDFAST_BADARG") {
		return fmt.Errorf("%w: redis script: %w", ErrInvalidArgument, err)
	}
	return unavailable("redis", err)
}

// scriptArgs lays out a script's arguments: the holder tag, the fixed arguments, the
// seats.
func scriptArgs(tag string, fixed []any, seats []string) []any {
	args := make([]any, 0, 1+len(fixed)+len(seats))
	args = append(args, tag)
	args = append(args, fixed...)
	for _, s := range seats {
		args = append(args, s)
	}
	return args
}

// scriptCall is one script call of a pipeline.
type scriptCall struct {
	script *lua.Function
	keys   []string
	args   []any
}

// runScripts sends calls in one pipeline (on a Cluster, go-redis splits it by node) and
// returns their replies in order. When Redis answered a call that its function is not
// there (it lost the library: FUNCTION FLUSH, a restart, a failover), the library is
// loaded on every master and each such call is made again, on its own.
// A pipeline Redis does not answer by ctx's deadline is answered errScriptTimeout for
// every call then, whatever go-redis's own dial retries would take (bounded);
// it goes on in the background, and its calls may still run in Redis, as calls whose
// replies were lost could.
func (e *Engine) runScripts(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	deadline, ok := ctx.Deadline()
	if !ok {
		return e.pipeScripts(ctx, calls)
	}
	cmds, err := bounded(ctx, time.Until(deadline), func() []*redis.Cmd { return e.pipeScripts(ctx, calls) })
	if err != nil {
		cmds = make([]*redis.Cmd, len(calls))
		for i := range cmds {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
		}
	}
	return cmds
}

// pipeScripts is runScripts without its bound.
func (e *Engine) pipeScripts(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := e.rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = c.script.Call(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	var loaded error
	tried := false
	for i, c := range calls {
		if !lua.Missing(cmds[i].Err()) {
			continue
		}
		if !tried {
			loaded, tried = lua.Load(ctx, e.rdb), true
		}
		if loaded != nil { // refused (out of memory, say): the script itself (lua.Function.Run)
			cmds[i] = c.script.Eval(ctx, e.rdb, c.keys, c.args...)
			continue
		}
		cmds[i] = c.script.Call(ctx, e.rdb, c.keys, c.args...)
	}
	return cmds
}
