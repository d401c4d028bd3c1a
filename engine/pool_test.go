package engine

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestTunePoolPrefersTheNamedHostThatAnswered: with the URL's hosts named by name, as
// docs/RELIABILITY.md recommends, once a connection reached the second host every new
// connection goes to it first. The first host takes connections and never answers (a
// primary that hung or vanished): each try of it costs a connect timeout, so it must be
// tried for the first connection only. The names: localhost for both, and two names of
// the pool's own lookup (a LookupFunc of the configuration, which TunePool keeps using).
//
// "same port": the form RELIABILITY.md gives (db1:5432,db2:5432), two names of one port
// on two addresses (127.0.0.2, a silent host, and 127.0.0.1), told apart by address alone.
func TestTunePoolPrefersTheNamedHostThatAnswered(t *testing.T) {
	t.Run("localhost", func(t *testing.T) { testPreferNamedHost(t, "localhost", "localhost", "127.0.0.1", nil) })
	lookup := func(names map[string][]string) pgconn.LookupFunc {
		return func(_ context.Context, host string) ([]string, error) {
			if a, ok := names[host]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("no such host %q", host)
		}
	}
	t.Run("lookup", func(t *testing.T) {
		names := map[string][]string{"pg-old.holdfast.test": {"127.0.0.1"}, "pg-new.holdfast.test": {"127.0.0.1"}}
		testPreferNamedHost(t, "pg-old.holdfast.test", "pg-new.holdfast.test", "127.0.0.1", lookup(names))
	})
	t.Run("same port", func(t *testing.T) {
		names := map[string][]string{"db1.holdfast.test": {"127.0.0.2"}, "db2.holdfast.test": {"127.0.0.1"}}
		testPreferNamedHost(t, "db1.holdfast.test", "db2.holdfast.test", "127.0.0.2", lookup(names))
	})
}

// testPreferNamedHost: a pool on hungName (a silent host on hungIP: on the test
// server's port when that is not 127.0.0.1, else on a port of its own) then liveName
// (the test server), both resolved by lookup when it is not nil.
func testPreferNamedHost(t *testing.T, hungName, liveName, hungIP string, lookup pgconn.LookupFunc) {
	u, err := url.Parse(testsvc.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL %s: %v", u.Redacted(), err)
	}
	at := net.JoinHostPort(hungIP, "0")
	if hungIP != "127.0.0.1" {
		at = net.JoinHostPort(hungIP, port)
	}
	hung, tries := silentHost(t, at)
	u.Host = fmt.Sprintf("%s:%d,%s:%s", hungName, hung, liveName, port)
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	if lookup != nil {
		cfg.ConnConfig.LookupFunc = lookup
	}
	cfg.ConnConfig.ConnectTimeout = 500 * time.Millisecond
	TunePool(cfg)
	const conns = 6
	cfg.MaxConns = conns + 1
	pool, err := pgxNewPool(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	first, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatalf("first connection: %v", err)
	}
	defer first.Release()
	if tries.Load() != 1 {
		t.Fatalf("the first connection tried the hung host %d times, want once", tries.Load())
	}
	// More connections at once, each held to the end: each one a new connection.
	var wg sync.WaitGroup
	held := make(chan *pgxpool.Conn, conns)
	errs := make(chan error, conns)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			c, err := pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			held <- c
			if got := c.Conn().PgConn().Conn().RemoteAddr().(*net.TCPAddr).Port; strconv.Itoa(got) != port {
				errs <- fmt.Errorf("a connection to port %d, want %s", got, port)
			}
		})
	}
	wg.Wait()
	t.Logf("%d connections after the first in %v (connect timeout %v)", conns, time.Since(start), cfg.ConnConfig.ConnectTimeout)
	close(held)
	close(errs)
	for c := range held {
		c.Release()
	}
	for err := range errs {
		t.Error(err)
	}
	if n := tries.Load(); n != 1 {
		t.Errorf("the hung host was tried %d times for %d connections after the first, want once in all (the first connection's)", n, conns)
	}
}

// silentHost listens on addr (a loopback address and port, 0 for any) and takes every connection without ever
// answering; it returns the port and the count of connections taken.
func silentHost(t *testing.T, addr string) (int, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	var mu sync.Mutex
	var taken []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tries.Add(1)
			mu.Lock()
			taken = append(taken, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range taken {
			c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port, &tries
}
