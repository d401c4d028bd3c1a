package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/engine"
)

// Exit codes a shell script can rely on.
const (
	exitFailure = 1 // the command failed
	exitUsage   = 2 // bad command line or configuration
	exitPending = 3 // migrate status: migrations are pending
)

// exitError ends the process with a code; msg (if any) goes to stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

const usage = `holdfast — seat reservations that hold on the busiest minute of the year

Usage:
  holdfast serve   [flags]              serve the HTTP API
  holdfast migrate up|down|status       apply, roll back one, or list the migrations
  holdfast resync  --show SHOW          rebuild a show's Redis state from PostgreSQL
  holdfast events  [--after ID] [--follow]  print the event feed as NDJSON, one event a line
  holdfast demo    [flags]              simulate a sale opening against a live server
  holdfast bench   [flags]              measure throughput against raw Redis and PostgreSQL
  holdfast abuse   [flags]              run the attacks of docs/RELIABILITY.md ("Abuse") against two servers it starts
  holdfast env                          every HOLDFAST_ variable: the flag it sets, its default
  holdfast version                      the module version and the source revision

Every flag can also be set from the environment: HOLDFAST_ and its name in capitals
(--rate-limit: HOLDFAST_RATE_LIMIT); DATABASE_URL and REDIS_URL work too. "holdfast
env" lists them all.
Flags may come before or after a command's arguments. Run "holdfast <command> -h" for
its flags.
`

// run is the whole program, with its environment passed in so that tests can run it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{code: exitUsage}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "migrate":
		return migrate(ctx, args[1:], getenv, stdout, stderr)
	case "resync":
		return resync(ctx, args[1:], getenv, stdout, stderr)
	case "events":
		return events(ctx, args[1:], getenv, stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], getenv, stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], getenv, stdout, stderr)
	case "abuse":
		return runAbuse(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "env":
		if len(args) > 1 {
			return usageErr("env takes no arguments\nusage: holdfast env")
		}
		return envTable(stdout)
	case "version", "--version":
		fmt.Fprintln(stdout, version())
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageErr("unknown command %q", args[0])
	}
}

// backendFlags are the connection settings every command shares.
type backendFlags struct {
	databaseURL  string
	redisURL     string
	redisCluster bool
	pgMaxConns   int
}

// register adds the PostgreSQL flags, and with redis the Redis ones: each command
// lists only the backends it uses.
func (b *backendFlags) register(fs *flag.FlagSet, redis bool) {
	fs.StringVar(&b.databaseURL, "database-url", "", "PostgreSQL URL")
	fs.IntVar(&b.pgMaxConns, "pg-max-conns", 32, "PostgreSQL pool size")
	if redis {
		fs.StringVar(&b.redisURL, "redis-url", "",
			"Redis URL; behind Sentinel redis://SENTINEL:26379/0?master_name=NAME[&addr=SENTINEL2:26379...]; or a comma-separated list of host:port for Redis Cluster")
		fs.BoolVar(&b.redisCluster, "redis-cluster", false, "treat --redis-url as a Redis Cluster")
	}
}

// openPool connects to PostgreSQL, saying how to fix a missing or bad setting.
func (b *backendFlags) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	if b.databaseURL == "" {
		return nil, usageErr("DATABASE_URL is not set; run `make services` and use the URL it prints, or pass --database-url")
	}
	cfg, err := pgxpool.ParseConfig(b.databaseURL)
	if err != nil {
		return nil, usageErr("DATABASE_URL is not a valid PostgreSQL URL: %v", redactErr(err, b.databaseURL))
	}
	if b.pgMaxConns < 1 {
		return nil, usageErr("--pg-max-conns must be at least 1")
	}
	cfg.MaxConns = int32(b.pgMaxConns)
	engine.TunePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("the PostgreSQL at %s does not answer (%w); is it running? `make services` starts one", redactURL(b.databaseURL), err)
	}
	return pool, nil
}

// openRedis connects to one Redis (a redis:// URL) or a Redis Cluster (a list of
// host:port, or --redis-cluster), with context deadlines honoured.
func (b *backendFlags) openRedis(ctx context.Context) (redis.UniversalClient, error) {
	if b.redisURL == "" {
		return nil, usageErr("REDIS_URL is not set; run `make services` and use the URL it prints, or pass --redis-url")
	}
	var rdb redis.UniversalClient
	if b.redisCluster || strings.Contains(b.redisURL, ",") {
		var addrs []string
		for _, a := range strings.Split(b.redisURL, ",") {
			a = strings.TrimSpace(a)
			if u, err := url.Parse(a); err == nil && u.Host != "" {
				a = u.Host
			}
			addrs = append(addrs, a)
		}
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, PoolSize: 256})
	} else if sentinelURL(b.redisURL) {
		// Redis behind Sentinel: the URL names a Sentinel (more with addr=...) and the
		// master (master_name=...); the client follows the master through a failover.
		opt, err := redis.ParseFailoverURL(b.redisURL)
		if err != nil {
			return nil, usageErr("REDIS_URL is not a valid Sentinel URL (redis://sentinel:26379/0?master_name=NAME&addr=sentinel2:26379): %v", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.PoolSize = 256
		rdb = redis.NewFailoverClient(opt)
	} else {
		opt, err := redis.ParseURL(b.redisURL)
		if err != nil {
			return nil, usageErr("REDIS_URL is not a valid redis:// URL: %v", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.PoolSize = 256
		rdb = redis.NewClient(opt)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("the Redis at %s does not answer (%w); is it running? `make services` starts one", redactURL(b.redisURL), err)
	}
	return rdb, nil
}

// sentinelURL reports whether a REDIS_URL is the Sentinel form (it names a master).
func sentinelURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Query().Has("master_name")
}

// engineFlags are the engine's Config fields as flags with environment defaults.
type engineFlags struct {
	keyPrefix         string
	defaultHoldTTL    time.Duration
	maxHoldTTL        time.Duration
	maxHoldAge        time.Duration
	maxSeatsPerHold   int
	maxSeatsPerHolder int
	maxConfirmQueue   int
	confirmBatch      int
	confirmBatchWait  time.Duration
	confirmConns      int
	noAutoPipeline    bool
	confirmSavepoints bool
	otlpEndpoint      string
}

// registerPrefix adds only --key-prefix: commands that use the engine but not its
// tuning (resync, demo).
func (f *engineFlags) registerPrefix(fs *flag.FlagSet) {
	fs.StringVar(&f.keyPrefix, "key-prefix", "", "Redis key prefix (default holdfast)")
}

// register adds --key-prefix and every tuning flag of the engine.
func (f *engineFlags) register(fs *flag.FlagSet) {
	f.registerPrefix(fs)
	fs.DurationVar(&f.defaultHoldTTL, "default-hold-ttl", 0, "hold TTL when a request names none (default 5m)")
	fs.DurationVar(&f.maxHoldTTL, "max-hold-ttl", 0, "longest TTL of one hold or extension (default 15m)")
	fs.DurationVar(&f.maxHoldAge, "max-hold-age", 0, "longest total life of a hold with its extensions (default 30m)")
	fs.IntVar(&f.maxSeatsPerHold, "max-seats-per-hold", 0, "most seats in one hold (default 10)")
	fs.IntVar(&f.maxSeatsPerHolder, "max-seats-per-holder", 0, "most seats one holder holds at once per show (default 10)")
	fs.IntVar(&f.maxConfirmQueue, "max-confirm-queue", 0, "most confirmations waiting for a batch; past it they are shed with 503 (default 64 x --confirm-conns x --confirm-batch, at least 1024)")
	fs.IntVar(&f.confirmBatch, "confirm-batch", 0, "most confirmations group-committed in one transaction; 1: a transaction each (default 32)")
	fs.DurationVar(&f.confirmBatchWait, "confirm-batch-wait", 0, "how long a batch waits for more confirmations after its first (default 0: the batch size follows the load)")
	fs.IntVar(&f.confirmConns, "confirm-conns", 0, "batches in flight at once, each on a connection: about the database server's cores (default 2)")
	fs.BoolVar(&f.confirmSavepoints, "confirm-savepoints", false, "isolate each confirmation of a batch in a savepoint instead of deciding it from the batch's reads (slower; batch at most 64)")
	fs.BoolVar(&f.noAutoPipeline, "no-auto-pipeline", false, "send every hold script on its own instead of sharing round trips between concurrent calls")
	fs.StringVar(&f.otlpEndpoint, "otlp-endpoint", "",
		"export traces by OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318 (/v1/traces is added to a bare URL); empty: no tracing")
}

func (f *engineFlags) config() engine.Config {
	return engine.Config{KeyPrefix: f.keyPrefix, DefaultHoldTTL: f.defaultHoldTTL, MaxHoldTTL: f.maxHoldTTL,
		MaxHoldAge: f.maxHoldAge, MaxSeatsPerHold: f.maxSeatsPerHold, MaxSeatsPerHolder: f.maxSeatsPerHolder,
		MaxConfirmQueue: f.maxConfirmQueue, ConfirmBatch: f.confirmBatch, ConfirmBatchWait: f.confirmBatchWait,
		ConfirmConns: f.confirmConns, NoAutoPipeline: f.noAutoPipeline, ConfirmSavepoints: f.confirmSavepoints}
}

// parseFlags sets a command's flags from the environment (applyEnv), then from its
// arguments, wherever they stand among them (as in "holdfast migrate status
// --database-url …"), and returns the other arguments, at most maxArgs of them. -h /
// --help prints the command's flags on stdout and ends with exit 0; a bad flag or an
// extra argument is a usage error: the error first, then the command's usage line.
func parseFlags(ctx context.Context, fs *flag.FlagSet, args []string, getenv func(string) string, stdout, stderr io.Writer, maxArgs int) ([]string, error) {
	if sets, ok := ctx.Value(flagSetsKey{}).(*[]*flag.FlagSet); ok {
		*sets = append(*sets, fs)
	}
	envErr := applyEnv(fs, getenv)
	var msgs bytes.Buffer
	fs.SetOutput(&msgs)
	full := fs.Usage
	fs.Usage = func() {}
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage = full
				printUsage(fs, stdout)
				return nil, &exitError{code: 0}
			}
			return nil, commandUsage(fs, "%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional, args = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if envErr != nil {
		return nil, envErr
	}
	if len(positional) > maxArgs {
		return nil, commandUsage(fs, "unexpected argument %q", positional[maxArgs])
	}
	return positional, nil
}

// commandUsage is a usage error of a command: what is wrong, then how the command goes
// and where its flags are listed.
func commandUsage(fs *flag.FlagSet, format string, args ...any) error {
	words := strings.Fields(fs.Name()) // "holdfast migrate up|down|status"
	cmd := words[len(words)-1]
	if len(words) > 1 {
		cmd = words[1]
	}
	return usageErr("%s\nusage: %s [flags]   (holdfast %s -h lists the flags)", fmt.Sprintf(format, args...), fs.Name(), cmd)
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

func redactErr(err error, secretURL string) string {
	return strings.ReplaceAll(err.Error(), secretURL, redactURL(secretURL))
}

// openEngine opens the backends and an engine on them, for a command that needs no
// server (resync, events), warnings logged as JSON to stderr; closeEngine closes all
// three.
func (b *backendFlags) openEngine(ctx context.Context, eng *engineFlags, stderr io.Writer) (e *engine.Engine, closeEngine func(), err error) {
	pool, err := b.openPool(ctx)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := b.openRedis(ctx)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	cfg := eng.config()
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if e, err = engine.New(pool, rdb, &cfg); err != nil {
		rdb.Close()
		pool.Close()
		return nil, nil, usageErr("engine configuration: %v", err)
	}
	return e, func() { e.Close(); rdb.Close(); pool.Close() }, nil
}
