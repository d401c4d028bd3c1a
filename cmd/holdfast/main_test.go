package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/holdfast/holdfast/migrations"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		return exitFailure
	}
}

func TestMigrateUpDownStatus(t *testing.T) {
	t.Parallel()
	_, url := testsvc.EmptyDatabase(t)
	vars := env(map[string]string{"DATABASE_URL": url})
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(files) < 2 {
		t.Fatalf("embedded migrations: %v %v", files, err)
	}
	newest := files[len(files)-1] // names are zero-padded: they sort by version
	var out bytes.Buffer
	step := func(args ...string) (int, string) {
		out.Reset()
		err := run(t.Context(), append([]string{"migrate"}, args...), vars, &out, io.Discard)
		return exitCode(err), out.String()
	}
	if code, text := step("status"); code != exitPending || !strings.Contains(text, "pending  00001_schema.sql") {
		t.Fatalf("status on a fresh database: %d %q", code, text)
	}
	if code, text := step("up"); code != 0 || !strings.Contains(text, "applied 00001_schema.sql") {
		t.Fatalf("up: %d %q", code, text)
	}
	if code, text := step("up"); code != 0 || strings.Contains(text, "applied 0") {
		t.Fatalf("second up: %d %q", code, text)
	}
	if code, text := step("status"); code != 0 || !strings.Contains(text, "applied  00001_schema.sql") ||
		!strings.Contains(text, "applied  "+newest) {
		t.Fatalf("status after up: %d %q", code, text)
	}
	// down rolls back the newest migration only.
	if code, text := step("down"); code != 0 || !strings.Contains(text, "rolled back "+newest) {
		t.Fatalf("down: %d %q", code, text)
	}
	if code, text := step("status"); code != exitPending || !strings.Contains(text, "applied  00001_schema.sql") ||
		!strings.Contains(text, "pending  "+newest) {
		t.Fatalf("status after down: %d %q", code, text)
	}
	if code, _ := step("sideways"); code != exitUsage {
		t.Fatalf("unknown action: %d", code)
	}
}

func TestConfigurationErrorsSayHowToFix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"migrate", "up"}, nil, "DATABASE_URL is not set; run `make services`"},
		{[]string{"serve"}, nil, "DATABASE_URL is not set"},
		{[]string{"serve", "--addr", "nonsense"}, nil, "is not host:port"},
		{[]string{"serve"}, map[string]string{"DATABASE_URL": "postgres://x@127.0.0.1:1/x", "REDIS_URL": "redis://127.0.0.1:1"}, "does not answer"},
		{[]string{"migrate", "up"}, map[string]string{"DATABASE_URL": "::not a url"}, "not a valid PostgreSQL URL"},
		{[]string{"frobnicate"}, nil, "unknown command"},
	}
	for _, c := range cases {
		err := run(t.Context(), c.args, env(c.vars), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if code := exitCode(run(t.Context(), nil, env(nil), io.Discard, io.Discard)); code != exitUsage {
		t.Errorf("no command: exit %d", code)
	}
}

func TestServeRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	_, url := testsvc.EmptyDatabase(t)
	vars := env(map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL()})
	err := run(t.Context(), []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, vars, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "migrate up") {
		t.Fatalf("serve on an unmigrated database: %v", err)
	}
}

// lineWriter hands the first line written to it to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			break
		}
		select {
		case w.lines <- strings.TrimSpace(line):
		default:
		}
	}
	return len(p), nil
}

// TestServeShutsDownGracefully: SIGINT/SIGTERM (a cancelled context) lets an in-flight
// request finish, then run returns cleanly.
func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	_ = testsvc.Database(t) // fails or skips early when PostgreSQL is unreachable
	_, url := testsvc.EmptyDatabase(t)
	vars := env(map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL(), "HOLDFAST_KEY_PREFIX": testsvc.KeyPrefix(t)})
	if err := run(t.Context(), []string{"migrate", "up"}, vars, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	active := make(chan struct{}, 1) // a request has reached the handler
	ctx = context.WithValue(ctx, handlerWrapKey{}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case active <- struct{}{}:
			default:
			}
			next.ServeHTTP(w, r)
		})
	})
	out := &lineWriter{lines: make(chan string, 64)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--demo-show", "gala", "--demo-seats", "50"}, vars, out, io.Discard)
	}()
	var base string
	select {
	case line := <-out.lines:
		for !strings.HasPrefix(line, "holdfast: listening on ") {
			line = <-out.lines
		}
		base = strings.TrimPrefix(line, "holdfast: listening on ")
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not start")
	}
	// An in-flight request: its body arrives slowly, across the shutdown.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", base+"/v1/shows/gala/holds", pr)
	req.Header.Set("Holder-Id", "alice")
	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got <- result{status: resp.StatusCode}
	}()
	fmt.Fprint(pw, `{"seats":`)
	select {
	case <-active:
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	stop()                             // SIGTERM, with the request in flight
	time.Sleep(200 * time.Millisecond) // a window in which serve must still be waiting
	select {
	case err := <-done:
		t.Fatalf("serve returned (%v) before the in-flight request finished", err)
	default:
	}
	fmt.Fprint(pw, `["R01-001"]}`)
	pw.Close()
	r := <-got
	if r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("in-flight request during shutdown: %d %v, want 201", r.status, r.err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := http.Get(base + "/livez"); err == nil {
		t.Fatal("the server still accepts connections after shutdown")
	}
}

// TestDemoInProcess runs small sales end to end and checks them with SQL: one as fast
// as the buyers go, one paced (it cannot sell out sooner than its pace allows), each
// printing the page to watch it on.
func TestDemoInProcess(t *testing.T) {
	t.Parallel()
	_, url := testsvc.EmptyDatabase(t)
	vars := env(map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL(), "HOLDFAST_KEY_PREFIX": testsvc.KeyPrefix(t)})
	if err := run(t.Context(), []string{"migrate", "up"}, vars, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pace    string
		places  string
		atLeast time.Duration // the pace's floor: 60 seats (and 40 places) at 1.33 x 100/3 s with a burst of 8
	}{{"0", "0", 0}, {"3s", "40", 2 * time.Second}} {
		var out bytes.Buffer
		start := time.Now()
		err := run(t.Context(), []string{"demo", "--show", "paced-" + strings.TrimSuffix(c.pace, "s"), "--seats", "60", "--places", c.places, "--buyers", "30",
			"--hold-ttl", "300ms", "--duration", "60s", "--pace", c.pace, "--start-in", "0"}, vars, &out, io.Discard)
		if err != nil {
			t.Fatalf("demo --pace %s: %v\n%s", c.pace, err, out.String())
		}
		took := time.Since(start)
		text := out.String()
		sc := bufio.NewScanner(strings.NewReader(text))
		var sawCheck bool
		for sc.Scan() {
			if sc.Text() == "independent SQL check: double bookings 0, acknowledged bookings missing 0, replay mismatches 0, places oversold or miscounted 0" {
				sawCheck = true
			}
		}
		if c.places != "0" && (!strings.Contains(text, "60/60 seats sold and 40/40 places") || !strings.Contains(text, "standing area's waitlist: ")) {
			t.Fatalf("demo --places 40 did not sell the standing area out:\n%s", text)
		}
		if !sawCheck || !strings.Contains(text, "60/60 seats sold") || !strings.Contains(text, "demo: watch the sale on http://127.0.0.1:") ||
			!strings.Contains(text, "/shows/paced-") {
			t.Fatalf("demo --pace %s output:\n%s", c.pace, text)
		}
		if took < c.atLeast {
			t.Fatalf("demo --pace %s sold out in %v: a paced sale cannot be over before %v", c.pace, took, c.atLeast)
		}
	}
}

// TestMigrateDownRefusesToDestroyData: down says what rolling back the newest
// migration drops; it refuses while those tables or columns hold rows, unless --force;
// and an engine on a database behind its build is not ready, saying why.
func TestMigrateDownRefusesToDestroyData(t *testing.T) {
	t.Parallel()
	pool, url := testsvc.EmptyDatabase(t)
	// HOLDFAST_FORCE is set, and ignored: only a typed --force destroys data.
	vars := env(map[string]string{"DATABASE_URL": url, "HOLDFAST_FORCE": "true"})
	var out bytes.Buffer
	step := func(args ...string) (int, string, error) {
		out.Reset()
		err := run(t.Context(), append([]string{"migrate"}, args...), vars, &out, io.Discard)
		return exitCode(err), out.String(), err
	}
	if code, text, err := step("up"); code != 0 {
		t.Fatalf("up: %v %s", err, text)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO shows (show_id) VALUES ('gala')`); err != nil {
		t.Fatal(err)
	}
	var before int64
	if err := pool.QueryRow(t.Context(), `SELECT max(version_id) FROM goose_db_version`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	// Migrations that drop no data (an index, say, or an empty table's column) roll back
	// at once; the first that would drop rows stops.
	code, text, err := step("down")
	for code == 0 && strings.Contains(text, "rolled back") {
		before--
		code, text, err = step("down")
	}
	if code != exitFailure || !strings.Contains(err.Error(), "--force") || !strings.Contains(text, "drops column shows.epoch (of 1 rows)") {
		t.Fatalf("down with data: exit %d, %v, output %q; want a refusal listing what it drops", code, err, text)
	}
	var after int64
	if err := pool.QueryRow(t.Context(), `SELECT max(version_id) FROM goose_db_version`).Scan(&after); err != nil || after != before {
		t.Fatalf("a refused down changed the schema version: %d -> %d (%v)", before, after, err)
	}
	if code, text, err := step("down", "--force"); code != 0 || !strings.Contains(text, "rolled back") {
		t.Fatalf("down --force: %d %v %q", code, err, text)
	}
	var verr *migrations.VersionError
	if err := migrations.Check(t.Context(), pool); !errors.As(err, &verr) || verr.Database != before-1 || verr.Build != migrations.Latest() {
		t.Fatalf("check after down: %v", err)
	}
	rdb := testsvc.Redis(t)
	cfg := engine.Config{KeyPrefix: testsvc.KeyPrefix(t)}
	e, err := engine.New(pool, rdb, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Ready(t.Context()); !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "migrate up") {
		t.Fatalf("engine ready on a database behind its build: %v", err)
	}
	if code, _, err := step("up"); code != 0 {
		t.Fatal(err)
	}
	if err := e.Ready(t.Context()); err != nil {
		t.Fatalf("ready after up: %v", err)
	}
}
