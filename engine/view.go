package engine

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The seat-map view. Every engine keeps, for each show being read, the seat map in
// memory and keeps it current from the show's change feed: a Redis stream that the
// scripts which change seats (hold, extend, release, mark) append to, one entry per
// call, in the same atomic step as the change (internal/lua/common.lua). Hold expiries
// are not in the feed: the view knows each hold's expiry and applies it itself, by
// Redis's clock as it estimates it and, whatever that estimate, every hold that expired
// before the feed entry it stands at was written (see now): the map at a feed position
// has the same expiries on every engine, plus perhaps some later ones. A read
// costs no PostgreSQL query and no Redis command; the feed costs each engine one
// blocked XREAD per watched show.
//
// A full rebuild (the feed's position, then PostgreSQL's claims and each seat's hold
// TTL in Redis, then the feed from that position until it is caught up) happens when
// the engine starts watching a show, when the feed has a gap (an entry number skipped:
// trimmed past the reader, or Redis lost the feed — restart, failover, FLUSHALL), and
// on Resync. Feed entries replayed over a newer rebuild read converge, because each
// says a seat's new state and they are applied in order.

const (
	feedBlock = 2 * time.Second // how long one XREAD waits for entries
	// feedInterval is the shortest time between two feed reads while changes keep
	// coming: changes made meanwhile are read, applied and published together, so a
	// busy show gives its watchers at most 50 batches a second, each larger. With
	// many watchers it grows by feedIntervalPerWatch each (100 ms for 5,000): every
	// batch is one write per watcher, and fewer, larger batches keep the fan-out
	// within what the process can write.
	feedInterval         = 20 * time.Millisecond
	feedIntervalPerWatch = 20 * time.Microsecond
	feedCount            = 1000 // entries per XREAD
	ringBatches          = 4096 // change batches kept for WatchSeatMap resumes
	watchBuffer          = 64   // events a watcher may fall behind before it is resynced
	// watchChan is a watcher's channel's capacity, and how many events its forwarder may
	// hold beside (watcher): together with the one it is sending, watchBuffer.
	watchChan      = watchBuffer / 2
	snapshotReuse  = time.Second // how old a map a new watcher may start from (firstEvents)
	ownWriteWait   = time.Second
	resumeWait     = time.Second   // for the client's feed position (WatchSeatMapFrom)
	staleAfter     = 3 * feedBlock // AsOf older than this makes a map Stale
	maxFeedBackoff = time.Second
)

// streamPos orders feed entry ids "ms-seq" as one number: ms<<22 | seq.
type streamPos uint64

func parseStreamID(id string) (streamPos, bool) {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	s, err2 := strconv.ParseUint(seq, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return streamPos(m<<22 | min(s, 1<<22-1)), true
}

// expiry is a hold's expiry (Redis ms) on one seat (layout index), or on a place key of
// an area (idx len(layout)+area, see view_areas.go).
type expiry struct {
	at  int64
	idx int
	key string // the place key, for an area
}

type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }

// next is the earliest expiry (Redis ms), 0 when none.
func (h expiryHeap) next() int64 {
	if len(h) == 0 {
		return 0
	}
	return h[0].at
}

func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// batch is one published set of changes.
type batch struct {
	version uint64
	pos     uint64 // the feed position it was published at (feedPos)
	changes []SeatChange
	areas   []AreaState // areas whose places changed
}

// entryTouch is the seats (layout indexes) one feed entry touched, at its position.
type entryTouch struct {
	pos     uint64
	seats   []int32
	horizon int64 // the waitlist horizon after it (view.horizon)
}

// watcher is one WatchSeatMap subscription. The view hands it events (send) into
// pending, which only it and the watcher's forwarder touch, under mu; the forwarder
// alone sends them, in order, on ch, the watcher's channel. So an event the view merges
// into others is one the watcher has not received: it never gets an older state after
// a newer one.
type watcher struct {
	ch      chan SeatMapEvent
	mu      sync.Mutex
	pending []SeatMapEvent
	wake    chan struct{} // a send poked the forwarder
	done    chan struct{} // the watch ended: the forwarder closes ch
	ended   sync.Once
}

// newWatcher starts a watcher whose channel holds first (at most watchChan events) from
// the start.
func newWatcher(first []SeatMapEvent) *watcher {
	w := &watcher{ch: make(chan SeatMapEvent, watchChan), wake: make(chan struct{}, 1), done: make(chan struct{})}
	for _, ev := range first {
		w.ch <- ev
	}
	go w.forward()
	return w
}

// forward sends w's pending events on ch, oldest first, until the watch ends; then it
// closes ch.
func (w *watcher) forward() {
	defer close(w.ch)
	for {
		w.mu.Lock()
		if len(w.pending) == 0 {
			w.mu.Unlock()
			select {
			case <-w.wake:
				continue
			case <-w.done:
				return
			}
		}
		ev := w.pending[0]
		w.pending = w.pending[1:]
		w.mu.Unlock()
		select {
		case w.ch <- ev:
		case <-w.done:
			return
		}
	}
}

// end ends the watch: w's channel closes once its forwarder has seen it.
func (w *watcher) end() { w.ended.Do(func() { close(w.done) }) }

// view is one show's seat map, kept current.
type view struct {
	e  *Engine
	sh *show

	mu      sync.Mutex
	sold    []bool  // by layout index
	exp     []int64 // hold expiry, Redis ms; 0 when none
	pub     []SeatStatus
	pubExp  []int64
	areas   areaView // the show's areas (view_areas.go): slot len(layout)+a of touched, mark and expq
	touched []int
	mark    []bool // in touched
	expq    expiryHeap
	offset  int64 // Redis's clock minus ours, ms
	version uint64
	lastID  string // the last feed entry applied
	lastN   int64  // its number
	asOf    time.Time
	healthy bool
	err     error // the feed's last failure, while unhealthy
	ring    []batch
	// entries are the seats each feed entry applied touched, by position (the last
	// ringBatches), complete after entriesFrom (the last rebuild's position, or the
	// last entry dropped): a resume on another engine needs the seats of every entry
	// since its position, including those whose changes this view published together
	// with others (a hold and its release in one batch).
	entries     []entryTouch
	entriesFrom uint64
	// knownFrom is the Redis time (ms) from which the view knows every hold's expiry:
	// the end of its last rebuild's reads (a hold that had expired by then it never
	// saw).
	knownFrom int64
	// horizon is the show's waitlist horizon (Redis ms; 0: the show has no waitlist), as
	// of the feed entry the view stands at (the feed's "w", internal/lua/wl.lua): a hold
	// shows expired only once the horizon has passed its expiry, so that a seat an
	// expiry frees is offered to its waitlist before any map shows it free.
	// fromHorizon is the horizon at entriesFrom.
	horizon, fromHorizon int64
	subs                 map[*watcher]struct{}
	built                bool          // a rebuild has completed
	ready                chan struct{} // closed once built (or the view stopped)
	tried                chan struct{} // closed when the first build failed: reads need not wait for it
	triedOnce            sync.Once
	adv                  chan struct{} // closed and replaced at each publication
	wake                 chan struct{} // pokes the expiry loop

	snap atomic.Pointer[SeatMap] // the published map; nil until built or after a change
	// lastSnap is the last map built (kept after a change) with the feed position and
	// the time it was built at: a new watcher starts from it and the changes since,
	// while it is recent (firstEvents).
	lastSnap struct {
		m   *SeatMap
		pos uint64
		at  time.Time
	}
	applied  atomic.Uint64 // streamPos of the last entry applied
	want     atomic.Uint64 // streamPos of this engine's own last write
	lastUsed atomic.Int64  // unix ns of the last read
	watches  atomic.Int32
	resync   atomic.Bool // a rebuild is asked for

	cancel context.CancelFunc
	done   chan struct{}
}

func newView(e *Engine, sh *show) *view {
	n := len(sh.layout)
	v := &view{e: e, sh: sh, sold: make([]bool, n), exp: make([]int64, n), pub: make([]SeatStatus, n),
		pubExp: make([]int64, n), areas: newAreaView(sh), mark: make([]bool, n+len(sh.areas)), subs: map[*watcher]struct{}{},
		ready: make(chan struct{}), tried: make(chan struct{}), adv: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	for i := range v.pub {
		v.pub[i] = SeatFree
	}
	v.version = uint64(time.Now().UnixMicro()) // versions only grow, across views of one process
	v.lastUsed.Store(time.Now().UnixNano())
	return v
}

// start runs the view's feed and expiry loops until ctx ends or the view goes idle.
func (v *view) start(ctx context.Context) {
	ctx, v.cancel = context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); v.follow(ctx) }()
	go func() { defer wg.Done(); v.expire(ctx) }()
	go func() {
		wg.Wait()
		v.mu.Lock()
		for w := range v.subs {
			w.end()
			delete(v.subs, w)
		}
		if !v.built {
			close(v.ready)
			v.built = true
		}
		v.mu.Unlock()
		close(v.done)
	}()
}

func (v *view) stop() {
	v.cancel()
	<-v.done
}

// redisNow is Redis's clock, in ms, as the view estimates it.
func (v *view) redisNow() int64 { return time.Now().UnixMilli() + v.offset }

// now is the time, in Redis ms, by which the map shows holds expired: Redis's clock as
// the view estimates it, and never earlier than just before the time of the feed entry
// it stands at (the entry id's milliseconds, Redis's clock when it was written). So a
// hold that expired before that entry was written shows expired at that position on
// every engine, whatever its clock estimate, and a resume from a position need only
// look at the expiries from that position's time on (catchUp). Caller holds mu.
//
// While the show has a waitlist, expiries stop at its horizon (see horizon), which is
// the same at a feed position on every engine.
func (v *view) now() int64 {
	now := max(v.redisNow(), int64(v.feedPos()>>22)-1)
	if v.horizon > 0 {
		now = min(now, v.horizon)
	}
	return now
}

// expireDue touches every seat whose hold has expired by now, and drops the place keys
// of areas that have. Caller holds mu.
func (v *view) expireDue(now int64) {
	for len(v.expq) > 0 && v.expq[0].at <= now {
		x := heap.Pop(&v.expq).(expiry)
		switch {
		case x.idx >= len(v.exp):
			v.expirePlaces(x)
		case v.exp[x.idx] == x.at: // the seat's hold as it is
			v.touch(x.idx)
		}
	}
}

// follow reads the feed until ctx ends: it rebuilds when asked to or when the feed
// has a gap, and applies entries as they come.
func (v *view) follow(ctx context.Context) {
	backoff := 50 * time.Millisecond
	rebuild := true
	var lastRead time.Time // a read returns at once when entries wait: pace those
	for ctx.Err() == nil {
		if v.idle() {
			v.e.dropView(v)
			return
		}
		if rebuild || v.resync.Swap(false) {
			v.e.m.seatMapRebuilds.Inc()
			// Bounded: a hung PostgreSQL (or Redis) fails the rebuild, which is retried,
			// instead of stopping the view for good.
			rctx, cancel := context.WithTimeout(ctx, rebuildTimeout)
			err := v.rebuild(rctx)
			cancel()
			if errors.Is(err, errCatchUpGap) {
				continue // at once: the feed moves, nothing is down
			} else if err != nil {
				v.failed(err)
				v.triedOnce.Do(func() { close(v.tried) })
				sleep(ctx, backoff)
				backoff = min(2*backoff, maxFeedBackoff)
				continue
			}
			rebuild = false
		}
		if v.e.hooks.beforeFeedRead != nil {
			v.e.hooks.beforeFeedRead(ctx, v.sh.id)
		}
		if wait := max(feedInterval, time.Duration(v.watches.Load())*feedIntervalPerWatch) - time.Since(lastRead); wait > 0 {
			sleep(ctx, wait)
		}
		sent := time.Now()
		lastRead = sent
		res, gap, err := v.readFeed(ctx)
		if gap {
			rebuild = true
			v.e.log.WarnContext(ctx, "seat map feed lost entries; rebuilding the map", "show_id", v.sh.id)
			continue
		}
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			v.failed(err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, maxFeedBackoff)
		default:
			backoff = 50 * time.Millisecond
			v.mu.Lock()
			ok := v.applyEntries(res)
			if ok {
				v.current(sent)
			}
			v.mu.Unlock()
			if !ok {
				rebuild = true
				v.e.log.WarnContext(ctx, "seat map feed has a gap; rebuilding the map", "show_id", v.sh.id)
			}
		}
	}
}

// readFeed reads the entries after the view's last, waiting up to feedBlock for one.
// When there is none it checks that the feed is still the one this view follows: it
// reads the entry counter, then the feed again. Entries the counter had numbered but the
// feed no longer has were trimmed, and a counter below the view's means Redis lost the
// feed (FLUSHALL, restart); both would stay silent, and are a gap.
func (v *view) readFeed(ctx context.Context) (res []redis.XStream, gap bool, err error) {
	rdb, feed := v.e.rdb, v.sh.k.feed()
	v.mu.Lock()
	last := v.lastID
	v.mu.Unlock()
	res, err = xreadUntilDone(ctx, rdb, &redis.XReadArgs{Streams: []string{feed, last}, Count: feedCount, Block: feedBlock})
	if !errors.Is(err, redis.Nil) {
		return res, false, err
	}
	// Nothing new: the entry counter, then the feed again.
	pipe := rdb.Pipeline()
	nc := pipe.Get(ctx, v.sh.k.feedN())
	xc := pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{feed, last}, Count: feedCount, Block: -1})
	_, err = pipe.Exec(ctx)
	res, _ = xc.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return res, false, err
	}
	n, _ := nc.Int64()
	v.mu.Lock()
	gap = n < v.lastN || (n > v.lastN && len(res) == 0)
	v.mu.Unlock()
	return res, gap, nil
}

// xreadUntilDone is a blocking feed read that ends when ctx does (go-redis ends a read
// only at its deadline, and a view's has none): the read itself is left to end on its
// own, by feedBlock or the client's read timeout, so that Close need not wait for it.
func xreadUntilDone(ctx context.Context, rdb redis.UniversalClient, args *redis.XReadArgs) ([]redis.XStream, error) {
	type reply struct {
		res []redis.XStream
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		res, err := rdb.XRead(ctx, args).Result()
		ch <- reply{res, err}
	}()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// idle reports whether nobody has read the map for Config.SeatMapIdle and no watch is
// open.
func (v *view) idle() bool {
	return v.watches.Load() == 0 && time.Since(time.Unix(0, v.lastUsed.Load())) > v.e.cfg.SeatMapIdle
}

// failed records a feed failure: the map is stale from now on, and says so.
func (v *view) failed(err error) {
	v.mu.Lock()
	v.healthy, v.err = false, err
	v.mu.Unlock()
	v.e.log.Warn("seat map feed failed; the map is stale until it recovers", "show_id", v.sh.id, "err", err)
}

// current records that the view held every feed entry written before sent. Caller
// holds mu.
func (v *view) current(sent time.Time) {
	v.healthy, v.err = true, nil
	if sent.After(v.asOf) {
		v.asOf = sent
	}
	v.publish()
}

// applyEntries applies feed entries in order; false means a gap (an entry number
// skipped), after which the map must be rebuilt. Caller holds mu.
func (v *view) applyEntries(res []redis.XStream) bool {
	for _, st := range res {
		for _, m := range st.Messages {
			n, _ := strconv.ParseInt(fieldString(m.Values["n"]), 10, 64)
			if n != v.lastN+1 {
				return false
			}
			touched := v.apply(m.Values)
			v.lastID, v.lastN = m.ID, n
			v.logEntry(touched)
			if p, ok := parseStreamID(m.ID); ok {
				v.applied.Store(uint64(p))
				if v.built {
					lag := time.Now().UnixMilli() + v.offset - int64(p>>22)
					v.e.m.feedLag.Observe(float64(max(lag, 0)) / 1000)
				}
			}
		}
	}
	return true
}

func fieldString(x any) string {
	s, _ := x.(string)
	return s
}

// apply applies one feed entry's fields. Caller holds mu.
func (v *view) apply(f map[string]any) (touched []int32) {
	x, _ := strconv.ParseInt(fieldString(f["x"]), 10, 64)
	each := func(field string, fn func(i int)) {
		for _, seat := range strings.Fields(fieldString(f[field])) {
			if i, ok := v.sh.index[seat]; ok {
				fn(i)
				v.touch(i)
				touched = append(touched, int32(i))
			} else if len(v.sh.areas) > 0 {
				v.applyPlace(field, seat, x)
			}
		}
	}
	each("h", func(i int) {
		v.exp[i] = x
		heap.Push(&v.expq, expiry{at: x, idx: i})
	})
	each("d", func(i int) { v.exp[i] = 0 })
	each("s", func(i int) { v.sold[i] = true })
	each("u", func(i int) { v.sold[i] = false })
	if w, ok := f["w"]; ok {
		v.horizon, _ = strconv.ParseInt(fieldString(w), 10, 64) // "-": 0, none
		x = v.expq.next()                                       // the expiries it lets through
	}
	if len(v.expq) > 0 && v.expq[0].at == x {
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	return touched
}

func (v *view) touch(i int) {
	if !v.mark[i] {
		v.mark[i] = true
		v.touched = append(v.touched, i)
	}
}

// state is seat i's state at Redis time now. Caller holds mu.
func (v *view) state(i int, now int64) (SeatStatus, int64) {
	switch {
	case v.sold[i]:
		return SeatSold, 0
	case v.exp[i] > now:
		return SeatHeld, v.exp[i]
	}
	return SeatFree, 0
}

// publish makes the touched seats' states the published map: when any changed, a new
// version, a batch for the watchers, and a new snapshot on the next read. Caller holds
// mu.
func (v *view) publish() {
	if !v.built {
		return // the rebuild publishes once caught up
	}
	now := v.now()
	v.expireDue(now)
	var changes []SeatChange
	areas := v.publishAreas(v.touched)
	for _, i := range v.touched {
		v.mark[i] = false
		if i >= len(v.pub) {
			continue // an area
		}
		st, x := v.state(i, now)
		if st != v.pub[i] || x != v.pubExp[i] {
			v.pub[i], v.pubExp[i] = st, x
			c := SeatChange{Index: i, SeatID: v.sh.layout[i].ID, Status: st}
			if x != 0 {
				c.ExpiresAt = localTime(x)
			}
			changes = append(changes, c)
		}
	}
	v.touched = v.touched[:0]
	if len(changes) > 0 || len(areas) > 0 {
		v.version++
		v.snap.Store(nil)
		b := batch{version: v.version, pos: v.feedPos(), changes: changes, areas: areas}
		if len(v.ring) == ringBatches {
			copy(v.ring, v.ring[1:])
			v.ring = v.ring[:len(v.ring)-1]
		}
		v.ring = append(v.ring, b)
		for w := range v.subs {
			v.send(w, SeatMapEvent{Version: b.version, Position: b.pos, Changes: b.changes, Areas: b.areas})
		}
	}
	close(v.adv)
	v.adv = make(chan struct{})
}

// feedPos is the position in the show's feed (its last entry's id as a streamPos) the
// view has applied: the same for every engine on the same Redis, so a watcher can
// resume on another engine from it (catchUp). 0 before any entry. Caller holds mu.
func (v *view) feedPos() uint64 {
	p, _ := parseStreamID(v.lastID)
	return uint64(p)
}

// logEntry records the seats the entry just applied touched. Caller holds mu.
func (v *view) logEntry(touched []int32) {
	if len(v.entries) == ringBatches {
		v.entriesFrom, v.fromHorizon = v.entries[0].pos, v.entries[0].horizon
		copy(v.entries, v.entries[1:])
		v.entries = v.entries[:len(v.entries)-1]
	}
	v.entries = append(v.entries, entryTouch{pos: v.feedPos(), seats: touched, horizon: v.horizon})
}

// catchUp is what a watcher that saw the map at feed position pos on another engine
// needs to reach this view's map: the current state of every seat a feed entry after
// pos touched, and of every seat whose hold this view has expired that expires at or
// after pos's time, or the waitlist horizon at pos when it was earlier (an earlier
// expiry shows in every engine's map at pos: see now).
// The changes are a superset (a seat may be sent in the state the watcher has
// already); applying them gives this view's map. ok is false when the view cannot
// tell — it has not reached pos, its entries do not reach back to it (kept too few, or
// rebuilt since: the feed was trimmed past it, or started over), or it did not know
// every hold then (built after pos's time) — and the watcher needs a snapshot. Caller
// holds mu.
func (v *view) catchUp(pos uint64) (changes []SeatChange, ok bool) {
	since := int64(pos >> 22)
	if pos == 0 || !v.built || v.feedPos() < pos || v.entriesFrom > pos || v.knownFrom > since {
		return nil, false
	}
	if h := v.horizonAt(pos); h > 0 {
		since = min(since, h)
	}
	seen := map[int]bool{}
	for _, en := range v.entries {
		if en.pos > pos {
			for _, i := range en.seats {
				seen[int(i)] = true
			}
		}
	}
	for i, x := range v.exp {
		if x >= since && v.pub[i] != SeatHeld {
			seen[i] = true
		}
	}
	for _, i := range slices.Sorted(maps.Keys(seen)) {
		c := SeatChange{Index: i, SeatID: v.sh.layout[i].ID, Status: v.pub[i]}
		if x := v.pubExp[i]; x != 0 {
			c.ExpiresAt = localTime(x)
		}
		changes = append(changes, c)
	}
	return changes, true
}

// horizonAt is the waitlist horizon at feed position pos, which the view's entries
// reach back to (catchUp): the horizon after the last entry at or before pos. Caller
// holds mu.
func (v *view) horizonAt(pos uint64) int64 {
	h := v.fromHorizon
	for _, en := range v.entries {
		if en.pos > pos {
			break
		}
		h = en.horizon
	}
	return h
}

// await waits until done (looked at under mu, after each publication) holds, ctx ends
// or d has passed.
func (v *view) await(ctx context.Context, d time.Duration, done func() bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		v.mu.Lock()
		ok, adv := done(), v.adv
		v.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-adv:
		case <-ctx.Done():
			return
		case <-t.C:
			return
		}
	}
}

// floorMillis is d in whole milliseconds, rounded down (towards the past).
func floorMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d < 0 && d%time.Millisecond != 0 {
		ms--
	}
	return ms
}

// localTime is a Redis-clock time (ms) as a time.Time: expiries are reported by
// Redis's clock, as Hold.ExpiresAt is. The offset only times the view's own work.
func localTime(ms int64) time.Time { return time.UnixMilli(ms) }

// send gives w an event. A watcher never holds the view up: when w has fallen
// about watchBuffer events behind, the events its forwarder holds are merged with ev into
// one (each seat once, in its latest state), or, when one of them is a snapshot or the
// changes would outweigh one, replaced by a snapshot. Caller holds mu.
func (v *view) send(w *watcher, ev SeatMapEvent) {
	ev.Merged = max(ev.Merged, 1)
	w.mu.Lock()
	if len(w.pending) < watchChan-1 {
		w.pending = append(w.pending, ev)
	} else {
		v.e.m.seatMapMerges.Inc()
		w.pending = []SeatMapEvent{v.merge(append(w.pending, ev))}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// snapshotEvent is the view's map now as an event standing for merged events. Caller
// holds mu.
func (v *view) snapshotEvent(merged int) SeatMapEvent {
	return SeatMapEvent{Version: v.version, Position: v.feedPos(), Snapshot: v.snapshotLocked(), Merged: merged}
}

// merge is one event that has the effect of evs applied in order: the last one's
// version and position, each changed seat once in its last state; a snapshot when one
// of evs is, or when more than an eighth of the show's seats changed (a snapshot is
// then about as small). Caller holds mu.
func (v *view) merge(evs []SeatMapEvent) SeatMapEvent {
	last := evs[len(evs)-1]
	out := SeatMapEvent{Version: last.Version, Position: last.Position}
	at := map[int]int{} // seat index -> its place in out.Changes
	for _, ev := range evs {
		out.Merged += max(ev.Merged, 1)
		if ev.Snapshot != nil {
			return v.snapshotEvent(out.Merged)
		}
		for _, c := range ev.Changes {
			if k, ok := at[c.Index]; ok {
				out.Changes[k] = c
				continue
			}
			at[c.Index] = len(out.Changes)
			out.Changes = append(out.Changes, c)
		}
		out.Areas = mergeAreas(out.Areas, ev.Areas)
		if len(out.Changes) > len(v.sh.layout)/8 {
			return v.snapshotEvent(out.Merged)
		}
	}
	return out
}

// rebuild reads the show's state from scratch: Redis's clock and the feed's position
// first, then the claims in PostgreSQL and the holds in Redis, then the feed from that
// position until it is caught up. Only then is the result published.
func (v *view) rebuild(ctx context.Context) error {
	rdb, sh := v.e.rdb, v.sh
	asked := time.Now()
	rt, err := rdb.Time(ctx).Result()
	if err != nil {
		return v.e.redisErr(err)
	}
	// Redis read its clock somewhere between the call and its reply: the offset taken
	// at the reply, rounded down, is the smallest it can be, so the view's idea of
	// Redis's time is never ahead of Redis's (expiries are late by up to this call's
	// round trip, never early).
	offset := floorMillis(rt.Sub(time.Now()))
	// Every feed entry numbered before that clock reading was written before the
	// position below is read, so the rebuilt map holds it: this engine's own writes up
	// to there count as applied even when the feed they went to is gone (FLUSHALL, a
	// restart without persistence), and a read does not wait for them.
	before := streamPos(uint64(max(rt.UnixMilli()-1, 0))<<22 | (1<<22 - 1))
	lastID, lastN, horizon, err := v.feedHead(ctx)
	if err != nil {
		return err
	}
	claims, err := v.e.q.SeatClaimListByShow(ctx, sh.id)
	if err != nil {
		return v.e.pgErr(err)
	}
	// Each hold's expiry as Redis has it (PEXPIRETIME: the absolute time, in Redis's
	// clock), not a TTL added to a clock read earlier in the pipeline, which would come
	// out early by the time Redis took to reach it.
	pipe := rdb.Pipeline()
	exps := make([]*redis.DurationCmd, len(sh.layout))
	for i, s := range sh.layout {
		exps[i] = pipe.PExpireTime(ctx, sh.holdKeys[s.ID])
	}
	areas, err := v.readAreas(ctx, pipe)
	if err != nil {
		return err
	}
	late := v.readLateHolds(ctx, pipe, horizon)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return v.e.redisErr(err)
	}
	late.done(sh)
	// Redis read every expiry above by its clock reading plus the time since it was
	// asked for, at most: a hold expiring later than that, it had.
	known := rt.UnixMilli() + time.Since(asked).Milliseconds() + 1

	v.mu.Lock()
	v.offset = offset
	v.expq = v.expq[:0]
	for i := range v.sold {
		v.sold[i], v.exp[i] = false, 0
		// go-redis reads PEXPIRETIME's reply as milliseconds; -2 is no key, -1 no expiry.
		x := exps[i].Val().Milliseconds()
		if x <= 0 {
			x = late.seats[i] // expired past the horizon: held until it passes
		}
		if x > 0 {
			v.exp[i] = x
			v.expq = append(v.expq, expiry{at: x, idx: i})
		}
		v.touch(i)
	}
	v.setAreas(areas, horizon)
	heap.Init(&v.expq)
	for _, c := range claims {
		if i, ok := sh.index[c.SeatID]; ok {
			v.sold[i] = true
		}
	}
	v.lastID, v.lastN = lastID, lastN
	// The entries from here on, as far as a resume from another engine is concerned
	// (catchUp): what came between the last entry before and this one, it never saw.
	v.entries, v.entriesFrom, v.knownFrom = v.entries[:0], v.feedPos(), known
	v.horizon, v.fromHorizon = horizon, horizon
	v.mu.Unlock()
	return v.caughtUp(ctx, before)
}

// lateHolds is what a rebuild reads of the holds that expired after the waitlist
// horizon (readLateHolds): the expiries of those whose keys are gone by layout index.
type lateHolds struct {
	seats map[int]int64
	reads []*redis.ZSliceCmd // by section number
}

// readLateHolds queues in pipe, while the show has a waitlist horizon, the reads of the
// seats the best-available index still has held (fr:<section>, internal/lua/common.lua)
// at an expiry after the horizon: their keys may be gone (Redis drops an expired key)
// while no sweep has given them to the waitlist, and a followed map shows them held
// until the horizon passes their expiry — the rebuilt map must too. Call done on the
// result once pipe has run.
func (v *view) readLateHolds(ctx context.Context, pipe redis.Pipeliner, horizon int64) *lateHolds {
	l := &lateHolds{seats: map[int]int64{}}
	if horizon <= 0 {
		return l
	}
	for i := range v.sh.sections {
		l.reads = append(l.reads, pipe.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: v.sh.k.base + "fr:" + strconv.Itoa(i),
			Start: "(" + strconv.FormatInt(indexHeld+horizon, 10), Stop: "+inf", ByScore: true}))
	}
	return l
}

// indexHeld is the best-available index's score of a held seat, less its expiry
// (HELD in internal/lua/common.lua).
const indexHeld = 1 << 52

// done reads the late holds from their replies.
func (l *lateHolds) done(sh *show) *lateHolds {
	for _, cmd := range l.reads {
		for _, z := range cmd.Val() {
			m, _ := z.Member.(string)
			seat, _, _ := strings.Cut(m, "@")
			if i, ok := sh.index[seat]; ok {
				l.seats[i] = int64(z.Score) - indexHeld
			}
		}
	}
	return l
}

// feedHead reads the show's feed position for a rebuild: its last entry's id and
// number ("0-0" and 0 when it has none) and the waitlist horizon as of that entry, in
// one transaction.
func (v *view) feedHead(ctx context.Context) (lastID string, lastN, horizon int64, err error) {
	var lastCmd *redis.XMessageSliceCmd
	var horizonCmd *redis.StringCmd
	_, err = v.e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		lastCmd = p.XRevRangeN(ctx, v.sh.k.feed(), "+", "-", 1)
		horizonCmd = p.Get(ctx, v.sh.k.horizon())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, 0, v.e.redisErr(err)
	}
	lastID = "0-0"
	if last := lastCmd.Val(); len(last) == 1 {
		lastID = last[0].ID
		lastN, _ = strconv.ParseInt(fieldString(last[0].Values["n"]), 10, 64)
	}
	horizon, _ = strconv.ParseInt(horizonCmd.Val(), 10, 64)
	return lastID, lastN, horizon, nil
}

// caughtUp reads, after a rebuild, what was written to the feed since its position was
// read, and then publishes the rebuilt map: its position (no earlier than before, the
// entries the rebuild saw anyway), its readiness, and a snapshot to every watcher.
func (v *view) caughtUp(ctx context.Context, before streamPos) error {
	rdb, sh := v.e.rdb, v.sh
	for {
		v.mu.Lock()
		after := v.lastID
		v.mu.Unlock()
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{sh.k.feed(), after}, Count: feedCount, Block: -1}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return v.e.redisErr(err)
		}
		v.mu.Lock()
		if !v.applyEntries(res) {
			v.mu.Unlock()
			return errCatchUpGap
		}
		n := 0
		for _, st := range res {
			n += len(st.Messages)
		}
		if n < feedCount {
			p, _ := parseStreamID(v.lastID)
			v.applied.Store(uint64(max(p, before)))
			first := !v.built
			v.built = true
			v.current(time.Now())
			if first {
				close(v.ready)
			}
			for w := range v.subs { // after a rebuild every watcher starts over
				v.send(w, v.snapshotEvent(1))
			}
			v.mu.Unlock()
			select {
			case v.wake <- struct{}{}:
			default:
			}
			return nil
		}
		v.mu.Unlock()
	}
}

// rebuildTimeout bounds one rebuild of a view in its loop (a 100,000-seat map takes
// about a second).
const rebuildTimeout = 30 * time.Second

// errCatchUpGap: a rebuild's catch-up met a gap (the feed was trimmed past it while it
// read): the rebuild starts again.
var errCatchUpGap = errors.New("the feed was trimmed while the seat map caught up")

// expire applies hold expiries as they come, until ctx ends.
func (v *view) expire(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		v.mu.Lock()
		now := v.now()
		v.expireDue(now)
		if len(v.touched) > 0 {
			v.publish()
		}
		wait := time.Hour
		if len(v.expq) > 0 && (v.horizon == 0 || v.expq[0].at <= now) {
			wait = time.Duration(v.expq[0].at-now) * time.Millisecond
		} // else the next expiry waits for the horizon: a feed entry wakes the loop (apply)
		v.mu.Unlock()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-v.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// awaitBuilt waits for the map to be built (as long as ctx allows: a 100,000-seat map
// takes a while) and for this engine's own writes to be in it (briefly), unless its
// build failed already (Redis or PostgreSQL down): that is reported at once, and an
// answer never waits for an outage to end.
func (v *view) awaitBuilt(ctx context.Context) error {
	v.lastUsed.Store(time.Now().UnixNano())
	select {
	case <-v.ready:
	case <-v.tried:
	case <-ctx.Done():
		return unavailable("redis", ctx.Err())
	}
	if v.want.Load() > v.applied.Load() {
		v.await(ctx, ownWriteWait, func() bool { return v.want.Load() <= v.applied.Load() })
	}
	v.mu.Lock()
	built, asOf, ferr := v.built, v.asOf, v.err
	v.mu.Unlock()
	if built && !asOf.IsZero() {
		return nil
	}
	if ferr != nil {
		return v.e.redisErr(ferr)
	}
	select {
	case <-v.ready:
		return unavailable("redis", errors.New("the seat map view stopped"))
	default:
		return unavailable("redis", errors.New("the seat map is still being built"))
	}
}

// snapshotLocked returns the published map, building it when a change made the last
// one old. Caller holds mu.
func (v *view) snapshotLocked() *SeatMap {
	if m := v.snap.Load(); m != nil {
		return m
	}
	m := &SeatMap{ShowID: v.sh.id, Version: v.version, Layout: v.sh.layout,
		States: make([]SeatStatus, len(v.pub)), Expires: make([]time.Time, len(v.pub)), Areas: slices.Clone(v.areas.pub)}
	copy(m.States, v.pub)
	for i, x := range v.pubExp {
		if x != 0 {
			m.Expires[i] = localTime(x)
		}
	}
	v.snap.Store(m)
	v.lastSnap.m, v.lastSnap.pos, v.lastSnap.at = m, v.feedPos(), time.Now()
	return m
}

// firstEvents are a new watcher's first events: the last map built, when it is at
// most snapshotReuse old, followed by the batches published since (the events every
// other watcher got) — or, when there are more of them than the watcher's buffer
// holds, by one event standing for them all (merge); else a snapshot of the map now.
// Connects that come faster than the map changes (a reconnect storm on a busy show)
// then cost a snapshot a second, not one per connect or per version: a map of 100,000
// seats is megabytes to build and to collect. Caller holds mu.
func (v *view) firstEvents() []SeatMapEvent {
	last := v.lastSnap
	if last.m == nil || time.Since(last.at) > snapshotReuse {
		return []SeatMapEvent{v.snapshotEvent(1)}
	}
	evs := []SeatMapEvent{{Version: last.m.Version, Position: last.pos, Snapshot: last.m, Merged: 1}}
	if last.m.Version == v.version {
		return evs
	}
	// Every publication is the next version and a batch in the ring: the batches since
	// the map are those from its version + 1, unless the ring has dropped that one.
	i, found := slices.BinarySearchFunc(v.ring, last.m.Version+1, func(b batch, ver uint64) int { return cmp.Compare(b.version, ver) })
	if !found {
		return []SeatMapEvent{v.snapshotEvent(1)}
	}
	since := make([]SeatMapEvent, 0, len(v.ring)-i)
	for _, b := range v.ring[i:] {
		since = append(since, SeatMapEvent{Version: b.version, Position: b.pos, Changes: b.changes, Areas: b.areas, Merged: 1})
	}
	if len(since) < watchChan {
		return append(evs, since...)
	}
	if m := v.merge(since); m.Snapshot == nil {
		return append(evs, m)
	}
	return []SeatMapEvent{v.snapshotEvent(1)} // they changed more than a snapshot weighs
}

// read returns the published map with its freshness. It waits (briefly) for this
// engine's own writes to be in the map, so that a process reads what it wrote.
func (v *view) read(ctx context.Context) (*SeatMap, error) {
	if err := v.awaitBuilt(ctx); err != nil {
		return nil, err
	}
	// Under the lock: an entry counted as applied is published in the same critical
	// section, so the snapshot taken here has every write awaitBuilt waited for.
	v.mu.Lock()
	m := v.snapshotLocked()
	asOf, healthy := v.asOf, v.healthy
	v.mu.Unlock()
	select {
	case <-v.done:
		healthy = false // dropped while this read began: no longer followed
	default:
	}
	out := *m
	out.AsOf = asOf
	if healthy && time.Since(asOf) <= feedBlock+time.Second {
		out.AsOf = time.Now() // the feed is followed: everything written until now is in
	}
	out.Stale = !healthy || time.Since(asOf) > staleAfter
	return &out, nil
}
