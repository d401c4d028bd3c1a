package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestResyncCommand: an operator rebuilds shows' Redis state from the command line.
func TestResyncCommand(t *testing.T) {
	t.Parallel()
	pool, url := testsvc.EmptyDatabase(t)
	prefix := testsvc.KeyPrefix(t)
	vars := env(map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL(), "HOLDFAST_KEY_PREFIX": prefix})
	if err := run(t.Context(), []string{"migrate", "up"}, vars, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(pool, testsvc.Redis(t), &engine.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateShow(t.Context(), "gala", []string{"A1", "A2"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"resync", "--show", "gala"}, vars, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "resynced gala") {
		t.Fatalf("resync: %v %q", err, out.String())
	}
	// A sold marker the database has no booking for (a failover lost it): --from-database
	// sets it back and names the lost booking.
	rdb := testsvc.Redis(t)
	sold := prefix + ":{gala}:sold:0"
	if err := rdb.HSet(t.Context(), sold, "A2", "77").Err(); err != nil {
		t.Fatal(err)
	}
	// Its holder's booked count too: the database has none.
	hc, tag := prefix+":{gala}:hc", strings.Repeat("ab", 16)
	if err := rdb.HSet(t.Context(), hc, tag, "3:1").Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"resync", "--from-database", "--show", "gala"}, vars, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "show gala generation 77 seats A2") || !strings.Contains(out.String(), "1 lost bookings") ||
		!strings.Contains(out.String(), "1 booked counts set") {
		t.Fatalf("resync --from-database: %v %q", err, out.String())
	}
	if n, err := rdb.HExists(t.Context(), sold, "A2").Result(); err != nil || n {
		t.Fatalf("the lost booking's marker is still there: %v %v", n, err)
	}
	if n, err := rdb.HExists(t.Context(), hc, tag).Result(); err != nil || n {
		t.Fatalf("the lost booking's count is still there: %v %v", n, err)
	}
	if err := run(t.Context(), []string{"resync", "--show", "nope"}, vars, io.Discard, io.Discard); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("resync of an unknown show: %v", err)
	}
	for _, args := range [][]string{{"resync"}, {"resync", "--show", "gala", "extra"}} {
		if err := run(t.Context(), args, vars, io.Discard, io.Discard); exitCode(err) != exitUsage {
			t.Fatalf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestServeCapsConnections: past --max-conns open connections, a new client waits until
// one closes.
func TestServeCapsConnections(t *testing.T) {
	t.Parallel()
	base, _, _ := startServe(t, migratedEnv(t, nil), "--max-conns", "2")
	get := func() error {
		c := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(base + "/livez")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("livez: %v", err)
	}
	addr := strings.TrimPrefix(base, "http://")
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// Each idle connection is accepted once the previous request's slot is free.
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	waitFor("a third connection was served while two were open", func() bool { return get() != nil })
	idle[0].Close()
	waitFor("no connection served after one closed", func() bool { return get() == nil })
	idle[1].Close()
}

// TestCLIConventions: flags after a command's arguments work, extra arguments are
// refused, --help prints the command's own flags on stdout with exit 0, and version
// says what was built.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	_, url := testsvc.EmptyDatabase(t)
	ctx := t.Context()
	none := env(map[string]string{})
	var out, errOut bytes.Buffer
	err := run(ctx, []string{"migrate", "status", "--database-url", url}, none, &out, &errOut)
	if exitCode(err) != exitPending || !strings.Contains(out.String(), "pending  00001_schema.sql") {
		t.Fatalf("migrate status with the flag after the action: %v\n%s%s", err, out.String(), errOut.String())
	}
	for _, args := range [][]string{{"serve", "extra"}, {"demo", "--seats", "5", "more"}, {"bench", "x"}, {"migrate", "up", "down"}} {
		out.Reset()
		errOut.Reset()
		if err := run(ctx, args, none, &out, &errOut); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "unexpected argument") {
			t.Errorf("%v: %v, want a usage error naming the extra argument", args, err)
		}
	}
	for _, cmd := range []string{"serve", "migrate", "demo", "bench", "resync"} {
		out.Reset()
		errOut.Reset()
		if err := run(ctx, []string{cmd, "--help"}, none, &out, &errOut); err == nil || exitCode(err) != 0 {
			t.Errorf("%s --help: %v, want exit 0", cmd, err)
		}
		if !strings.Contains(out.String(), "-database-url") || errOut.Len() != 0 {
			t.Errorf("%s --help: stdout %q, stderr %q", cmd, out.String(), errOut.String())
		}
	}
	out.Reset()
	if err := run(ctx, []string{"serve", "--help"}, none, &out, io.Discard); err == nil && strings.Contains(out.String(), "-sale-buyers") {
		t.Error("serve --help lists bench's flags")
	}
	if !strings.Contains(out.String(), "-operator-token") {
		t.Errorf("serve --help lacks its flags: %s", out.String())
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out.Reset()
		// A test binary has neither a module version nor a stamp nor a revision: it says
		// the version of its source (VERSION) and that the revision is unknown.
		want := "holdfast " + strings.TrimSpace(releaseVersion) + " (revision unknown"
		if err := run(ctx, args, none, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), "go1.") {
			t.Errorf("%v: %v %q", args, err, out.String())
		}
	}
	if err := run(ctx, []string{"serve", "--log-level", "loud"}, none, io.Discard, io.Discard); exitCode(err) != exitUsage {
		t.Errorf("a bad --log-level: %v", err)
	}
}

// TestDemoReportsADeadServer: when the server dies mid-sale, the demo says so and fails
// instead of reporting a sale.
func TestDemoReportsADeadServer(t *testing.T) {
	t.Parallel()
	vars := migratedEnv(t, map[string]string{"HOLDFAST_OPERATOR_TOKEN": "demo-operator-token-0123456789"})
	base, admin, stop := startServe(t, vars, "--shutdown-timeout", "1s", "--rate-limit", "1000", "--rate-burst", "1000")
	var progress bytes.Buffer
	demoDone := make(chan error, 1)
	go func() {
		demoDone <- run(t.Context(), []string{"demo", "--url", base, "--admin-url", admin, "--show", "doomed", "--seats", "2000", "--buyers", "20",
			"--hold-ttl", "5s", "--duration", "60s", "--pace", "0", "--start-in", "0"}, vars, io.Discard, &progress)
	}()
	// Once the sale is on (its show exists), the server goes away.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/v1/shows/doomed/seats")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the sale never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = stop()
	select {
	case err := <-demoDone:
		if exitCode(err) == 0 || !strings.Contains(err.Error(), "stopped answering") {
			t.Fatalf("demo against a dead server: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo kept going against a dead server")
	}
	if strings.Contains(progress.String(), "\r") {
		t.Fatalf("progress written for a terminal into a non-terminal: %q", progress.String())
	}
}

// TestServeExportsTraces: with --otlp-endpoint, serve sends the engine's spans over
// OTLP/HTTP (to a collector the test runs); without it, nothing is sent anywhere.
func TestServeExportsTraces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var posts []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, r.URL.Path+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	base, _, stop := startServe(t, migratedEnv(t, nil), "--demo-show", "gala", "--demo-seats", "10", "--otlp-endpoint", collector.URL)
	req, _ := http.NewRequest("POST", base+"/v1/shows/gala/holds", strings.NewReader(`{"seats":["R01-001"]}`))
	req.Header.Set("Holder-Id", "alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("hold: %v %v", resp, err)
	}
	resp.Body.Close()
	requestID := resp.Header.Get("X-Request-Id")
	if err := stop(); err != nil { // shutdown flushes the batched spans
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var sawHold, sawRequest bool
	for _, p := range posts {
		if strings.HasPrefix(p, "/v1/traces ") && strings.Contains(p, "holdfast.hold") {
			sawHold = true
		}
		if requestID != "" && strings.Contains(p, "holdfast.request_id") && strings.Contains(p, requestID) {
			sawRequest = true // the request's server span, with the id the response carried
		}
		if strings.Contains(p, "alice") {
			t.Fatal("a span carries the holder id")
		}
	}
	if !sawHold {
		for _, p := range posts {
			t.Logf("post %.60q (%d bytes)", p, len(p))
		}
		t.Fatalf("no holdfast.hold span reached the collector (%d posts)", len(posts))
	}
	if !sawRequest {
		t.Fatalf("no span carries the request id %q of the response", requestID)
	}
}

// migratedEnv is the environment of a command on a fresh, migrated database and the
// shared test Redis (a key prefix of its own), plus extra variables.
func migratedEnv(t *testing.T, extra map[string]string) func(string) string {
	t.Helper()
	_, url := testsvc.EmptyDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL(), "HOLDFAST_KEY_PREFIX": testsvc.KeyPrefix(t)}
	maps.Copy(vars, extra)
	if err := run(t.Context(), []string{"migrate", "up"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	return env(vars)
}

// startServe runs holdfast serve on a free loopback port with args, and returns its base
// URL and a function that stops it and returns what serve returned (called at the end
// of the test if the test did not).
func startServe(t *testing.T, vars func(string) string, args ...string) (base, admin string, stop func() error) {
	t.Helper()
	base, admin, stop, err := tryServe(t, vars, args...)
	if err != nil {
		t.Fatalf("serve ended: %v", err)
	}
	return base, admin, stop
}

// tryServe is startServe that returns serve's error if it ends before it listens.
func tryServe(t *testing.T, vars func(string) string, args ...string) (base, admin string, stop func() error, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := &lineWriter{lines: make(chan string, 64)}
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, args...), vars, out, io.Discard)
	}()
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() { cancel(); stopErr = <-served })
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	for {
		select {
		case line := <-out.lines:
			if rest, ok := strings.CutPrefix(line, "holdfast: admin (metrics, show creation) on "); ok {
				admin = rest
			}
			if rest, ok := strings.CutPrefix(line, "holdfast: listening on "); ok {
				return rest, admin, stop, nil
			}
		case e := <-served:
			if e == nil {
				e = errors.New("serve returned before it listened")
			}
			once.Do(func() { stopErr = e })
			return "", "", stop, e
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not start")
		}
	}
}
