package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// closeLiveness is how long the tests below give Close: its bound (closeTimeout) and
// room for a busy machine; waiting on a hung backend took 12 s.
const closeLiveness = closeTimeout + 2*time.Second

// closeIn runs e.Close and returns how long it took, failing the test when it has not
// returned within closeLiveness.
func closeIn(t *testing.T, e *Engine) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() { e.Close(); close(done) }()
	select {
	case <-done:
		return time.Since(start)
	case <-time.After(closeLiveness):
		t.Fatalf("Close has not returned after %v (its bound is %v)", closeLiveness, closeTimeout)
		return 0
	}
}

// TestCloseAfterSeatMapRead: Close right after a seat-map read (the show's view is in
// its blocking read of the feed) ends every piece of background work, the view's too,
// within its bound: it does not leave any running.
func TestCloseAfterSeatMapRead(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var mu sync.Mutex
	v := newEnv(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil)) })
	v.show("s1", "A1", "A2")
	if _, err := v.e.SeatMap(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the view is in its blocking read
	took := closeIn(t, v.e)
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "work still in flight") {
		t.Fatalf("Close left work running with both backends up:\n%s", logs.String())
	}
	t.Logf("Close took %v after a seat-map read", took)
}

// TestCloseWithBackendsHung: Close returns within its bound while calls are in flight
// and Redis and PostgreSQL hang (SIGSTOP): a confirmation in its batch's transaction, a
// hold, a seat-map view following the feed. The hold is answered by its own bound while
// Redis still hangs, with ErrUnavailable; the confirmation once PostgreSQL is back, never
// with a success that did not happen.
func TestCloseWithBackendsHung(t *testing.T) {
	pg := testsvc.StartPostgres(t)
	srv := testsvc.StartRedis(t)
	t.Cleanup(pg.Thaw) // before the pool closes and the server stops
	t.Cleanup(srv.Resume)
	calls := newScriptCalls()
	v := newEnvWith(t, migratedPool(t, pg.URL()), srv.Client(), func(c *Config) { c.scriptsSeen = calls.track })
	v.show("hung", "A1", "A2", "A3")
	if _, err := v.e.SeatMap(t.Context(), "hung"); err != nil {
		t.Fatal(err)
	}
	h := v.hold("hung", time.Minute, "alice", "A1")
	inBatch := make(chan struct{})
	var once sync.Once
	v.e.hooks.beforeCommit = func(context.Context) {
		once.Do(func() {
			pg.Freeze()
			srv.Pause()
			close(inBatch)
		})
	}
	confirmed, held := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := v.e.Confirm(context.Background(), h, ConfirmOptions{})
		confirmed <- err
	}()
	<-inBatch
	before := calls.started()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := v.e.Hold(ctx, HoldRequest{ShowID: "hung", SeatIDs: []string{"A2"}, HolderID: "bob"})
		held <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); calls.started() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hold's script call has not started")
		}
	}
	took := closeIn(t, v.e)
	t.Logf("Close took %v with both backends hung", took)
	select {
	case err := <-held:
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("hold in flight at Close, Redis hung: %v, want ErrUnavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the hold in flight at Close was not answered by its deadline while Redis hung")
	}
	srv.Resume()
	pg.Thaw()
	select {
	case err := <-confirmed:
		// The confirmation's COMMIT may have been sent before the freeze.
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Errorf("confirm in flight at Close: %v, want success or ErrUnavailable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the confirm in flight at Close was not answered")
	}
}
