package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestSharedReadKeepsEachCallersDeadline: the first Hold of a show on an engine reads
// its inventory (table seats) and its rules (table shows) once for every caller at that
// moment. Another session locks the table, so that the read hangs. A first caller
// without a deadline starts it; 20 holds with a 500 ms deadline each leave at their
// deadline with ErrUnavailable, not when the read ends; the read ends by its own bound
// (StatementTimeout; for the inventory inventoryReadMin at least), so the caller without a deadline has an answer too, while the
// lock is still held; once it is released holds work.
func TestSharedReadKeepsEachCallersDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ read, table string }{{"rules", "shows"}, {"inventory", "seats"}} {
		t.Run(tc.read, func(t *testing.T) {
			t.Parallel()
			const bound = time.Second
			v := newEnv(t, func(c *Config) { c.StatementTimeout = bound })
			readBound := bound
			if tc.read == "inventory" {
				readBound = max(bound, inventoryReadMin)
			}
			seats := seatNames(30)
			v.show("sr", seats...)
			e := v.twin() // an engine that has read nothing of the show
			if tc.read == "rules" {
				if _, err := e.show(t.Context(), "sr"); err != nil { // the inventory, not the rules
					t.Fatal(err)
				}
			}
			tx, err := v.pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if _, err := tx.Exec(t.Context(), "LOCK TABLE "+tc.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				err  error
				took time.Duration
			}
			hold := func(ctx context.Context, seat string) answer {
				start := time.Now()
				_, err := e.Hold(ctx, HoldRequest{ShowID: "sr", SeatIDs: []string{seat}, HolderID: "h-" + seat})
				return answer{err, time.Since(start)}
			}
			first := make(chan answer, 1)
			go func() { first <- hold(context.WithoutCancel(t.Context()), seats[0]) }()
			waitFor(t, "the first caller's read waits for the lock", 5*time.Second, func() bool {
				return v.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") >= 1
			})

			const callers, deadline = 20, 500 * time.Millisecond
			answers := make(chan answer, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), deadline)
					defer cancel()
					answers <- hold(ctx, seats[1+i])
				}()
			}
			var slowest time.Duration
			for range callers {
				select {
				case a := <-answers:
					slowest = max(slowest, a.took)
					if !errors.Is(a.err, ErrUnavailable) {
						t.Errorf("a hold with a %v deadline behind the shared read: %v, want ErrUnavailable", deadline, a.err)
					}
					if a.took > deadline+time.Second {
						t.Errorf("a hold with a %v deadline answered after %v", deadline, a.took)
					}
				case <-time.After(deadline + 4*time.Second):
					t.Fatalf("a hold with a %v deadline has not answered after %v: it waits for the shared read", deadline, deadline+4*time.Second)
				}
			}
			wg.Wait()
			t.Logf("%d holds with a %v deadline: the slowest answered after %v", callers, deadline, slowest)

			// The shared read ends by its own bound: the caller without a deadline has
			// its answer while the lock is still held (the rules unread, Redis's copy
			// decides and the hold is granted; the inventory unread, ErrUnavailable).
			select {
			case a := <-first:
				t.Logf("the caller without a deadline: %v after %v (the shared read's bound %v)", a.err, a.took, readBound)
				if a.took > readBound+3*time.Second {
					t.Errorf("the caller without a deadline answered after %v, the shared read's bound is %v", a.took, readBound)
				}
				if tc.read == "rules" && a.err != nil {
					t.Errorf("the hold whose rules could not be read: %v, want it granted (Redis's copy of the rules decides)", a.err)
				}
				if tc.read == "inventory" && !errors.Is(a.err, ErrUnavailable) {
					t.Errorf("the hold whose inventory could not be read: %v, want ErrUnavailable", a.err)
				}
			case <-time.After(readBound + 5*time.Second):
				t.Fatalf("the caller without a deadline has not answered %v after the shared read began (its bound is %v)", readBound+5*time.Second, readBound)
			}
			if err := tx.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if a := hold(ctx, seats[len(seats)-1]); a.err != nil {
				t.Fatalf("a hold once the lock is gone: %v", a.err)
			}
		})
	}
}

// TestPolledSeatMapKeepsEachCallersDeadline: a show past the watched-shows pool is
// served from a map built for all its readers at once. Another session locks
// seat_claims, so that the build hangs; a reader without a deadline starts it, and 20
// readers with a 500 ms deadline each leave at their deadline with ErrUnavailable;
// once the lock is released the map is read.
func TestPolledSeatMapKeepsEachCallersDeadline(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxWatchedShows = 1 })
	v.show("watched", seatNames(5)...)
	v.show("polled", seatNames(5)...)
	wctx, stop := context.WithCancel(t.Context())
	defer stop()
	if _, err := v.e.WatchSeatMap(wctx, "watched", 0); err != nil { // takes the one slot
		t.Fatal(err)
	}
	if _, err := v.e.show(t.Context(), "polled"); err != nil {
		t.Fatal(err)
	}
	tx, err := v.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), "LOCK TABLE seat_claims IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := v.e.SeatMap(context.WithoutCancel(t.Context()), "polled")
		first <- err
	}()
	waitFor(t, "the first reader's build waits for the lock", 5*time.Second, func() bool {
		return v.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") >= 1
	})
	const readers, deadline = 20, 500 * time.Millisecond
	errs := make(chan error, readers)
	for range readers {
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), deadline)
			defer cancel()
			start := time.Now()
			_, err := v.e.SeatMap(ctx, "polled")
			if took := time.Since(start); took > deadline+time.Second {
				err = fmt.Errorf("answered after %v (%v)", took, err)
			}
			errs <- err
		}()
	}
	for range readers {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("a read with a %v deadline behind the shared build: %v, want ErrUnavailable within it", deadline, err)
			}
		case <-time.After(deadline + 4*time.Second):
			t.Fatalf("a read with a %v deadline has not answered after %v: it waits for the shared build", deadline, deadline+4*time.Second)
		}
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the reader without a deadline, once the lock is gone: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := v.e.SeatMap(ctx, "polled"); err != nil {
		t.Fatalf("a read once the lock is gone: %v", err)
	}
}

// TestUnknownSeatRereadIsSharedAndBounded (on the re-read of a show's
// rules that a hold of a seat the engine does not know makes, to learn whether the show
// was replaced): the table shows is locked, so that the read hangs. 20 such holds at once
// without a deadline make one read between them (beside the engine's background refresh
// of the rules), and it ends by its own bound
// (StatementTimeout): each answers ErrNotFound by then, while the lock is still held.
func TestUnknownSeatRereadIsSharedAndBounded(t *testing.T) {
	t.Parallel()
	const bound = time.Second
	v := newEnv(t, func(c *Config) { c.StatementTimeout = bound })
	v.show("us", seatNames(3)...)
	v.hold("us", time.Minute, "", seatNames(3)[0])  // the show's inventory and rules read
	time.Sleep(rulesRefresh + 100*time.Millisecond) // the rules are due a re-read
	tx, err := v.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), "LOCK TABLE shows IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const callers = 20
	type answer struct {
		err  error
		took time.Duration
	}
	answers := make(chan answer, callers)
	for i := range callers {
		go func() {
			start := time.Now()
			_, err := v.e.Hold(context.WithoutCancel(t.Context()), HoldRequest{ShowID: "us", SeatIDs: []string{fmt.Sprintf("NOPE%d", i)}})
			answers <- answer{err, time.Since(start)}
		}()
	}
	waitFor(t, "a re-read waits for the lock", 5*time.Second, func() bool {
		return v.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") >= 1
	})
	time.Sleep(200 * time.Millisecond)
	// One read for the callers, and the engine's own background refresh of the rules
	// (refreshRules, one per show), which the first hold started.
	if n := v.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"); n > 2 {
		t.Errorf("%d reads of the rules wait for the lock for %d holds of unknown seats, want one between them (and the background refresh)", n, callers)
	}
	var slowest time.Duration
	for range callers {
		select {
		case a := <-answers:
			slowest = max(slowest, a.took)
			if !errors.Is(a.err, ErrNotFound) {
				t.Errorf("a hold of an unknown seat while the rules cannot be read: %v, want ErrNotFound", a.err)
			}
		case <-time.After(bound + 4*time.Second):
			t.Fatalf("a hold of an unknown seat has not answered %v after the read began (its bound is %v)", bound+4*time.Second, bound)
		}
	}
	t.Logf("%d holds of unknown seats answered, the slowest after %v (the read's bound %v)", callers, slowest, bound)
}
