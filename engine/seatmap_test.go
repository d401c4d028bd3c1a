package engine

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// scratch computes a show's seat states from nothing: claims in PostgreSQL, hold keys
// in Redis. seat -> status.
func (v *env) scratch(show string) map[string]SeatStatus {
	v.t.Helper()
	sh, err := v.e.show(v.t.Context(), show)
	if err != nil {
		v.t.Fatal(err)
	}
	claims := v.claims(show)
	out := map[string]SeatStatus{}
	for _, s := range sh.seats {
		switch {
		case claims[s] != "":
			out[s] = SeatSold
		case v.rdb.PTTL(v.t.Context(), sh.holdKeys[s]).Val() >= 0:
			out[s] = SeatHeld
		default:
			out[s] = SeatFree
		}
	}
	return out
}

// mapStates is a map's states by seat.
func mapStates(m *SeatMap) map[string]SeatStatus {
	out := map[string]SeatStatus{}
	for i, s := range m.Layout {
		out[s.ID] = m.States[i]
	}
	return out
}

// converges waits until e's seat map of show equals the from-scratch computation, and
// fails the test with both when it does not within 5 s.
func (v *env) converges(e *Engine, show string) *SeatMap {
	v.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := e.SeatMap(v.t.Context(), show)
		if err != nil {
			v.t.Fatalf("SeatMap: %v", err)
		}
		want := v.scratch(show)
		got := mapStates(m)
		if maps.Equal(got, want) {
			return m
		}
		if time.Now().After(deadline) {
			for s := range want {
				if got[s] != want[s] {
					v.t.Errorf("seat %s: map says %s, scratch %s", s, got[s], want[s])
				}
			}
			v.t.Fatalf("the seat map (version %d, as of %v, stale %v) never matched the database and Redis", m.Version, m.AsOf, m.Stale)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSeatMapMatchesScratch: after a random mixed workload across two engines — holds,
// extends, releases, confirmations, cancellations, expiries — each engine's seat map
// equals a from-scratch computation, and Seats agrees with it.
func TestSeatMapMatchesScratch(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 1000 })
	twin := v.twin()
	seats := seatNames(60)
	v.show("mix", seats...)
	engines := []*Engine{v.e, twin}
	for _, e := range engines { // start watching before the workload
		if _, err := e.SeatMap(t.Context(), "mix"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(t.Context())
	var readers sync.WaitGroup
	for _, e := range engines {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var last uint64
			for ctx.Err() == nil {
				m, err := e.SeatMap(ctx, "mix")
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("SeatMap during the workload: %v", err)
					}
					return
				}
				if m.Version < last {
					t.Errorf("version went back from %d to %d", last, m.Version)
				}
				last = m.Version
				time.Sleep(time.Millisecond)
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			e := engines[w%2]
			for range 40 {
				n := 1 + rng.IntN(3)
				pick := make([]string, 0, n)
				for _, i := range rng.Perm(len(seats))[:n] {
					pick = append(pick, seats[i])
				}
				ttl := time.Duration(30+rng.IntN(300)) * time.Millisecond
				if rng.IntN(3) == 0 {
					ttl = time.Minute
				}
				h, err := e.Hold(t.Context(), HoldRequest{ShowID: "mix", SeatIDs: pick, TTL: ttl})
				if err != nil {
					if !errors.Is(err, ErrSeatsUnavailable) {
						t.Errorf("hold: %v", err)
					}
					continue
				}
				other := engines[rng.IntN(2)]
				switch rng.IntN(5) {
				case 0:
					_, _ = other.Extend(t.Context(), h, time.Duration(50+rng.IntN(500))*time.Millisecond)
				case 1:
					_ = other.Release(t.Context(), h)
				case 2, 3:
					b, err := other.Confirm(t.Context(), h, ConfirmOptions{})
					if err == nil && rng.IntN(3) == 0 {
						if err := engines[rng.IntN(2)].Cancel(t.Context(), b.ID); err != nil {
							t.Errorf("cancel: %v", err)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	stop()
	readers.Wait()
	// Let every short hold expire, then both maps must match from scratch.
	time.Sleep(600 * time.Millisecond)
	for _, e := range engines {
		m := v.converges(e, "mix")
		states, err := e.Seats(t.Context(), "mix")
		if err != nil {
			t.Fatal(err)
		}
		byID := mapStates(m)
		for i, s := range states {
			if i > 0 && states[i-1].SeatID >= s.SeatID {
				t.Fatalf("Seats not sorted at %d", i)
			}
			if byID[s.SeatID] != s.Status || (s.Status == SeatHeld) != (s.ExpiresAt != nil) {
				t.Fatalf("Seats says %s %s (expiry %v), the map %s", s.SeatID, s.Status, s.ExpiresAt, byID[s.SeatID])
			}
		}
	}
	if v.doubleBookings() != 0 {
		t.Fatal("double booking")
	}
}

// TestSeatMapReadsOwnWrites: a read after a write through the same engine sees it,
// with the hold's expiry, with no wait by the caller; another engine's map follows.
func TestSeatMapReadsOwnWrites(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	twin := v.twin()
	v.show("own", seatNames(4)...)
	for _, e := range []*Engine{v.e, twin} {
		if _, err := e.SeatMap(t.Context(), "own"); err != nil {
			t.Fatal(err)
		}
	}
	h := v.hold("own", time.Minute, "", "S001")
	m, err := v.e.SeatMap(t.Context(), "own")
	if err != nil {
		t.Fatal(err)
	}
	i := indexOf(m, "S001")
	if m.States[i] != SeatHeld || !m.Expires[i].Equal(h.ExpiresAt) {
		t.Fatalf("own hold reads %s until %v, want held until %v", m.States[i], m.Expires[i], h.ExpiresAt)
	}
	if m.Stale || time.Since(m.AsOf) > time.Second {
		t.Fatalf("fresh map says stale %v as of %v", m.Stale, m.AsOf)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := v.e.SeatMap(t.Context(), "own"); m.States[i] != SeatSold {
		t.Fatalf("after confirm the map says %s", m.States[i])
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if m, _ := v.e.SeatMap(t.Context(), "own"); m.States[i] != SeatFree {
		t.Fatalf("after cancel the map says %s", m.States[i])
	}
	v.converges(twin, "own")
}

func indexOf(m *SeatMap, seat string) int {
	for i, s := range m.Layout {
		if s.ID == seat {
			return i
		}
	}
	return -1
}

// TestSeatMapAppliesExpiries: a hold shows held until its expiry and free after it,
// with no feed entry and no read of Redis (the view applies expiries itself).
func TestSeatMapAppliesExpiries(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("exp", seatNames(3)...)
	if _, err := v.e.SeatMap(t.Context(), "exp"); err != nil {
		t.Fatal(err)
	}
	h := v.hold("exp", 300*time.Millisecond, "", "S000", "S002")
	for {
		m, err := v.e.SeatMap(t.Context(), "exp")
		if err != nil {
			t.Fatal(err)
		}
		st := m.States[indexOf(m, "S000")]
		now := time.Now()
		if st == SeatFree {
			if now.Before(h.ExpiresAt) {
				t.Fatalf("free at %v, before the hold's expiry %v", now, h.ExpiresAt)
			}
			if m.States[indexOf(m, "S002")] != SeatFree {
				t.Fatal("one seat of the expired hold still held")
			}
			break
		}
		if st != SeatHeld {
			t.Fatalf("state %s", st)
		}
		if now.After(h.ExpiresAt.Add(5 * time.Second)) {
			t.Fatal("the expired hold never showed free")
		}
		time.Sleep(5 * time.Millisecond)
	}
	v.converges(v.e, "exp")
}

// TestSeatMapFeedGaps: a gap in the feed — entries trimmed past the reader, Redis
// losing everything (FLUSHALL, a restart) — is detected and the map rebuilt: never a
// wrong state kept silently.
func TestSeatMapFeedGaps(t *testing.T) {
	t.Parallel()
	t.Run("trimmed past the reader", func(t *testing.T) {
		t.Parallel()
		var paused sync.Mutex
		v := newEnv(t, func(*Config) {})
		v.e.hooks.beforeFeedRead = func(context.Context, string) { paused.Lock(); paused.Unlock() }
		twin := v.twin()
		v.show("trim", seatNames(10)...)
		if _, err := v.e.SeatMap(t.Context(), "trim"); err != nil {
			t.Fatal(err)
		}
		before := testutil.ToFloat64(v.e.m.seatMapRebuilds)
		paused.Lock()
		for _, s := range []string{"S001", "S002", "S003"} {
			if _, err := twin.Hold(t.Context(), HoldRequest{ShowID: "trim", SeatIDs: []string{s}, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		sh, _ := v.e.show(t.Context(), "trim")
		if err := v.rdb.XTrimMaxLen(t.Context(), sh.k.feed(), 0).Err(); err != nil {
			t.Fatal(err)
		}
		paused.Unlock()
		m := v.converges(v.e, "trim")
		if got := testutil.ToFloat64(v.e.m.seatMapRebuilds); got <= before {
			t.Fatalf("no rebuild after the feed was trimmed past the reader (%v)", got)
		}
		if m.States[indexOf(m, "S002")] != SeatHeld {
			t.Fatal("a hold made while the reader was behind is missing")
		}
	})
	for _, how := range []string{"flushall", "restart"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			v, srv := privateEnv(t)
			v.show("lost", seatNames(6)...)
			v.sell("lost", "S000")
			v.hold("lost", time.Minute, "", "S001")
			if m := v.converges(v.e, "lost"); m.States[indexOf(m, "S001")] != SeatHeld {
				t.Fatal("hold not in the map")
			}
			if how == "flushall" {
				if err := v.rdb.FlushAll(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				srv.Restart()
			}
			// The hold is gone with Redis's data; the sale is not (PostgreSQL).
			m := v.converges(v.e, "lost")
			if m.States[indexOf(m, "S001")] != SeatFree || m.States[indexOf(m, "S000")] != SeatSold {
				t.Fatalf("after the loss: S000 %s, S001 %s", m.States[indexOf(m, "S000")], m.States[indexOf(m, "S001")])
			}
			// And the map follows the new feed.
			v.hold("lost", time.Minute, "", "S004")
			v.converges(v.e, "lost")
		})
	}
}

// TestSeatMapStaleWhenRedisDown: with Redis stopped the map keeps answering what it
// knew, marked stale, its AsOf no longer moving; it recovers when Redis is back.
func TestSeatMapStaleWhenRedisDown(t *testing.T) {
	t.Parallel()
	v, srv := privateEnv(t)
	v.show("down", seatNames(4)...)
	v.converges(v.e, "down")
	srv.Stop()
	var m *SeatMap
	deadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		m, err = v.e.SeatMap(t.Context(), "down")
		if err != nil {
			t.Fatalf("SeatMap with Redis down: %v (want the stale map)", err)
		}
		if m.Stale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the map never said it was stale with Redis down")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if time.Since(m.AsOf) < time.Second {
		t.Fatalf("stale map as of %v, which is now", m.AsOf)
	}
	srv.Restart() // back, empty
	deadline = time.Now().Add(15 * time.Second)
	for m.Stale {
		if time.Now().After(deadline) {
			t.Fatal("the map stayed stale after Redis came back")
		}
		time.Sleep(50 * time.Millisecond)
		m, _ = v.e.SeatMap(t.Context(), "down")
	}
}

// TestWatchSeatMap: a watch delivers each change in version order; it resumes after a
// version it was given; a watcher that stops reading never holds up the engine and gets
// a snapshot once it reads again.
func TestWatchSeatMap(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 1000 })
	twin := v.twin()
	seats := seatNames(300)
	v.show("w", seats...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := v.e.WatchSeatMap(ctx, "w", 0)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Snapshot == nil || len(first.Snapshot.States) != 300 {
		t.Fatalf("first event %+v, want a snapshot of 300 seats", first)
	}
	h, err := twin.Hold(t.Context(), HoldRequest{ShowID: "w", SeatIDs: []string{"S010", "S011"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SeatStatus{}
	version := first.Version
	next := func() SeatMapEvent {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Version <= version {
				t.Fatalf("version %d after %d", ev.Version, version)
			}
			version = ev.Version
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5 s")
		}
		return SeatMapEvent{}
	}
	for len(got) < 2 {
		for _, c := range next().Changes {
			got[c.SeatID] = c.Status
		}
	}
	if got["S010"] != SeatHeld || got["S011"] != SeatHeld {
		t.Fatalf("changes %v", got)
	}
	held := version
	if err := twin.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if ev := next(); len(ev.Changes) != 2 || ev.Changes[0].Status != SeatFree {
		t.Fatalf("release event %+v", ev)
	}
	// Resume after the hold's version: the release again, no snapshot.
	ctx2, cancel2 := context.WithCancel(t.Context())
	ch2, err := v.e.WatchSeatMap(ctx2, "w", held)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch2; ev.Snapshot != nil || ev.Version != version || ev.Changes[0].Status != SeatFree {
		t.Fatalf("resumed watch started with %+v", ev)
	}
	cancel2()
	for range ch2 { // closed when its context ends
	}
	// A watcher that stops reading: the engine goes on (each hold answers at once),
	// and when the watcher reads again it is told to start over.
	start := time.Now()
	for i := 20; i < 20+3*watchBuffer; i++ {
		if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "w", SeatIDs: []string{seats[i]}, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.e.SeatMap(t.Context(), "w"); err != nil { // each read waits for its own write to be in
			t.Fatal(err)
		}
	}
	t.Logf("%d holds and reads with a stalled watcher: %v", 3*watchBuffer, time.Since(start))
	var snap *SeatMap
	for snap == nil {
		ev := next()
		snap = ev.Snapshot
	}
	m, _ := v.e.SeatMap(t.Context(), "w")
	for {
		if maps.Equal(mapStates(snap), mapStates(m)) {
			break
		}
		ev := next()
		for _, c := range ev.Changes {
			snap = patched(snap, c)
		}
		m, _ = v.e.SeatMap(t.Context(), "w")
	}
	cancel()
	for range ch {
	}
}

// patched returns m with one change applied (a copy).
func patched(m *SeatMap, c SeatChange) *SeatMap {
	out := *m
	out.States = append([]SeatStatus(nil), m.States...)
	out.States[c.Index] = c.Status
	return &out
}

// TestSeatMapBadInput: unknown shows and malformed ids are refused and start nothing.
func TestSeatMapBadInput(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if _, err := v.e.SeatMap(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown show: %v", err)
	}
	if _, err := v.e.SeatMap(t.Context(), "a:b"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := v.e.WatchSeatMap(t.Context(), "nope", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("watch unknown show: %v", err)
	}
	v.e.views.mu.RLock()
	n := len(v.e.views.m)
	v.e.views.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d views started by refused calls", n)
	}
}

// TestFeedIsBounded: a show's feed stays near its length bound however many changes
// it sees, and a retried hold writes no second entry.
func TestFeedIsBounded(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 1000 })
	seats := seatNames(6000)
	v.show("big", seats...)
	sh, _ := v.e.show(t.Context(), "big")
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(seats); i += 16 {
				// An expiry of each hold's own: holds of one expiry that go to Redis
				// together write one entry (group.lua).
				ttl := time.Minute + time.Duration(i)*time.Millisecond
				if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "big", SeatIDs: []string{seats[i]}, TTL: ttl}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	n, err := v.rdb.XLen(t.Context(), sh.k.feed()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n < 4096 || n > 4096+200 {
		t.Fatalf("feed length %d after 6000 changes, want about 4096", n)
	}
	entries, _ := v.rdb.Get(t.Context(), sh.k.feedN()).Int64()
	if entries != 6000 {
		t.Fatalf("feed counter %d, want 6000", entries)
	}
	if mem, err := v.rdb.MemoryUsage(t.Context(), sh.k.feed()).Result(); err == nil {
		t.Logf("feed of %d entries: %d bytes", n, mem)
	}
}

// TestWatchSeatMapMergesForASlowWatcher: a watcher that stops reading is not waited
// for; when it reads again, what it missed comes merged into one event (each seat
// once, in its latest state) while that is smaller than a snapshot, and as a snapshot
// past that (an eighth of the show's seats changed). Either way its map is the
// engine's once it has read them.
func TestWatchSeatMapMergesForASlowWatcher(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 1000 })
	seats := seatNames(2000)
	v.show("slow", seats...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := v.e.WatchSeatMap(ctx, "slow", 0)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Snapshot == nil {
		t.Fatalf("first event %+v, want a snapshot", first)
	}
	mine := first.Snapshot
	// catchUp reads what is waiting and applies it; it returns how many events it
	// read, how many of them were merged and whether one was a snapshot. Every event of
	// the holds was handed to the watcher already (a read of the map returns once its
	// own write's batch was published, and the view hands it to its watchers before
	// that); its forwarder passes them on at once: it has passed all once none came
	// for a while.
	catchUp := func() (n, merged int, snapshot bool) {
		for {
			select {
			case ev := <-ch:
				n++
				if ev.Merged > 1 {
					merged++
				}
				if ev.Snapshot != nil {
					snapshot, mine = true, ev.Snapshot
				}
				for _, c := range ev.Changes {
					mine = patched(mine, c)
				}
			case <-time.After(200 * time.Millisecond):
				return n, merged, snapshot
			}
		}
	}
	// hold takes seats [from, to) one hold each, every hold its own event (each read
	// waits for its own write), while the watcher does not read.
	hold := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "slow", SeatIDs: []string{seats[i]}, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := v.e.SeatMap(t.Context(), "slow"); err != nil {
				t.Fatal(err)
			}
		}
	}
	sameAsEngine := func() {
		t.Helper()
		m, err := v.e.SeatMap(t.Context(), "slow")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(mapStates(mine), mapStates(m)) {
			t.Fatal("the watcher's map is not the engine's after reading what was waiting")
		}
	}
	// 3 × watchBuffer changes: fewer than an eighth of 2,000 seats.
	hold(0, 3*watchBuffer)
	n, merged, snapshot := catchUp()
	if snapshot || merged == 0 || n > watchBuffer {
		t.Fatalf("after %d changes missed: %d events, %d merged, snapshot %v; want merged changes, no snapshot", 3*watchBuffer, n, merged, snapshot)
	}
	sameAsEngine()
	// 400 more: past an eighth (what the watcher's channel holds aside), a snapshot is smaller.
	hold(3*watchBuffer, 3*watchBuffer+400)
	if _, _, snapshot = catchUp(); !snapshot {
		t.Fatal("after 400 changes missed (more than an eighth of the seats), no snapshot")
	}
	sameAsEngine()
}

// TestNewWatchersShareTheLastSnapshot: a watcher that connects within snapshotReuse of
// the last map built starts from that map, also when more batches were published since
// than its buffer holds (a busy sale): they come as one merged event, and the map they
// give is the view's. A reconnect storm on a busy show then builds a snapshot a second,
// not one per connect.
func TestNewWatchersShareTheLastSnapshot(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := seatNames(2000)
	v.show("share", seats...)
	ch, err := v.e.WatchSeatMap(t.Context(), "share", 0)
	if err != nil {
		t.Fatal(err)
	}
	built := (<-ch).Snapshot
	v.e.views.mu.RLock()
	vw := v.e.views.m["share"]
	v.e.views.mu.RUnlock()
	// 3 × watchBuffer batches, a held seat each, published as the feed's entries are.
	const batches = 3 * watchBuffer
	vw.mu.Lock()
	x := strconv.FormatInt(vw.redisNow()+time.Minute.Milliseconds(), 10)
	for i := range batches {
		vw.apply(map[string]any{"h": seats[i], "x": x})
		vw.publish()
	}
	vw.mu.Unlock()

	late, err := v.e.WatchSeatMap(t.Context(), "share", 0)
	if err != nil {
		t.Fatal(err)
	}
	first, rest := <-late, <-late
	if first.Snapshot != built {
		t.Fatalf("the new watcher's first event is another snapshot than the one built %v ago", time.Since(vw.lastSnap.at))
	}
	if rest.Snapshot != nil || len(rest.Changes) != batches || rest.Merged != batches {
		t.Fatalf("then: snapshot %v, %d changes standing for %d events; want the %d batches merged", rest.Snapshot != nil, len(rest.Changes), rest.Merged, batches)
	}
	mine := first.Snapshot
	for _, c := range rest.Changes {
		mine = patched(mine, c)
	}
	m, err := v.e.SeatMap(t.Context(), "share")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(mapStates(mine), mapStates(m)) {
		t.Fatal("the new watcher's map is not the view's")
	}
}

// TestWatcherNeverGetsAnOlderState: watchers that receive as fast as they can while the
// view publishes faster (800 batches at once) fall behind and get merged events, never a
// state older than one they have: each seat is sold in one batch and freed in the next,
// and every watcher's map ends as the view's, every seat free, its versions rising, a
// snapshot first. (The view used to merge a full channel's events by draining it while
// the watcher was receiving from it: the watcher could get a later event, then the
// earlier one inside the merged event, and show a freed seat sold.)
func TestWatcherNeverGetsAnOlderState(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := seatNames(4000)
	v.show("dr", seats...)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := v.e.SeatMap(ctx, "dr"); err != nil {
		t.Fatal(err)
	}
	v.e.views.mu.RLock()
	vw := v.e.views.m["dr"]
	v.e.views.mu.RUnlock()
	const watchers = 8
	type st struct {
		mu       sync.Mutex
		evs      []SeatMapEvent
		mine     *SeatMap
		ver      uint64
		backward int
	}
	sts := make([]*st, watchers)
	var wg sync.WaitGroup
	for i := range sts {
		ch, err := v.e.WatchSeatMap(ctx, "dr", 0)
		if err != nil {
			t.Fatal(err)
		}
		s := &st{}
		sts[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			var evs []SeatMapEvent
			for ev := range ch {
				evs = append(evs, ev) // receive as fast as an idle stream does
			}
			s.mu.Lock()
			s.evs = evs
			s.mu.Unlock()
		}()
	}
	for k := 0; k < 400; k++ { // 400 seats, 800 batches: under an eighth of 4,000
		vw.mu.Lock()
		vw.apply(map[string]any{"s": seats[k]})
		vw.publish()
		vw.apply(map[string]any{"u": seats[k]})
		vw.publish()
		vw.mu.Unlock()
	}
	vw.mu.Lock()
	want := mapStates(vw.snapshotLocked())
	ver := vw.version
	vw.mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	cancel()
	wg.Wait()
	for i, s := range sts {
		s.mu.Lock()
		gaps, early := 0, 0
		for _, ev := range s.evs {
			if ev.Snapshot == nil && s.mine == nil {
				early++ // a changes event before any snapshot: nothing to apply it to
				s.ver = ev.Version
				continue
			}
			if ev.Snapshot != nil {
				s.mine = ev.Snapshot
			} else if s.ver != 0 && ev.Version != s.ver+uint64(max(ev.Merged, 1)) {
				gaps++
			}
			if ev.Version < s.ver {
				s.backward++
			}
			st := map[int]SeatStatus{}
			for _, c := range ev.Changes {
				st[c.Index] = c.Status
			}
			if len(st) > 0 {
				m := *s.mine
				m.States = append([]SeatStatus(nil), s.mine.States...)
				for i, x := range st {
					m.States[i] = x
				}
				s.mine = &m
			}
			s.ver = ev.Version
		}
		t.Logf("watcher %d: %d events, %d whose version is not the previous + merged, %d changes before its first snapshot", i, len(s.evs), gaps, early)
		wrong := 0
		got := mapStates(s.mine)
		for id, w := range want {
			if got[id] != w {
				wrong++
			}
		}
		if wrong > 0 || s.backward > 0 || gaps > 0 || early > 0 {
			t.Errorf("watcher %d at version %d (view %d): %d seats differ from the view's map, %d events went back in version", i, s.ver, ver, wrong, s.backward)
		}
		s.mu.Unlock()
	}
}
