// Package testsvc connects tests to the real PostgreSQL and Redis that
// internal/services/services.sh starts (or that TEST_DATABASE_URL / TEST_REDIS_URL name),
// and gives each test its own database and Redis key prefix.
//
// When CI=true, a service that cannot be reached fails the test; elsewhere the test is
// skipped with a message naming the variable to set.
package testsvc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/migrations"
)

const (
	defaultDatabaseURL = "postgres://holdfast@127.0.0.1:25432/holdfast?sslmode=disable"
	defaultRedisURL    = "redis://127.0.0.1:26379/0"
)

// DatabaseURL is the server the tests use: TEST_DATABASE_URL, else the local default.
func DatabaseURL() string {
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		return v
	}
	return defaultDatabaseURL
}

// RedisURL is the Redis the tests use: TEST_REDIS_CLUSTER_URL (a comma-separated list
// of cluster nodes) when set, else TEST_REDIS_URL, else the local default.
func RedisURL() string {
	if v := os.Getenv("TEST_REDIS_CLUSTER_URL"); v != "" {
		return v
	}
	if v := os.Getenv("TEST_REDIS_URL"); v != "" {
		return v
	}
	return defaultRedisURL
}

// ClusterMode reports whether the shared test Redis is a Redis Cluster.
func ClusterMode() bool { return os.Getenv("TEST_REDIS_CLUSTER_URL") != "" }

// NewRedisClient connects to the shared test Redis (one server or a cluster), with
// context deadlines honoured.
func NewRedisClient() (redis.UniversalClient, error) {
	if ClusterMode() {
		addrs := strings.Split(RedisURL(), ",")
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, PoolSize: 64}), nil
	}
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		return nil, err
	}
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = 64
	return redis.NewClient(opt), nil
}

// Keys lists the keys matching pattern, on every master of a cluster.
func Keys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.UniversalClient) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var mu sync.Mutex
	var out []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	return out, err
}

// unreachable fails the test under CI and skips it elsewhere.
func unreachable(t testing.TB, variable, url string, err error) {
	t.Helper()
	msg := fmt.Sprintf("cannot reach %s (%s): %v; run `make services` or set %s", variable, redact(url), err, variable)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "unparsable URL"
	}
	return p.Redacted()
}

// RandomName returns prefix followed by 12 random hex digits.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// adminConn connects to the server's maintenance database.
func adminConn(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(DatabaseURL())
	if err != nil {
		return nil, fmt.Errorf("parse TEST_DATABASE_URL: %w", err)
	}
	cfg.Database = "postgres"
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

// migrationsHash names the template database after the migrations it holds.
func migrationsHash() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(migrations.FS, path)
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// ensureTemplate creates (once per server and migration set) a migrated template
// database, under an advisory lock so that parallel test binaries agree.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	templateOnce.Do(func() {
		name := "holdfast_tmpl_" + migrationsHash()
		templateName = name
		if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
			templateErr = err
			return
		}
		defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(727274)")
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			templateErr = err
			return
		}
		if exists {
			return
		}
		building := name + "_build"
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
			templateErr = err
			return
		}
		pool, err := pgxpool.New(ctx, urlWithDatabase(building))
		if err != nil {
			templateErr = err
			return
		}
		templateErr = migrations.Up(ctx, pool)
		pool.Close()
		if templateErr != nil {
			return
		}
		_, templateErr = admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name)
	})
	return templateName, templateErr
}

func urlWithDatabase(name string) string {
	u, err := url.Parse(DatabaseURL())
	if err != nil {
		return ""
	}
	u.Path = "/" + name
	return u.String()
}

// errUnreachable marks a server that did not answer.
type errUnreachable struct{ err error }

func (e errUnreachable) Error() string { return e.err.Error() }

// OpenDatabase creates a new database (a copy of the migrated template when migrated)
// and returns a pool on it, its URL, and a function that drops it.
func OpenDatabase(ctx context.Context, migrated bool) (*pgxpool.Pool, string, func() error, error) {
	admin, err := adminConn(ctx)
	if err != nil {
		return nil, "", nil, errUnreachable{err}
	}
	defer admin.Close(ctx)
	name := RandomName("holdfast_t_")
	stmt := "CREATE DATABASE " + name
	if migrated {
		tmpl, err := ensureTemplate(ctx, admin)
		if err != nil {
			return nil, "", nil, fmt.Errorf("build the template database: %w", err)
		}
		stmt += " TEMPLATE " + tmpl
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return nil, "", nil, fmt.Errorf("create test database: %w", err)
	}
	dsn := urlWithDatabase(name)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", nil, err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	drop := func() error {
		pool.Close()
		admin, err := adminConn(context.Background())
		if err != nil {
			return err
		}
		defer admin.Close(context.Background())
		_, err = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	return pool, dsn, drop, nil
}

// Database returns a pool on a new database of the test's own, migrated, dropped when
// the test ends. It is cheap: a copy of a migrated template.
func Database(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := newDatabase(t, true)
	return pool
}

// EmptyDatabase returns a pool on a new database without any migration, and its URL.
func EmptyDatabase(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return newDatabase(t, false)
}

func newDatabase(t testing.TB, migrated bool) (*pgxpool.Pool, string) {
	t.Helper()
	pool, dsn, drop, err := OpenDatabase(context.Background(), migrated)
	var ue errUnreachable
	if errors.As(err, &ue) {
		unreachable(t, "TEST_DATABASE_URL", DatabaseURL(), ue.err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return pool, dsn
}

// RedisOptions are the options tests use: go-redis honours context deadlines.
func RedisOptions(t testing.TB, rawURL string) *redis.Options {
	t.Helper()
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = 64
	return opt
}

// Redis returns a client of the shared test Redis (a cluster client when
// TEST_REDIS_CLUSTER_URL is set). Tests share it: each must use its own key prefix
// (KeyPrefix) and must never flush it.
func Redis(t testing.TB) redis.UniversalClient {
	t.Helper()
	rdb, err := NewRedisClient()
	if err != nil {
		t.Fatalf("redis client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		variable := "TEST_REDIS_URL"
		if ClusterMode() {
			variable = "TEST_REDIS_CLUSTER_URL"
		}
		unreachable(t, variable, RedisURL(), err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// KeyPrefix returns a Redis key prefix of the test's own.
func KeyPrefix(t testing.TB) string { return RandomName("t") }

// RedisServer is a redis-server process of the test's own, for tests that flush,
// restart, pause or stop Redis.
type RedisServer struct {
	t      testing.TB
	Port   int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	args   []string
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartRedis starts a private redis-server on loopback without persistence, with
// maxmemory-policy noeviction and any extra arguments ("--maxmemory", "2mb", ...); an
// extra argument FreePortArg becomes a free port of its own. It is stopped when the
// test ends. A port found free can be taken before the server binds it (by another
// test's server, or as the local port of any outgoing connection): a server that exits
// before it answers is started again on other ports, up to five times.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not installed; run `make services` (it installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &RedisServer{t: t, dir: t.TempDir()}
	t.Cleanup(s.Stop)
	for attempt := 1; ; attempt++ {
		s.Port = FreePort(t)
		s.args = []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port), "--dir", s.dir,
			"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--protected-mode", "yes"}
		for _, a := range extra {
			if a == FreePortArg {
				a = strconv.Itoa(FreePort(t))
			}
			s.args = append(s.args, a)
		}
		if s.start(bin) {
			return s
		}
		if attempt == 5 {
			t.Fatalf("redis-server exited before it answered, %d times (ports taken?): %s", attempt, s.args)
		}
	}
}

// FreePortArg, among StartRedis's extra arguments, stands for a free port (a cluster
// bus port, say), chosen again when the server has to start on other ports.
const FreePortArg = "{free port}"

// start starts the server and waits until it answers a PING: true then, false when the
// process exited first (its port taken, say). A server that neither answers nor exits
// within 10 s fails the test.
func (s *RedisServer) start(bin string) bool {
	s.t.Helper()
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		close(exited)
	}(s.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
		if err == nil {
			fmt.Fprintf(c, "PING\r\n")
			buf := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			if strings.HasPrefix(string(buf[:n]), "+PONG") {
				return true
			}
		}
		select {
		case <-exited:
			s.cmd = nil
			return false
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer", s.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustStart is start for a server that cannot move to other ports (a restart on its
// port, a Sentinel with its configuration file).
func (s *RedisServer) mustStart(bin string) {
	s.t.Helper()
	if !s.start(bin) {
		s.t.Fatalf("redis-server on %s exited before it answered (its port taken?)", s.Addr())
	}
}

// Addr is host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the redis:// URL of the server.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a client of this server, closed when the test ends.
func (s *RedisServer) Client() *redis.Client {
	rdb := redis.NewClient(RedisOptions(s.t, s.URL()))
	s.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Stop ends the server (SIGKILL: no persistence, nothing to save).
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Running reports whether the server process is up (not stopped by Stop).
func (s *RedisServer) Running() bool { return s.cmd != nil }

// Restart kills the server and starts a new one on the same port: all data is lost.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Stop()
	bin, _ := exec.LookPath("redis-server")
	s.mustStart(bin)
}

// KillClients closes every normal client connection of the server but the caller's.
func (s *RedisServer) KillClients(t testing.TB) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	_ = c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
}

// Pause freezes the server (SIGSTOP); Resume thaws it.
func (s *RedisServer) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume thaws a paused server.
func (s *RedisServer) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// SentinelSet is a Redis master, a replica of it and three Sentinels watching them
// (quorum 2, the master judged down after 1 s), all on loopback.
type SentinelSet struct {
	Master, Replica *RedisServer
	Sentinels       []*RedisServer
}

// SentinelMaster is the name the Sentinels know the master by.
const SentinelMaster = "holdfast"

// StartSentinels starts a SentinelSet; everything stops when the test ends.
func StartSentinels(t testing.TB) *SentinelSet {
	t.Helper()
	set := &SentinelSet{Master: StartRedis(t)}
	set.Replica = StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(set.Master.Port))
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		bin, err = exec.LookPath("redis-server") // redis-server --sentinel is the same program
		if err != nil {
			t.Fatal("redis-sentinel is not installed; run `make services` (it installs it)")
		}
	}
	for range 3 {
		s := &RedisServer{t: t, Port: FreePort(t), dir: t.TempDir()}
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			s.Port, s.dir, SentinelMaster, set.Master.Port, SentinelMaster, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel"}
		s.mustStart(bin)
		t.Cleanup(s.Stop)
		set.Sentinels = append(set.Sentinels, s)
	}
	return set
}

// URL is the Sentinel form of REDIS_URL: the first Sentinel's address, the others as
// addr parameters, and the master's name.
func (set *SentinelSet) URL() string {
	u := "redis://" + set.Sentinels[0].Addr() + "/0?master_name=" + SentinelMaster
	for _, s := range set.Sentinels[1:] {
		u += "&addr=" + s.Addr()
	}
	return u
}

// MasterAddr asks the Sentinels which server is the master now.
func (set *SentinelSet) MasterAddr(ctx context.Context) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: set.Sentinels[0].Addr()})
	defer c.Close()
	a, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(a[0], a[1]), nil
}
