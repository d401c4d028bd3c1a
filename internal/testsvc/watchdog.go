package testsvc

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"
)

// Watchdog fails a test when a call it watches has not returned within its bound, and
// puts the stack of every goroutine in the test's log (runtime/pprof "goroutine",
// debug=2: each with how long it has waited), so that a hang explains itself the first
// time it happens. A call still hanging hangExit after that ends the test binary (a
// panic), so that a run of many does not wait for go test's timeout.
type Watchdog struct {
	t testing.TB

	mu     sync.Mutex
	ended  bool // the test has ended: log nothing more
	dumped bool // one dump per test: the first hang is the one to read
}

// hangExit is how long past its bound (and the dump) a call may go on hanging before
// the watchdog ends the test binary.
const hangExit = time.Minute

// NewWatchdog returns a watchdog for t.
func NewWatchdog(t testing.TB) *Watchdog {
	w := &Watchdog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
	})
	return w
}

// Watch starts watching a call named what, which must return within bound; call the
// function it returns when the call has returned.
func (w *Watchdog) Watch(what string, bound time.Duration) (returned func()) {
	start := time.Now()
	var mu sync.Mutex
	done := false
	var exit *time.Timer
	fire := time.AfterFunc(bound, func() {
		dump := w.fire(what, start, bound)
		mu.Lock()
		defer mu.Unlock()
		if !done {
			exit = time.AfterFunc(hangExit, func() {
				fmt.Fprintf(os.Stderr, "watchdog: %s still has not returned %v after it started\n%s", what, time.Since(start).Round(time.Millisecond), dump)
				panic(fmt.Sprintf("watchdog: %s hangs (every goroutine's stack is above)", what))
			})
		}
	})
	return func() {
		fire.Stop()
		mu.Lock()
		done = true
		if exit != nil {
			exit.Stop()
		}
		mu.Unlock()
	}
}

// fire fails the test for a call past its bound, with every goroutine's stack (the
// first time), and returns that dump.
func (w *Watchdog) fire(what string, start time.Time, bound time.Duration) string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	dump := b.String()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return dump
	}
	if w.dumped {
		w.t.Errorf("watchdog: %s has not returned %v after it started (its bound: %v)", what, time.Since(start).Round(time.Millisecond), bound)
		return dump
	}
	w.dumped = true
	w.t.Errorf("watchdog: %s has not returned %v after it started (its bound: %v); every goroutine:\n%s", what, time.Since(start).Round(time.Millisecond), bound, dump)
	if !testing.Verbose() {
		// A test that never ends never prints its log: the dump goes out now as well.
		fmt.Fprintf(os.Stderr, "watchdog: %s past its bound %v in %s; every goroutine:\n%s", what, bound, w.t.Name(), dump)
	}
	return dump
}
