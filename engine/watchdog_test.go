package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// watchedTB is the testing.TB a watchdog under test reports to: its Errorf is kept, not
// reported, so that a test can read what the watchdog said; the rest is the test's own.
type watchedTB struct {
	testing.TB
	mu      sync.Mutex
	reports []string
}

func (w *watchedTB) Errorf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reports = append(w.reports, fmt.Sprintf(format, args...))
}

func (w *watchedTB) said() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.reports...)
}

// goroutineHeader is the first line of each goroutine's stack in a pprof debug=2 dump.
var goroutineHeader = regexp.MustCompile(`(?m)^goroutine \d+ \[`)

// checkDump fails t unless the watchdog said once that what went past its bound, with a
// stack for every goroutine (at least those named in frames: the waiting caller's and
// the one it waits for).
func checkDump(t *testing.T, said []string, what string, frames ...string) {
	t.Helper()
	if len(said) != 1 {
		t.Fatalf("the watchdog reported %d times, want once: %q", len(said), said)
	}
	dump := said[0]
	if !strings.Contains(dump, what+" has not returned") || !strings.Contains(dump, "every goroutine") {
		t.Fatalf("the watchdog's report does not name %q with every goroutine:\n%.2000s", what, dump)
	}
	n := len(goroutineHeader.FindAllString(dump, -1))
	for _, f := range frames {
		if !strings.Contains(dump, f) {
			t.Fatalf("the watchdog's dump (%d goroutines) has no frame %q:\n%s", n, f, dump)
		}
	}
	t.Logf("the watchdog reported %q past its bound with %d goroutines' stacks", what, n)
}

// TestWatchdogDumpsAConfirmationPastItsBound: the watchdog of the failover tests reports a confirmation that waits past
// its documented bound — its deadline plus Engine.confirmOverrun, plus watchSlack — with
// the stack of every goroutine, the caller's in Confirm and the batch's it waits for
// among them, once, by that bound; and says nothing of one that returns in time.
//   - hung: the batch hangs in its transaction (a hook that ignores every context, so
//     its confirmation waits in Engine.commit), watched by confirmWatched;
//   - frozen: the batch's COMMIT goes to a PostgreSQL server frozen with SIGSTOP, watched
//     with a bound shorter than the confirmation's (its deadline alone): the dump shows
//     the batch waiting on the frozen server; the confirmation itself still answers by
//     its documented bound, and confirmWatched's watchdog says nothing of it.
func TestWatchdogDumpsAConfirmationPastItsBound(t *testing.T) {
	t.Parallel()
	t.Run("hung", func(t *testing.T) {
		t.Parallel()
		v := newEnv(t, func(c *Config) { c.StatementTimeout = time.Second })
		v.show("wh", "A1")
		h := v.hold("wh", time.Minute, "", "A1")
		reached, hang := make(chan struct{}), make(chan struct{})
		var once sync.Once
		v.e.hooks.atCommit = func(context.Context, int) { once.Do(func() { close(reached); <-hang }) }
		tb := &watchedTB{TB: t}
		wd := testsvc.NewWatchdog(tb)
		const deadline = 500 * time.Millisecond
		bound := deadline + v.e.confirmOverrun() + watchSlack
		answered := make(chan error, 1)
		start := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			_, err := confirmWatched(ctx, wd, v.e, h, ConfirmOptions{})
			answered <- err
		}()
		select {
		case <-reached:
		case err := <-answered:
			t.Fatalf("setup: the confirmation answered %v before its batch reached its COMMIT", err)
		}
		waitFor(t, "the watchdog's report", bound+5*time.Second, func() bool { return len(tb.said()) > 0 })
		fired := time.Since(start)
		select {
		case err := <-answered:
			t.Fatalf("setup: the confirmation answered %v while its batch hung", err)
		default:
		}
		close(hang)
		err := <-answered
		if fired < bound {
			t.Fatalf("the watchdog reported after %v, before the confirmation's bound %v", fired, bound)
		}
		t.Logf("reported %v after the confirmation began (its bound: %v); the confirmation, let go, answered %v", fired.Round(time.Millisecond), bound, err)
		checkDump(t, tb.said(), "Confirm of A1", "engine.(*Engine).Confirm", "engine.(*Engine).commitBatch", "TestWatchdogDumpsAConfirmationPastItsBound")
	})
	t.Run("frozen", func(t *testing.T) {
		t.Parallel()
		pg := testsvc.StartPostgres(t)
		v := newEnvWith(t, migratedPool(t, pg.URL()+"&connect_timeout=2"), testsvc.Redis(t), shortReservations)
		v.show("wf", "A1")
		h := v.hold("wf", time.Minute, "", "A1")
		var once sync.Once
		v.e.hooks.atCommit = func(context.Context, int) { once.Do(pg.Freeze) } // the COMMIT goes to a frozen server
		thaw := sync.OnceFunc(pg.Thaw)
		t.Cleanup(thaw)
		short, documented := &watchedTB{TB: t}, &watchedTB{TB: t}
		wdShort, wdDocumented := testsvc.NewWatchdog(short), testsvc.NewWatchdog(documented)
		const deadline = time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		returned := wdShort.Watch("Confirm of A1", deadline)
		_, err := confirmWatched(ctx, wdDocumented, v.e, h, ConfirmOptions{})
		returned()
		took := time.Since(start)
		thaw()
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a confirmation whose COMMIT went to a frozen server: %v, want ErrUnavailable", err)
		}
		if bound := deadline + v.e.confirmOverrun(); took > bound {
			t.Fatalf("the confirmation answered after %v, past its documented bound %v", took, bound)
		}
		if s := documented.said(); len(s) != 0 {
			t.Fatalf("the watchdog at the documented bound reported a confirmation that answered in %v: %.2000s", took, s[0])
		}
		t.Logf("the confirmation answered %v after %v", err, took.Round(time.Millisecond))
		checkDump(t, short.said(), "Confirm of A1", "engine.(*Engine).Confirm", "engine.(*Engine).commitBatch", "pgconn")
	})
}
