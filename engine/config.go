package engine

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Config tunes an [Engine]. Every field is optional: the zero value means the default.
type Config struct {
	// KeyPrefix starts every Redis key of the engine, so several engines (or tests) can
	// share one Redis. It must match the id pattern. Defaults to "holdfast".
	KeyPrefix string

	// DefaultHoldTTL is the life of a hold whose HoldRequest.TTL is zero.
	// Defaults to 5 minutes.
	DefaultHoldTTL time.Duration

	// MaxHoldTTL bounds the TTL of one hold or one extension. Defaults to 15 minutes.
	MaxHoldTTL time.Duration

	// MaxHoldAge bounds the total life of a hold with all its extensions, measured by
	// Redis's clock from the moment the hold was taken. Defaults to 30 minutes.
	MaxHoldAge time.Duration

	// MaxSeatsPerHold bounds the seats of one hold (and one booking). Defaults to 10.
	MaxSeatsPerHold int

	// MaxSeatsPerHolder bounds the seats one HolderID holds at once in one show; an
	// empty HolderID has no cap. Defaults to 10.
	MaxSeatsPerHolder int

	// MaxSeatsPerShow bounds the inventory of one show. Defaults to 100,000.
	MaxSeatsPerShow int

	// LockTimeout bounds how long a confirmation or cancellation waits for a row lock
	// in PostgreSQL before it fails with ErrUnavailable. Defaults to 2 seconds.
	LockTimeout time.Duration

	// StatementTimeout bounds each SQL statement of a confirmation or cancellation.
	// Defaults to 5 seconds.
	StatementTimeout time.Duration

	// Logger receives the engine's logs; tokens and idempotency keys never appear in
	// them. Defaults to a logger that discards everything.
	Logger *slog.Logger

	// MarkerRepairInterval is how often the engine looks in PostgreSQL for sold-marker
	// writes that a confirmation or cancellation committed but could not make in Redis
	// (Redis down or refusing writes, a process that died after COMMIT), and makes them:
	// rows at least a second old, 512 a round in one Redis pipeline, rounds until none
	// is due, engines splitting the rows. A backlog of B rows is written within this
	// interval plus ⌈B / (512 × engines)⌉ rounds of Redis taking writes again. Defaults
	// to 250 milliseconds.
	MarkerRepairInterval time.Duration

	// MaxCachedShows bounds how many shows' inventories the engine keeps in memory; past
	// it, the least recently loaded are dropped (and loaded again when used). Defaults
	// to 10,000.
	MaxCachedShows int

	// UnknownShowTTL is how long the engine remembers that a show id does not exist, so
	// that requests for unknown shows do not each cost a PostgreSQL query. Creating the
	// show through this engine forgets it at once. Defaults to 2 seconds.
	UnknownShowTTL time.Duration

	// MaxConfirmQueue bounds the confirmations waiting for a batch (see ConfirmBatch);
	// past it a confirmation is refused at once with ErrOverloaded (nothing changes). It
	// bounds memory, not waiting: what protects the holds is the other rule, by which a
	// confirmation is refused (ErrHoldLost), before it costs the database anything, when
	// its hold would expire before a batch could take and commit it. A refused
	// confirmation with an idempotency key whose earlier call committed gets that
	// booking instead of the refusal. Defaults to what the committers commit in 64
	// rounds of full batches — 64 × ConfirmConns × ConfirmBatch, at least 1,024 (4,096
	// with the other defaults) — a few seconds of work, which a hold outlives, so that
	// callers who confirm at once from their request handlers (hundreds on a default
	// pool) are queued, not refused.
	MaxConfirmQueue int

	// ConfirmBatch is the most confirmations one PostgreSQL transaction commits together
	// (group commit: one COMMIT, one fsync, one Redis check for all of them). A
	// confirmation never waits for a batch to fill: a committer takes what is queued
	// when it is free (see ConfirmBatchWait), so alone a confirmation is a batch of one.
	// 1 turns group commit off. Defaults to 32, at most 256.
	ConfirmBatch int

	// ConfirmBatchWait is how long a committer waits for more confirmations after the
	// first of a batch. Defaults to 0: the batch size follows the load by itself —
	// confirmations arriving while the committers are busy make the next batches, and a
	// batch gathered while another is in flight waits for it to end (at most 5 ms) —
	// while a lone confirmation on an idle engine waits for nothing. At most 100 ms.
	ConfirmBatchWait time.Duration

	// ConfirmSavepoints isolates each confirmation of a batch with a savepoint instead
	// of deciding it from the batch's reads: after the batch's ordered lock, each runs
	// the statements of a lone confirmation (the fence, then the booking) in a savepoint
	// of its own, and a refusal rolls back to it. Same outcomes, but a round trip per
	// statement and a subtransaction per confirmation, so by default it is off (the two
	// are compared in docs/BENCHMARKS.md). With it ConfirmBatch is at most 64, the
	// subtransactions PostgreSQL caches per transaction.
	ConfirmSavepoints bool

	// NoAutoPipeline turns off the sharing of Redis round trips between concurrent
	// calls. By default the hold, best-available, extend, release and check scripts go
	// through go-redis's autopipeliner (per node on a Cluster): calls made at the same
	// moment travel in one pipeline, and a lone call goes at once.
	NoAutoPipeline bool

	// siblingWait, a test seam, replaces the bound of a batch's wait for the batch in
	// flight (batchWait). 0: siblingWait.
	siblingWait time.Duration

	// scriptsSeen, a test seam, is told of each script call's start on a caller's path
	// (boundedScripter), and the function it returns of the call's end: when the call
	// has ended in Redis, not when its caller stopped waiting. nil in production.
	scriptsSeen func() (ended func(*redis.Cmd))

	// ConfirmConns is how many batches run at once, each on its own PostgreSQL
	// connection of the pool: about the database server's cores. More batches in flight
	// make each smaller, and a CPU-bound server slower (on a 2-core machine, 8 batchers
	// confirm half as fast as 2). Defaults to 2, or half the pool's MaxConns if that is
	// less (at least 1); other work (replays, repairs, seat-map rebuilds, cancellations)
	// uses the rest of the pool.
	ConfirmConns int

	// MaxWatchedShows bounds how many shows' seat maps the engine keeps in memory and
	// current from their change feeds (each takes one Redis connection, blocked on the
	// feed, from the client's pool). Past it, the map least recently read with no open
	// watch is dropped; when every one is watched, another show's map is built from
	// Redis at most once a second and shared by all its readers, and its watchers get
	// a snapshot of that map whenever it changed (about a second late, not refused).
	// Defaults to 32.
	MaxWatchedShows int

	// MaxHoldsInFlight bounds the holds (Hold and HoldBest) of one show being worked
	// on at once by this engine; past it a hold waits up to 250 ms for a slot, then is
	// refused with ErrOverloaded (nothing changes), so that an on-sale too big for the
	// machine is answered fast instead of queued for seconds. Defaults to 256.
	MaxHoldsInFlight int

	// SeatMapIdle is how long a show's seat map is kept current after its last read
	// with no watch open. Defaults to 1 minute.
	SeatMapIdle time.Duration

	// TracerProvider receives one span per operation (hold, extend, release, confirm
	// with its Redis checks, transaction and marker write, cancel, resync), with the
	// show, the number of seats and the outcome as attributes, never a token, key or
	// holder. pgx and go-redis spans come from their own instrumentation when the caller
	// sets it up. Defaults to no tracing.
	TracerProvider trace.TracerProvider

	// Registerer receives the engine's Prometheus metrics (holdfast_*). Defaults to nil:
	// metrics are kept but registered nowhere.
	Registerer prometheus.Registerer
}

const (
	defaultKeyPrefix         = "holdfast"
	defaultHoldTTL           = 5 * time.Minute
	defaultMaxHoldTTL        = 15 * time.Minute
	defaultMaxHoldAge        = 30 * time.Minute
	defaultMaxSeatsPerHold   = 10
	defaultMaxSeatsPerHolder = 10
	defaultMaxSeatsPerShow   = 100_000
	defaultLockTimeout       = 2 * time.Second
	defaultStatementTimeout  = 5 * time.Second
	defaultMarkerRepair      = 250 * time.Millisecond
	defaultMaxCachedShows    = 10_000
	defaultUnknownShowTTL    = 2 * time.Second
	defaultMaxWatchedShows   = 32
	defaultMaxHoldsInFlight  = 256
	defaultMaxConfirmQueue   = 1024 // at least; New sizes it from the batching (queueRounds)
	queueRounds              = 64   // full batches of every committer the default queue holds
	defaultSeatMapIdle       = time.Minute
	defaultConfirmBatch      = 32
	defaultConfirmConns      = 2 // at most half the pool's MaxConns
	maxConfirmBatch          = 256
	maxSavepointBatch        = 64 // PGPROC_MAX_CACHED_SUBXIDS
	maxConfirmBatchWait      = 100 * time.Millisecond

	// minHoldTTL is the shortest hold Redis can keep: PX takes whole milliseconds.
	minHoldTTL = time.Millisecond
	// maxHoldTTLLimit is the hard ceiling for MaxHoldTTL and MaxHoldAge (one day).
	maxHoldTTLLimit = 24 * time.Hour
	// maxSeatsLimit is the hard ceiling for MaxSeatsPerHold and MaxSeatsPerHolder.
	maxSeatsLimit = 1000
)

// withDefaults returns a validated copy of cfg with every zero field set.
func (cfg *Config) withDefaults() (Config, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = defaultKeyPrefix
	}
	if err := validateID("Config.KeyPrefix", c.KeyPrefix); err != nil {
		return c, err
	}
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Config.DefaultHoldTTL", &c.DefaultHoldTTL, defaultHoldTTL},
		{"Config.MaxHoldTTL", &c.MaxHoldTTL, defaultMaxHoldTTL},
		{"Config.MaxHoldAge", &c.MaxHoldAge, defaultMaxHoldAge},
		{"Config.LockTimeout", &c.LockTimeout, defaultLockTimeout},
		{"Config.StatementTimeout", &c.StatementTimeout, defaultStatementTimeout},
		{"Config.MarkerRepairInterval", &c.MarkerRepairInterval, defaultMarkerRepair},
		{"Config.UnknownShowTTL", &c.UnknownShowTTL, defaultUnknownShowTTL},
		{"Config.SeatMapIdle", &c.SeatMapIdle, defaultSeatMapIdle},
	}
	for _, d := range durations {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < minHoldTTL || *d.v > maxHoldTTLLimit {
			return c, invalid(d.name, "%v is out of range [%v, %v]", *d.v, minHoldTTL, maxHoldTTLLimit)
		}
	}
	if c.MaxHoldTTL > c.MaxHoldAge {
		return c, invalid("Config.MaxHoldTTL", "%v exceeds MaxHoldAge %v", c.MaxHoldTTL, c.MaxHoldAge)
	}
	if c.DefaultHoldTTL > c.MaxHoldTTL {
		return c, invalid("Config.DefaultHoldTTL", "%v exceeds MaxHoldTTL %v", c.DefaultHoldTTL, c.MaxHoldTTL)
	}
	counts := []struct {
		name string
		v    *int
		def  int
		max  int
	}{
		{"Config.MaxSeatsPerHold", &c.MaxSeatsPerHold, defaultMaxSeatsPerHold, maxSeatsLimit},
		{"Config.MaxSeatsPerHolder", &c.MaxSeatsPerHolder, defaultMaxSeatsPerHolder, maxSeatsLimit},
		{"Config.MaxSeatsPerShow", &c.MaxSeatsPerShow, defaultMaxSeatsPerShow, 1_000_000},
		{"Config.MaxCachedShows", &c.MaxCachedShows, defaultMaxCachedShows, 10_000_000},
		{"Config.MaxWatchedShows", &c.MaxWatchedShows, defaultMaxWatchedShows, 10_000},
		{"Config.MaxHoldsInFlight", &c.MaxHoldsInFlight, defaultMaxHoldsInFlight, 1_000_000},
		{"Config.MaxConfirmQueue", &c.MaxConfirmQueue, defaultMaxConfirmQueue, 1_000_000},
		{"Config.ConfirmBatch", &c.ConfirmBatch, defaultConfirmBatch, maxConfirmBatch},
		{"Config.ConfirmConns", &c.ConfirmConns, defaultConfirmConns, 1_000},
	}
	for _, n := range counts {
		if *n.v == 0 {
			*n.v = n.def
		}
		if *n.v < 1 || *n.v > n.max {
			return c, invalid(n.name, "%d is out of range [1, %d]", *n.v, n.max)
		}
	}
	if c.ConfirmSavepoints && c.ConfirmBatch > maxSavepointBatch {
		return c, invalid("Config.ConfirmBatch", "%d is more than %d, the most savepoints a transaction keeps cheaply (Config.ConfirmSavepoints)", c.ConfirmBatch, maxSavepointBatch)
	}
	if c.ConfirmBatchWait < 0 || c.ConfirmBatchWait > maxConfirmBatchWait {
		return c, invalid("Config.ConfirmBatchWait", "%v is out of range [0, %v]", c.ConfirmBatchWait, maxConfirmBatchWait)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}

	return c, nil
}
