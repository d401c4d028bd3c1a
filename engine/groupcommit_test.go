package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupCommitIsolatesEachConfirmation: one batch carries confirmations that commit,
// one whose fence has seen its generation (re-issued and confirmed in a later batch),
// one whose seat is claimed, one whose hold is gone by the batch's Redis check, two with
// the same idempotency key, and one whose caller gives up while the batch runs. Each
// gets the answer it would get alone, and only the right ones are written — whether
// the batch decides its confirmations from its reads or isolates each in a savepoint.
func TestGroupCommitIsolatesEachConfirmation(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, testGroupCommitIsolatesEachConfirmation)
}

// forEachIsolation runs test as parallel subtests, once for each way a batch isolates
// its confirmations (Config.ConfirmSavepoints off and on).
func forEachIsolation(t *testing.T, test func(t *testing.T, savepoints bool)) {
	for _, sp := range []bool{false, true} {
		t.Run(map[bool]string{false: "decided", true: "savepoints"}[sp], func(t *testing.T) {
			t.Parallel()
			test(t, sp)
		})
	}
}

func testGroupCommitIsolatesEachConfirmation(t *testing.T, savepoints bool) {
	v := newEnv(t, func(c *Config) { c.ConfirmConns, c.ConfirmSavepoints = 1, savepoints })
	v.show("g", seatNames(12)...)
	ctx := t.Context()

	first := v.hold("g", time.Minute, "", "S000") // the batch that keeps the committer busy
	var ok []Hold
	for _, s := range []string{"S001", "S002", "S003", "S004"} {
		ok = append(ok, v.hold("g", time.Minute, "", s))
	}
	stale := v.hold("g", time.Minute, "", "S005")
	claimed := v.hold("g", time.Minute, "", "S006")
	lost := v.hold("g", time.Minute, "", "S007")
	dup := v.hold("g", time.Minute, "dee", "S008", "S009")
	leaver := v.hold("g", time.Minute, "", "S010")
	// The database has seen a larger generation for S005, and S006 is claimed by a
	// booking of generation 1 (below the hold's, so the claim is what refuses it).
	if _, err := v.pool.Exec(ctx, "UPDATE seat_fences SET generation = 1000000000 WHERE show_id = 'g' AND seat_id = 'S005'"); err != nil {
		t.Fatal(err)
	}
	if err := sqlBook(ctx, v.pool, bookingParams("g", 1, "", "S006")); err != nil {
		t.Fatal(err)
	}

	const queued = 4 + 1 + 1 + 1 + 2 + 1 // the second batch
	leaverCtx, leave := context.WithCancel(ctx)
	defer leave()
	var batches sync.Mutex
	n := 0
	v.e.hooks.beforeCommit = func(context.Context) {
		batches.Lock()
		defer batches.Unlock()
		n++
		switch n {
		case 1: // hold the committer until every other confirmation waits in the queue
			for len(v.e.gc.queue) < queued {
				time.Sleep(time.Millisecond)
			}
			if err := v.twin().Release(ctx, lost); err != nil {
				t.Errorf("release: %v", err)
			}
		case 2: // the second batch has them all; one caller gives up now
			leave()
		}
	}
	type answer struct {
		b   Booking
		err error
	}
	confirm := func(ctx context.Context, h Hold, key string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			b, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: key})
			ch <- answer{b, err}
		}()
		return ch
	}
	firstAns := confirm(ctx, first, "")
	for sampleCount(t, v.e.m.confirmQueueWait) == 0 { // taken by the committer
		time.Sleep(time.Millisecond)
	}
	var okAns []chan answer
	for _, h := range ok {
		okAns = append(okAns, confirm(ctx, h, ""))
	}
	staleAns, claimedAns, lostAns := confirm(ctx, stale, ""), confirm(ctx, claimed, ""), confirm(ctx, lost, "")
	dupAns := []chan answer{confirm(ctx, dup, "k"), confirm(ctx, dup, "k")}
	leaverAns := confirm(leaverCtx, leaver, "")

	if a := <-firstAns; a.err != nil {
		t.Fatalf("first: %v", a.err)
	}
	for i, ch := range okAns {
		if a := <-ch; a.err != nil || a.b.Generation != ok[i].Generation {
			t.Errorf("ok %d: %+v %v", i, a.b, a.err)
		}
	}
	if a := <-staleAns; a.err != nil || a.b.Generation <= 1000000000 {
		t.Errorf("stale: %+v %v, want a booking under a re-issued generation", a.b, a.err)
	}
	var sue *SeatsUnavailableError
	if a := <-claimedAns; !errors.As(a.err, &sue) || len(sue.SeatIDs) != 1 || sue.SeatIDs[0] != "S006" {
		t.Errorf("claimed: %v, want S006 unavailable", a.err)
	}
	if a := <-lostAns; !errors.Is(a.err, ErrHoldLost) {
		t.Errorf("lost: %v, want ErrHoldLost", a.err)
	}
	d1, d2 := <-dupAns[0], <-dupAns[1]
	if d1.err != nil || d2.err != nil || d1.b.ID != d2.b.ID || d1.b.Replayed == d2.b.Replayed {
		t.Errorf("same key twice: %+v %v / %+v %v, want one booking, one of them replayed", d1.b, d1.err, d2.b, d2.err)
	}
	if a := <-leaverAns; a.err != nil {
		t.Errorf("the caller that left after its batch took it: %v, want its booking", a.err)
	}
	v.e.hooks.beforeCommit = nil

	// What the database has: 1 + 4 + stale + dup + leaver, and the SQL booking of S006.
	if got := v.bookings("g"); got != 1+4+1+1+1+1 {
		t.Errorf("%d bookings", got)
	}
	if d := v.doubleBookings(); d != 0 {
		t.Errorf("%d double bookings", d)
	}
	if c := v.claims("g"); c["S007"] != "" {
		t.Errorf("the lost hold's seat is claimed: %v", c)
	}
	// Two batches did the work of ten confirmations (three with the re-issue).
	if b := sampleCount(t, v.e.m.confirmBatchSize); b > 3 {
		t.Errorf("%d batches for %d confirmations: nothing was grouped", b, queued+1)
	}
	// The second batch wrote the sold markers of its six bookings (four, the key's one,
	// the leaver's) in one mark.lua call: one feed entry with all their seats.
	sh, err := v.e.show(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := v.rdb.XRange(ctx, sh.k.feed(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"S001", "S002", "S003", "S004", "S008", "S009", "S010"}
	found := false
	for _, en := range entries {
		sold, _ := en.Values["s"].(string)
		got := strings.Fields(sold)
		slices.Sort(got)
		found = found || slices.Equal(got, want)
	}
	if !found {
		t.Errorf("no feed entry sold the second batch's seats %v together: %v", want, entries)
	}
}

// TestGroupCommitUnderContention: every hold is confirmed three times at once, from two
// engines, with one idempotency key (a client retrying), and the holds' seats interleave
// (hold i has seats i, i+40, i+80), so the batches of both engines lock the same seats
// in every order the callers arrive in: no deadlock, no backend error, one booking per
// hold, and every caller gets that booking.
func TestGroupCommitUnderContention(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, testGroupCommitUnderContention)
}

func testGroupCommitUnderContention(t *testing.T, savepoints bool) {
	v := newEnv(t, func(c *Config) { c.ConfirmSavepoints = savepoints })
	engines := []*Engine{v.e, v.twin()}
	const holds = 40
	names := seatNames(3 * holds)
	v.show("c", names...)
	ctx := t.Context()
	hs := make([]Hold, holds)
	for i := range hs {
		hs[i] = v.hold("c", time.Minute, "", names[i+2*holds], names[i], names[i+holds])
	}
	var wg sync.WaitGroup
	got := make([][]Booking, holds)
	var mu sync.Mutex
	for i, h := range hs {
		for j := range 3 {
			wg.Go(func() {
				b, err := engines[(i+j)%2].Confirm(ctx, h, ConfirmOptions{IdempotencyKey: fmt.Sprintf("retry-%d", i)})
				if err != nil {
					t.Errorf("confirm %d/%d: %v", i, j, err)
					return
				}
				mu.Lock()
				got[i] = append(got[i], b)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for i, bs := range got {
		originals := 0
		for _, b := range bs {
			if b.ID != bs[0].ID {
				t.Errorf("hold %d: bookings %v and %v", i, b.ID, bs[0].ID)
			}
			if !b.Replayed {
				originals++
			}
		}
		if len(bs) == 3 && originals != 1 {
			t.Errorf("hold %d: %d answers not replayed, want 1", i, originals)
		}
	}
	if v.bookings("c") != holds || v.doubleBookings() != 0 {
		t.Fatalf("%d bookings, %d double, want %d, 0", v.bookings("c"), v.doubleBookings(), holds)
	}
}

// TestBatchWaitsForTheBatchInFlight: with no batch in flight a confirmation commits at
// once, whatever the sibling wait; a batch gathered while another is in flight takes
// the confirmations that arrive until that one ends, and commits them together
// (PostgreSQL's commit_delay and commit_siblings idea), not one batch each.
func TestBatchWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.ConfirmConns, c.siblingWait = 2, time.Minute })
	v.show("sw", seatNames(5)...)
	ctx := t.Context()
	var holds []Hold
	for i := range 5 {
		holds = append(holds, v.hold("sw", time.Minute, fmt.Sprint("h", i), fmt.Sprintf("S%03d", i)))
	}
	// Alone: nothing in flight, so no wait (a minute's would outlast this deadline).
	lone, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := v.e.Confirm(lone, holds[0], ConfirmOptions{}); err != nil {
		t.Fatalf("a lone confirmation on an idle engine: %v", err)
	}

	var mu sync.Mutex
	var sizes []int
	release := make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // before the engine closes: a failed test leaves no batch blocked
	var first atomic.Bool
	v.e.hooks.beforeCommit = func(context.Context) {
		if first.CompareAndSwap(false, true) {
			<-release // the first batch stays in flight until every other is queued
		}
	}
	v.e.hooks.atCommit = func(_ context.Context, n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}
	errs := make(chan error, 4)
	confirm := func(h Hold) {
		go func() { _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); errs <- err }()
	}
	confirm(holds[1])
	waitFor(t, "the first batch in flight", 10*time.Second, first.Load)
	for _, h := range holds[2:] {
		n := sampleCount(t, v.e.m.confirmQueueWait)
		confirm(h)
		waitFor(t, "the second committer gathering "+h.SeatIDs[0], 10*time.Second, func() bool {
			return sampleCount(t, v.e.m.confirmQueueWait) > n
		})
	}
	letGo()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sizes, []int{1, 3}) {
		t.Fatalf("batch sizes at COMMIT %v, want [1 3]: the batch in flight, then the three that came meanwhile together", sizes)
	}
}
