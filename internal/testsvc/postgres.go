package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgresServer is a PostgreSQL cluster of the test's own on loopback, for tests that
// crash and restart it. As root it runs as the "postgres" user (PostgreSQL refuses root).
type PostgresServer struct {
	t    testing.TB
	bin  string
	dir  string
	Port int
	// opts are more server settings ("-c name=value ..."), given at every start.
	opts string
}

func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		return string(out[:len(out)-1]), nil
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, pg_ctl); run `make services` (it installs them)")
}

// asOwner runs a PostgreSQL binary as the data owner.
func (p *PostgresServer) asOwner(name string, args ...string) *exec.Cmd {
	path := filepath.Join(p.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// StartPostgres initialises and starts a new cluster; it is removed when the test ends.
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	p := newPostgres(t, "")
	if out, err := p.asOwner("initdb", "-D", p.data(), "-U", "holdfast", "-A", "trust", "--no-locale", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.Start()
	return p
}

// ReachableDir makes a directory of the test's own under parent ("": the system's
// temporary directory) that the postgres user can enter (a test's own temporary
// directory is private to its user), for scripts that run PostgreSQL there as that
// user; it is removed when the test ends, after the cleanups registered later.
func ReachableDir(t testing.TB, parent, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newPostgres makes the directory of a cluster (owned by the postgres user as root)
// and picks its port; the cluster is stopped and removed when the test ends.
func newPostgres(t testing.TB, opts string) *PostgresServer {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "holdfast-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &PostgresServer{t: t, bin: bin, dir: dir, Port: FreePort(t), opts: opts}
	t.Cleanup(func() {
		p.signalAll(syscall.SIGCONT)
		_ = p.asOwner("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p *PostgresServer) data() string { return filepath.Join(p.dir, "data") }

// URL is the postgres:// URL of the cluster's "postgres" database.
func (p *PostgresServer) URL() string {
	return fmt.Sprintf("postgres://holdfast@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
}

// Start starts the cluster and waits until it accepts connections.
func (p *PostgresServer) Start() {
	p.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories='' -c max_connections=100 %s", p.Port, p.opts)
	if out, err := p.asOwner("pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "log"))
		p.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// StopImmediate stops the cluster the way a crash would (pg_ctl -m immediate): no
// checkpoint, recovery from the WAL on the next start.
func (p *PostgresServer) StopImmediate() {
	p.t.Helper()
	if out, err := p.asOwner("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		p.t.Fatalf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
}

// URLTo is the URL of database name on this cluster.
func (p *PostgresServer) URLTo(name string) string {
	return fmt.Sprintf("postgres://holdfast@127.0.0.1:%d/%s?sslmode=disable", p.Port, name)
}

// pids returns the postmaster's pid and its children's (none when it is not running).
func (p *PostgresServer) pids() []int {
	b, err := os.ReadFile(filepath.Join(p.data(), "postmaster.pid"))
	if err != nil {
		return nil
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return nil
	}
	pids := []int{pm}
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(pm)).Output()
	for _, f := range strings.Fields(string(out)) {
		if c, err := strconv.Atoi(f); err == nil {
			pids = append(pids, c)
		}
	}
	return pids
}

func (p *PostgresServer) signalAll(sig syscall.Signal) {
	for _, pid := range p.pids() {
		_ = syscall.Kill(pid, sig)
	}
}

// Freeze stops every process of the server (SIGSTOP): it hangs, alive, with its
// connections open and unanswered, as a server stuck on storage or swapped out does.
func (p *PostgresServer) Freeze() { p.signalAll(syscall.SIGSTOP) }

// Thaw resumes a frozen server.
func (p *PostgresServer) Thaw() { p.signalAll(syscall.SIGCONT) }

// Kill ends every process of the server at once (SIGKILL), the way a machine dies. It
// stops them all first (the postmaster first: it forks no more): killed one after
// another, a backend that outlived its postmaster by a moment would answer its client
// "terminating connection due to unexpected postmaster exit", which a dead machine never
// sends.
func (p *PostgresServer) Kill() {
	p.Freeze()
	pids := p.pids()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// PostgresPair is a primary and a streaming standby of it, whose replication
// connection goes through Link (a Proxy that can partition, delay or sever it).
type PostgresPair struct {
	Primary, Standby *PostgresServer
	Link             *Proxy
}

// StartPostgresPair starts a primary and a standby made by pg_basebackup. With
// synchronous, the primary's COMMITs wait for the standby (synchronous_standby_names
// '*', synchronous_commit on); otherwise replication is asynchronous. The standby
// retries its WAL source every 100 ms (wal_retrieve_retry_interval), so a promotion
// does not wait the default 5 s.
func StartPostgresPair(t testing.TB, synchronous bool) *PostgresPair {
	t.Helper()
	sync := "''"
	if synchronous {
		sync = "'*'"
	}
	primary := newPostgres(t, "-c wal_level=replica -c max_wal_senders=5 -c wal_sender_timeout=5s -c synchronous_standby_names="+sync)
	if out, err := primary.asOwner("initdb", "-D", primary.data(), "-U", "holdfast", "-A", "trust", "--no-locale", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	primary.Start()
	link := StartProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port))
	standby := newPostgres(t, fmt.Sprintf("-c hot_standby=on -c wal_retrieve_retry_interval=100ms -c wal_receiver_timeout=5s "+
		"-c primary_conninfo='host=127.0.0.1 port=%d user=holdfast application_name=standby'", link.Port()))
	// The base backup's WAL stream is cut by wal_sender_timeout (5 s) when the machine is
	// too busy for pg_basebackup to answer in time; pg_basebackup then removes what it
	// wrote, and is tried again.
	for try := 1; ; try++ {
		out, err := standby.asOwner("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "holdfast",
			"-D", standby.data(), "-R", "-X", "stream", "-c", "fast").CombinedOutput()
		if err == nil {
			break
		}
		if try == 3 {
			t.Fatalf("pg_basebackup, %d tries: %v\n%s", try, err, out)
		}
		t.Logf("pg_basebackup, try %d: %v\n%s", try, err, out)
	}
	standby.Start()
	pair := &PostgresPair{Primary: primary, Standby: standby, Link: link}
	pair.WaitStreaming()
	return pair
}

// WaitStreaming waits until the primary sees its standby streaming (and, when
// synchronous, as its synchronous standby).
func (pp *PostgresPair) WaitStreaming() {
	pp.t().Helper()
	deadline := time.Now().Add(30 * time.Second)
	for pp.Primary.Psql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") != "1" {
		if time.Now().After(deadline) {
			pp.t().Fatal("the standby never streamed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReplayed waits until the standby has replayed everything the primary wrote so far.
func (pp *PostgresPair) WaitReplayed() {
	pp.t().Helper()
	lsn := pp.Primary.Psql("SELECT pg_current_wal_lsn()")
	deadline := time.Now().Add(30 * time.Second)
	for pp.Standby.Psql(fmt.Sprintf("SELECT pg_last_wal_replay_lsn() >= '%s'::pg_lsn", lsn)) != "t" {
		if time.Now().After(deadline) {
			pp.t().Fatalf("the standby never replayed up to %s", lsn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// psql runs one query on the cluster's postgres database and returns its output.
func (p *PostgresServer) Psql(query string) string {
	p.t.Helper()
	out, err := exec.Command(filepath.Join(p.bin, "psql"), "-XAtq", "-d", p.URL(), "-c", query).CombinedOutput()
	if err != nil {
		p.t.Fatalf("psql %q: %v\n%s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (pp *PostgresPair) t() testing.TB { return pp.Primary.t }

// URL is one URL naming both servers, for a pool that follows the primary
// (target_session_attrs=read-write) and gives up on a host after connect_timeout.
func (pp *PostgresPair) URL(database string) string {
	return fmt.Sprintf("postgres://holdfast@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		pp.Primary.Port, pp.Standby.Port, database)
}

// FrontURL is URL with the primary reached through front (a Proxy in front of it, made
// by the caller: StartProxy with the primary's address), for a test that cuts the
// clients' path to the primary.
func (pp *PostgresPair) FrontURL(database string, front *Proxy) string {
	return fmt.Sprintf("postgres://holdfast@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		front.Port(), pp.Standby.Port, database)
}

// SyncRepWaiters is how many sessions of the primary wait in COMMIT for the
// synchronous standby.
func (pp *PostgresPair) SyncRepWaiters() int {
	n, _ := strconv.Atoi(pp.Primary.Psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"))
	return n
}

// Promote makes the standby a primary (pg_ctl promote, waiting until it is).
func (pp *PostgresPair) Promote() {
	pp.t().Helper()
	if out, err := pp.Standby.asOwner("pg_ctl", "-D", pp.Standby.data(), "-w", "-t", "60", "promote").CombinedOutput(); err != nil {
		pp.t().Fatalf("pg_ctl promote: %v\n%s", err, out)
	}
}
