package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// PostgresServer is a PostgreSQL cluster of the test's own on loopback, for tests that
// crash and restart it. As root it runs as the "postgres" user (PostgreSQL refuses root).
type PostgresServer struct {
	t    testing.TB
	bin  string
	dir  string
	Port int
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
	p := &PostgresServer{t: t, bin: bin, dir: dir, Port: FreePort(t)}
	t.Cleanup(func() {
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
	if out, err := p.asOwner("initdb", "-D", p.data(), "-U", "holdfast", "-A", "trust", "--no-locale", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.Start()
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
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories='' -c max_connections=100", p.Port)
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
