package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/migrations"
)

// Engine holds seats in Redis and confirms bookings in PostgreSQL. It is safe for
// concurrent use; several engines (processes) may share one Redis and one database.
type Engine struct {
	pool *pgxpool.Pool
	q    *db.Queries
	rdb  redis.UniversalClient
	// scripts runs the scripts (functions of internal/lua's library) of holds and
	// confirmations: rdb's autopipeliner, or rdb itself with Config.NoAutoPipeline.
	scripts lua.Caller
	cfg     Config
	log     *slog.Logger
	m       *metrics

	shows   *showCache // the inventories, immutable once created
	loads   singleflight.Group
	resyncs singleflight.Group // one rebuild per show at a time when Redis lost it

	policyCheckedAt  atomic.Int64 // unix nanoseconds of the last good eviction-policy check
	policyRechecking atomic.Bool  // a background recheck of it runs
	libraryWarned    atomic.Bool  // keepLibrary has logged a failure as a warning

	tracer trace.Tracer  // nil: no tracing, and no cost
	outbox *outbox       // sold-marker writes owed to Redis, and the loop that repays them
	stop   func()        // ends the background loop
	done   chan struct{} // closed when it has ended
	relays relayGroup    // the relays of hold moves the calls wait for (moves.go)
	// sweeps is the sweep of pending hold moves the background loop started, if one
	// runs (sweeping: moves.go).
	sweeps   sync.WaitGroup
	sweeping atomic.Bool
	// waitlistDone is closed when the waitlist loop has ended.
	waitlistDone chan struct{}
	// libraryDone is closed when the library loop (library.go) has ended.
	libraryDone chan struct{}

	gc      *committer      // the confirmations' queue and batches (groupcommit.go)
	views   views           // the seat maps kept current (view.go)
	viewCtx context.Context // ends when the engine closes
	polled  polledMaps      // seat maps of shows past the watched-shows pool
	closed  bool            // under views.mu

	backends    backends      // the server and backend of each pooled connection (failover.go)
	reconciling atomic.Bool   // a reconciliation after a failover runs (reconcile.go)
	settling    settler       // the confirmations whose COMMIT's outcome is unknown (settle.go)
	queues      queueWatch    // the waiting rooms the engine admits for (queue.go)
	queueSlots  chan struct{} // waiting-room calls in flight (queueConcurrency)
	// admissionReads: outsideRoom's reads in flight (admissionNone).
	admissionReads chan struct{}
	// queueFailedAt: unix ns of the last waiting-room call that found Redis
	// unavailable, 0 once one answered since (queueDown).
	queueFailedAt atomic.Int64
	// queueScripts runs the waiting room's scripts: rdb's second (deferred)
	// autopipeliner, a stream of pipelines of its own, or rdb itself; queueReads
	// sends the room's reads outside its scripts (outsideRoom) the same way, each
	// bounded by its caller (bounded).
	queueScripts lua.Caller
	queueReads   redis.Cmdable

	hooks hooks
}

// hooks are test seams inside Confirm; nil in production.
type hooks struct {
	// beforeWrite runs before a confirmation is queued (after its first Redis check,
	// when it has one).
	beforeWrite func(ctx context.Context)
	// beforeCommit runs in a batch's transaction once its fences are locked (and its
	// claims read), before the Redis check of its holds.
	beforeCommit func(ctx context.Context)
	// afterReserve runs in a batch's transaction after the Redis check reserved its
	// holds, before anything is written.
	afterReserve func(ctx context.Context)
	// atCommit runs in a batch's transaction right before its COMMIT is sent, with the
	// number of confirmations the COMMIT would book.
	atCommit func(ctx context.Context, n int)
	// afterCommit runs after a confirmation or cancellation committed, before its
	// marker write; returning false skips that write, as a process dying there would.
	afterCommit func(ctx context.Context) bool
	// afterRead runs where a repair has read PostgreSQL and is about to write what it
	// read to Redis: path is "resync" (after each page), "repair" (a confirmation's
	// marker repair), "replay" (an idempotent retry re-marking its booking),
	// "reconcile" (Reconcile has read Redis's markers, before it reads the database) or
	// "exchange" (an exchange found its key unused, before it reads its booking).
	afterRead func(ctx context.Context, path string)
	// beforeFeedRead runs before each read of a show's change feed by its seat map.
	beforeFeedRead func(ctx context.Context, showID string)
	// afterHeldCheck runs in DeleteShow once it found no live hold, before its
	// transaction.
	afterHeldCheck func(ctx context.Context)
	// beforeRelay runs after a Reclaim's or a Transfer's script moved holds, before the
	// relay of the show's moves to the feed (moves.go); returning false skips the relay,
	// as a process dying there would, and fails the call.
	beforeRelay func(ctx context.Context) bool
}

// New returns an engine over a migrated database (see package migrations) and a Redis.
// A nil cfg means the defaults. New does no I/O itself; the first Redis call checks that
// Redis's maxmemory-policy cannot evict holds. It starts one background goroutine that
// writes to Redis the sold markers that a confirmation or cancellation could not (see
// Config.MarkerRepairInterval), and to the event feed the hold moves that a Reclaim or a
// Transfer could not (every 2 seconds); [Engine.Close] stops it.
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, cfg *Config) (*Engine, error) {
	if pool == nil {
		return nil, invalid("pool", "nil")
	}
	if rdb == nil {
		return nil, invalid("rdb", "nil")
	}
	if !honoursDeadlines(rdb) {
		return nil, invalid("rdb", "the go-redis client must be created with ContextTimeoutEnabled: true, so that a "+
			"call's context deadline bounds it (a frozen Redis would otherwise hold a confirmation past its hold)")
	}
	with := Config{}
	if cfg != nil {
		with = *cfg
	}
	// Defaults that follow the pool and the batching.
	autoQueue := with.MaxConfirmQueue == 0
	if with.ConfirmConns == 0 {
		with.ConfirmConns = max(1, min(defaultConfirmConns, int(pool.Config().MaxConns)/2))
	}
	c, err := with.withDefaults()
	if err != nil {
		return nil, err
	}
	if autoQueue {
		c.MaxConfirmQueue = max(defaultMaxConfirmQueue, queueRounds*c.ConfirmConns*c.ConfirmBatch)
	}
	gc := &committer{queue: make(chan *confirmReq, c.MaxConfirmQueue), ended: make(chan struct{}, 1)}
	m, err := newMetrics(c.Registerer, func() float64 { return float64(len(gc.queue)) })
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	e := &Engine{gc: gc, pool: pool, q: db.New(pool), rdb: rdb, cfg: c, log: c.Logger, m: m, done: make(chan struct{}), waitlistDone: make(chan struct{}), libraryDone: make(chan struct{}), shows: newShowCache(c.MaxCachedShows)}
	e.outbox = &outbox{}
	e.queueSlots = make(chan struct{}, queueConcurrency)
	e.admissionReads = make(chan struct{}, admissionReads)
	e.scripts, e.queueScripts, e.queueReads = rdb, rdb, rdb
	if !c.NoAutoPipeline {
		if ap := autoPipeliner(rdb); ap != nil {
			e.scripts = ap
		}
		if ap := asyncPipeliner(rdb); ap != nil {
			e.queueScripts, e.queueReads = ap, ap
		}
	}
	scripts := newBoundedScripter(e.scripts, rdb, redisCallTimeout)
	scripts.seen = c.scriptsSeen
	e.scripts = scripts
	e.queueScripts = newBoundedScripter(e.queueScripts, rdb, redisCallTimeout)
	if c.TracerProvider != nil {
		e.tracer = c.TracerProvider.Tracer(tracerName)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.viewCtx = ctx
	e.views.m = map[string]*view{}
	go e.repayMarkers(ctx)
	go e.waitlistLoop(ctx)
	go e.libraryLoop(ctx)
	return e, nil
}

// asyncPipeliner is rdb's deferred autopipeliner (closed with the client), whose
// commands travel in pipelines apart from the blocking autopipeliner's: a result read
// waits for its command. nil for a client without one.
func asyncPipeliner(rdb redis.UniversalClient) *redis.AutoPipeliner {
	var ap *redis.AutoPipeliner
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		ap, err = c.AsyncAutoPipeline()
	case *redis.ClusterClient:
		ap, err = c.AsyncAutoPipeline()
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	return ap
}

// autoPipeliner runs scripts on rdb directly while few calls are in flight, and through
// rdb's shared autopipeliner (closed with the client) when more are: calls made at the
// same moment then share round trips, and a lone call pays nothing for it. nil for a
// client without an autopipeliner.
func autoPipeliner(rdb redis.UniversalClient) lua.Caller {
	var ap *redis.AutoPipeliner
	var err error
	switch c := rdb.(type) {
	case *redis.Client:
		ap, err = c.AutoPipeline()
	case *redis.ClusterClient:
		ap, err = c.AutoPipeline()
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	return &adaptiveScripter{direct: rdb, piped: ap}
}

// pipelineFrom is how many script calls in flight make the next one go through the
// autopipeliner.
const pipelineFrom = 3

// adaptiveScripter is the lua.Caller of autoPipeliner.
type adaptiveScripter struct {
	direct, piped lua.Caller
	inflight      atomic.Int64
}

// pick counts a call in flight (the caller ends it with done) and chooses its way.
func (a *adaptiveScripter) pick() lua.Caller {
	if a.inflight.Add(1) > pipelineFrom {
		return a.piped
	}
	return a.direct
}

func (a *adaptiveScripter) done() { a.inflight.Add(-1) }

func (a *adaptiveScripter) FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd {
	defer a.done()
	return a.pick().FCall(ctx, function, keys, args...)
}

// boundedScripter answers every script call within d. A call that goes straight to a
// plain client (*redis.Client, which New requires to honour context deadlines) runs on
// its caller's goroutine under a context that ends at d: go-redis v9 stops waiting for
// a dial, its retries, a pooled connection and its read at that deadline
// (TestInlineCallsEndByTheirBound; a dial may go on in the background). Any other call
// — through an autopipeliner, whose queued commands do not end with their context, or
// a Cluster client, whose state reloads were not shown to — runs in a goroutine of its
// own while its caller waits for d at most. Either way a call its bound ended answers
// errScriptTimeout, never its caller's context error (the caller's deadline had not
// passed). go-redis sets a read's deadline from its context but does not watch the
// context's cancellation: an inline call whose caller cancels while Redis does not
// answer ends at its bound, not at once.
// The call may still run in Redis after its caller was told it failed: no more than a
// reply lost to a read timeout could do already (a hold no one heard of expires by its
// TTL; a release, an extension or a waiting-room call is safe to have happened after
// all; a check only reads).
// It loads the library (lua.Load) where rdb's calls go, within d too.
type boundedScripter struct {
	lua.Caller
	rdb redis.UniversalClient
	d   time.Duration
	// inline is rdb when its calls may run on their caller's goroutine; nil otherwise.
	inline lua.Caller
	// seen, a test seam (Config.scriptsSeen), is told of each call's start, and the
	// function it returns of its end.
	seen func() func(*redis.Cmd)
}

func newBoundedScripter(via lua.Caller, rdb redis.UniversalClient, d time.Duration) boundedScripter {
	b := boundedScripter{Caller: via, rdb: rdb, d: d}
	if c, ok := rdb.(*redis.Client); ok && c.Options().ContextTimeoutEnabled {
		b.inline = c
	}
	return b
}

// errScriptTimeout is a script call that did not answer within its bound.
var errScriptTimeout = errors.New("the script did not answer in time")

// start tells the test seam that a call starts; what it returns tells it the call ended.
func (b boundedScripter) start() func(*redis.Cmd) {
	if b.seen == nil {
		return func(*redis.Cmd) {}
	}
	return b.seen()
}

// inlineCall makes call on its caller's goroutine, under ctx ending at the bound. A call
// the bound, not ctx, ended answers errScriptTimeout; a reply of Redis's own (an error
// reply, nil) stays as it is.
func (b boundedScripter) inlineCall(ctx context.Context, call func(context.Context) *redis.Cmd) *redis.Cmd {
	bctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	ended := b.start()
	c := call(bctx)
	ended(c)
	var reply redis.Error
	if err := c.Err(); err != nil && !errors.As(err, &reply) && bctx.Err() != nil && ctx.Err() == nil {
		c.SetErr(errScriptTimeout)
	}
	return c
}

// bound runs call and returns its command, or, if it has not answered within b.d or
// before ctx ends, a command failed with errScriptTimeout or ctx's error.
func (b boundedScripter) bound(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	c, err := bounded(ctx, b.d, func() *redis.Cmd {
		ended := b.start()
		c := call()
		_ = c.Err() // a deferred autopipeliner's command answers here
		ended(c)
		return c
	})
	if err != nil {
		c = redis.NewCmd(ctx)
		c.SetErr(err)
	}
	return c
}

// bounded runs call and returns what it returned, or errScriptTimeout if it has not
// returned within d, or ctx's error if ctx ends first. A command queued in a deferred
// autopipeliner does not end with its context (go-redis): this is what bounds it.
func bounded[T any](ctx context.Context, d time.Duration, call func() T) (T, error) {
	done := make(chan T, 1)
	go func() { done <- call() }()
	t := time.NewTimer(d)
	defer t.Stop()
	var zero T
	select {
	case v := <-done:
		return v, nil
	case <-t.C:
		return zero, errScriptTimeout
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (b boundedScripter) FCall(ctx context.Context, function string, keys []string, args ...any) *redis.Cmd {
	via := b.Caller
	if a, ok := via.(*adaptiveScripter); ok {
		via = a.pick()
		defer a.done()
	}
	if b.inline != nil && via == b.inline {
		return b.inlineCall(ctx, func(ctx context.Context) *redis.Cmd { return via.FCall(ctx, function, keys, args...) })
	}
	ctx, cancel := b.sendBound(ctx)
	defer cancel()
	return b.bound(ctx, func() *redis.Cmd { return via.FCall(ctx, function, keys, args...) })
}

// Eval sends EVAL through rdb, within d (lua.Evaler: where the library cannot be loaded).
func (b boundedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if b.inline != nil {
		return b.inlineCall(ctx, func(ctx context.Context) *redis.Cmd { return b.rdb.Eval(ctx, script, keys, args...) })
	}
	ctx, cancel := b.sendBound(ctx)
	defer cancel()
	return b.bound(ctx, func() *redis.Cmd { return b.rdb.Eval(ctx, script, keys, args...) })
}

// sendBound is the context a call is sent under: ctx, ending sendMargin after the call's
// bound, and cancelled once the caller has its answer, so that go-redis does not send
// the call again (after a lost connection) once its caller has been told it failed.
// The margin lets the bound answer first (errScriptTimeout).
func (b boundedScripter) sendBound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.d+sendMargin)
}

// sendMargin is how long after its bound a call's context ends (sendBound).
const sendMargin = 100 * time.Millisecond

// LoadLibrary loads the library on every master of rdb (lua.Loader).
func (b boundedScripter) LoadLibrary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	return lua.Load(ctx, b.rdb)
}

// redisCallTimeout bounds one script call on a caller's path (boundedScripter).
const redisCallTimeout = 1500 * time.Millisecond

// honoursDeadlines reports whether a go-redis client bounds each call by its context's
// deadline. Clients of other types are taken on trust.
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Close stops the engine's background work and waits for it to end, for closeTimeout
// (2 s) at most, whatever the backends do: a batch still in its transaction then (its
// PostgreSQL or Redis hangs) ends by its own bounds and answers its callers, and then
// the confirmations still queued are refused with ErrUnavailable. It closes neither the pool
// nor the Redis client (pgxpool's Close waits for such a batch's connection). Marker
// writes still owed stay in PostgreSQL, and hold moves not yet in the event feed stay
// in Redis, for another engine (or this one, restarted) to make.
func (e *Engine) Close() {
	e.stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.stopViews()
		e.stopCommitters()
		e.settling.wg.Wait()
		<-e.done
		<-e.waitlistDone
		<-e.libraryDone
		e.sweeps.Wait()
		e.relays.close()
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		e.log.WarnContext(context.Background(), "engine closed with work still in flight; it ends by its own bounds", "waited", closeTimeout)
	}
}

// closeTimeout bounds Close.
const closeTimeout = 2 * time.Second

// Ready reports whether PostgreSQL and Redis answer and Redis's eviction policy keeps
// holds. A nil error means ready.
func (e *Engine) Ready(ctx context.Context) error {
	if err := e.pool.Ping(ctx); err != nil {
		return unavailable("postgres", err)
	}
	if err := migrations.Check(ctx, e.pool); err != nil {
		// Not ready to serve a schema it does not know (a pending migration, or one
		// rolled back under it): every write would fail, and say less.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		return unavailable("redis", err)
	}
	e.policyCheckedAt.Store(0)
	return e.checkRedis(ctx)
}

// policyRecheck is how long a good eviction-policy check is trusted before it is made
// again; policyCheckTimeout bounds the check.
const (
	policyRecheck      = time.Minute
	policyCheckTimeout = redisCallTimeout
)

// checkRedis refuses a Redis whose maxmemory-policy may evict keys: a hold evicted
// before its TTL would let a second customer take the seat. One check runs at a time,
// shared by every caller (a sale's first second would otherwise send one per hold to
// every master), each of which leaves at its own deadline. Once a check has passed,
// callers do not wait for the next one: it runs in the background a minute later, and
// a policy found changed refuses the calls after it.
func (e *Engine) checkRedis(ctx context.Context) error {
	if last := e.policyCheckedAt.Load(); last != 0 {
		if time.Since(time.Unix(0, last)) >= policyRecheck && e.policyRechecking.CompareAndSwap(false, true) {
			go func() {
				defer e.policyRechecking.Store(false)
				_ = e.sharedPolicyCheck(context.WithoutCancel(ctx))
			}()
		}
		return nil
	}
	return e.sharedPolicyCheck(ctx)
}

// sharedPolicyCheck reads the eviction policy of every master, once for every caller
// at a time; it records a good one, and forgets the last good one on a bad one. A caller
// that found no good check and arrives just after a shared one recorded it reads nothing.
func (e *Engine) sharedPolicyCheck(ctx context.Context) error {
	_, _, err := shared(ctx, &e.loads, "policy\x00", "redis", policyCheckTimeout, func(ctx context.Context) (struct{}, error) {
		if e.policyFresh() {
			return struct{}{}, nil
		}
		err := e.readPolicy(ctx)
		switch {
		case err == nil:
			e.policyCheckedAt.Store(time.Now().UnixNano())
		case errors.Is(err, errEvictingPolicy):
			e.policyCheckedAt.Store(0)
		}
		return struct{}{}, err
	})
	return err
}

// policyFresh: a good eviction-policy check is recorded and not yet due again.
func (e *Engine) policyFresh() bool {
	last := e.policyCheckedAt.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < policyRecheck
}

// errEvictingPolicy: Redis may evict keys, holds among them.
var errEvictingPolicy = errors.New("redis may evict holds")

// readPolicy reads every master's maxmemory-policy: an error unless each is noeviction.
// It loads the scripts' function library on each master too (internal/lua), so that an
// engine's first calls find it: a load that fails (a Redis out of memory refuses
// FUNCTION LOAD even of a library it has) is left to the calls, which load it when they
// find it missing (lua.Function.Run, runScripts).
func (e *Engine) readPolicy(ctx context.Context) error {
	check := func(ctx context.Context, c redis.UniversalClient) error {
		v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return unavailable("redis", fmt.Errorf("read maxmemory-policy: %w", err))
		}
		if p := v["maxmemory-policy"]; p != "noeviction" {
			return fmt.Errorf("%w: %w: redis maxmemory-policy is %q; set it to noeviction", ErrUnavailable, errEvictingPolicy, p)
		}
		if err := lua.Load(ctx, c); err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "load the scripts' function library", "error", err)
		}
		return nil
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	}
	return check(ctx, e.rdb)
}
