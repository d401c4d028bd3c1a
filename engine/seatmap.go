package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// SeatMap is a show's seat map at one version: a shared, immutable snapshot. Every
// reader of the same version gets the same Layout, States and Expires slices: do not
// modify them.
type SeatMap struct {
	ShowID string
	// Version grows with every change this engine has seen for the show (changes from
	// any engine reach it through the show's change feed). Versions of different
	// engines are unrelated.
	Version uint64
	// AsOf is when the map was known to hold every change: the time of the read while
	// the engine follows the show's change feed, or the last time it could when it
	// cannot (Redis down); then Stale is true as well.
	AsOf  time.Time
	Stale bool
	// Layout is the show's seats in layout order (see Layout); States[i] and
	// Expires[i] are Layout[i]'s state and, when held, its hold's expiry (by Redis's
	// clock, as Hold.ExpiresAt).
	Layout  []Seat
	States  []SeatStatus
	Expires []time.Time
	// Areas is the show's standing areas (Venue.Areas) in id order, each with its
	// places free, held and sold.
	Areas []AreaState
}

// SeatChange is one seat's new state in a [SeatMapEvent].
type SeatChange struct {
	Index     int // in the layout
	SeatID    string
	Status    SeatStatus
	ExpiresAt time.Time // when held
}

// SeatMapEvent is what a watch delivers: either the changes that make Version from
// the version before it, or, when Snapshot is set, a whole map to start over from (the
// first event of a watch that cannot resume, after the engine rebuilt the map, or when
// the watcher fell behind far). A watcher that fell behind a little gets the changes
// it had not read merged into one event (Merged > 1): each seat once, in its latest
// state, which applied in order gives the same map.
type SeatMapEvent struct {
	Version uint64
	// Merged is how many events this one stands for: 1, or more for a watcher that fell
	// behind (its events are its own, unlike the others, which every watcher shares).
	Merged int
	// Position is where in the show's change feed the map stood after this event: the
	// same for every engine on the same Redis, so that a watcher can resume on another
	// engine (WatchSeatMapFrom). Versions are this engine's own.
	Position uint64
	Snapshot *SeatMap
	Changes  []SeatChange
	// Areas is the areas whose places changed, each in its new state.
	Areas []AreaState
}

// Seats returns every seat of a show, sorted, as free, held (with its expiry) or sold,
// from the engine's seat-map view (see [Engine.SeatMap]): a fresh slice of the caller's.
func (e *Engine) Seats(ctx context.Context, showID string) ([]SeatState, error) {
	m, err := e.SeatMap(ctx, showID)
	if err != nil {
		return nil, err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return nil, err
	}
	out := make([]SeatState, len(sh.seats))
	held := 0
	for _, st := range m.States {
		if st == SeatHeld {
			held++
		}
	}
	exps := make([]time.Time, 0, held)
	for i, s := range sh.seats {
		j := sh.bySeat[i]
		out[i] = SeatState{SeatID: s, Status: m.States[j]}
		if m.States[j] == SeatHeld {
			exps = append(exps, m.Expires[j])
			out[i].ExpiresAt = &exps[len(exps)-1]
		}
	}
	return out, nil
}

// SeatMap returns a show's seat map: the layout, every seat's state in layout order,
// held seats' expiries, and a version. The engine keeps the map of each show it is
// asked about in memory, current from the show's change feed in Redis, so a read costs
// no PostgreSQL query and no Redis command; the first read of a show builds it (and
// waits for that). A map reflects every change made through this engine before the
// call, and changes made by other engines within a few milliseconds; AsOf and Stale
// say how current it is when the feed cannot be followed.
func (e *Engine) SeatMap(ctx context.Context, showID string) (*SeatMap, error) {
	if err := validateID("showID", showID); err != nil {
		return nil, err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return nil, err
	}
	v, err := e.view(sh, false)
	if err != nil {
		return nil, err
	}
	if v.cancel == nil { // not watched (every slot is taken): a shared map, about a second old
		m, _, err := e.polledSeatMap(ctx, sh)
		return m, err
	}
	return v.read(ctx)
}

// pollEvery is how often the seat map of a show past the watched-shows pool is built
// again, for all its readers and watchers together.
const pollEvery = time.Second

// polledMaps are the seat maps of shows the engine does not watch (every slot of
// Config.MaxWatchedShows is taken by a watched show): each built from Redis at most
// once per pollEvery and shared by every reader and watcher, so that a show past the
// pool is served a little late rather than refused, and a crowd reading it costs one
// build a second.
type polledMaps struct {
	mu sync.Mutex
	m  map[string]*polledMap
}

type polledMap struct {
	mu      sync.Mutex
	m       *SeatMap // the last build
	changed *SeatMap // the last build whose seats differed from the build before it
	at      time.Time
}

// fresh returns the last build and the last changed one, nil when older than pollEvery.
func (p *polledMap) fresh() (m, changed *SeatMap) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil || time.Since(p.at) >= pollEvery {
		return nil, nil
	}
	return p.m, p.changed
}

// built records a new build, and returns the last changed one.
func (p *polledMap) built(m *SeatMap) (changed *SeatMap) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.changed; c == nil || !slices.Equal(m.States, c.States) || !slices.EqualFunc(m.Expires, c.Expires, time.Time.Equal) {
		p.changed = m
	}
	p.m, p.at = m, time.Now()
	return p.changed
}

// maxPolledMaps bounds the polled maps kept; past it they are all dropped (each is
// rebuilt by its next reader).
const maxPolledMaps = 1024

// polledSeatMap returns the show's shared map (m, for readers: its AsOf is the last
// build's) and the last one whose seats changed (changed, for watchers: a new pointer
// means a snapshot to send), compared once per build rather than once per watcher.
// Concurrent readers share one build (shared: bounded by rebuildTimeout, each waits
// for it until its ctx ends).
func (e *Engine) polledSeatMap(ctx context.Context, sh *show) (m, changed *SeatMap, err error) {
	e.polled.mu.Lock()
	if e.polled.m == nil || len(e.polled.m) >= maxPolledMaps {
		e.polled.m = map[string]*polledMap{}
	}
	p := e.polled.m[sh.id]
	if p == nil {
		p = &polledMap{}
		e.polled.m[sh.id] = p
	}
	e.polled.mu.Unlock()
	if m, changed := p.fresh(); m != nil {
		return m, changed, nil
	}
	type maps struct{ m, changed *SeatMap }
	r, _, err := shared(ctx, &e.loads, "polled\x00"+sh.id, "redis", rebuildTimeout, func(ctx context.Context) (maps, error) {
		if m, changed := p.fresh(); m != nil {
			return maps{m, changed}, nil
		}
		m, err := e.buildSeatMap(ctx, sh)
		if err != nil {
			return maps{}, err
		}
		return maps{m, p.built(m)}, nil
	})
	return r.m, r.changed, err
}

// buildSeatMap builds a show's seat map from Redis and PostgreSQL, once, for a show
// the engine does not watch.
func (e *Engine) buildSeatMap(ctx context.Context, sh *show) (*SeatMap, error) {
	v := newView(e, sh)
	err := v.rebuild(ctx)
	for try := 0; errors.Is(err, errCatchUpGap) && try < 3; try++ {
		err = v.rebuild(ctx)
	}
	if err != nil {
		return nil, unavailable("redis", err)
	}
	return v.read(ctx)
}

// pollWatch watches a show past the watched-shows pool: a snapshot now, and another
// whenever the shared map (polledSeatMap), looked at every pollEvery, has changed.
// It ends (the channel closes) with ctx, the engine, or a failed build.
func (e *Engine) pollWatch(ctx context.Context, sh *show) (<-chan SeatMapEvent, error) {
	_, last, err := e.polledSeatMap(ctx, sh)
	if err != nil {
		return nil, err
	}
	ch := make(chan SeatMapEvent, 1)
	ch <- SeatMapEvent{Version: last.Version, Snapshot: last}
	go func() {
		defer close(ch)
		t := time.NewTicker(pollEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.viewCtx.Done():
				return
			case <-t.C:
			}
			_, changed, err := e.polledSeatMap(ctx, sh)
			if err != nil {
				return // the client reconnects
			}
			if changed == last {
				continue
			}
			last = changed
			select {
			case ch <- SeatMapEvent{Version: changed.Version, Snapshot: changed}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// WatchSeatMap delivers a show's seat-map changes until ctx ends (or the engine
// closes), then closes the channel. With after, the version of an earlier event or
// snapshot of this engine, it starts with the changes after it when it still has them;
// otherwise (and with after 0) the first event is a snapshot. A watcher that falls
// behind is never waited for: what it has not read is dropped and it gets a snapshot.
func (e *Engine) WatchSeatMap(ctx context.Context, showID string, after uint64) (<-chan SeatMapEvent, error) {
	return e.watch(ctx, showID, 0, func(v *view) ([]SeatMapEvent, bool) {
		if after == 0 || len(v.ring) == 0 || after < v.ring[0].version-1 || after > v.version {
			return nil, false
		}
		var evs []SeatMapEvent
		for _, b := range v.ring {
			if b.version > after {
				evs = append(evs, SeatMapEvent{Version: b.version, Position: b.pos, Changes: b.changes})
			}
		}
		return evs, true
	})
}

// WatchSeatMapFrom is WatchSeatMap for a watcher that saw the map at a feed position
// (SeatMapEvent.Position) of another engine — a client whose server died, resuming on
// another replica: the first event brings it to this engine's map — the current state
// of every seat a feed entry after that position touched and of every seat whose hold
// expired since that position's time, a superset of what it missed — when this engine
// can tell, else it is a snapshot. An engine behind that position is waited for (up to
// a second) to reach it.
func (e *Engine) WatchSeatMapFrom(ctx context.Context, showID string, position uint64) (<-chan SeatMapEvent, error) {
	return e.watch(ctx, showID, position, func(v *view) ([]SeatMapEvent, bool) {
		changes, ok := v.catchUp(position)
		if !ok || len(changes) == 0 && len(v.areas.pub) == 0 {
			return nil, ok
		}
		// Every area as it is: a superset of what changed, as the seats are.
		return []SeatMapEvent{{Version: v.version, Position: v.feedPos(), Changes: changes, Areas: slices.Clone(v.areas.pub)}}, true
	})
}

// watch subscribes to a show's view; resume, under the view's lock, returns the events
// a resuming watcher starts with, or false for a snapshot. A watcher from a feed
// position (from, not 0) first waits, up to resumeWait, for the view to reach it.
func (e *Engine) watch(ctx context.Context, showID string, from uint64, resume func(v *view) ([]SeatMapEvent, bool)) (<-chan SeatMapEvent, error) {
	if err := validateID("showID", showID); err != nil {
		return nil, err
	}
	sh, err := e.show(ctx, showID)
	if err != nil {
		return nil, err
	}
	v, err := e.view(sh, true)
	if err != nil {
		return nil, err
	}
	if v.cancel == nil { // every slot is taken: snapshots of a shared map, about once a second
		return e.pollWatch(ctx, sh)
	}
	defer v.watches.Add(-1)
	if err := v.awaitBuilt(ctx); err != nil {
		return nil, err
	}
	if from != 0 {
		v.await(ctx, resumeWait, func() bool { return v.feedPos() >= from })
	}
	v.mu.Lock()
	select {
	case <-v.done:
		v.mu.Unlock()
		return nil, unavailable("redis", fmt.Errorf("the seat map of show %s stopped", showID))
	default:
	}
	evs, resumed := resume(v)
	if !resumed || len(evs) > watchChan {
		evs = v.firstEvents()
	}
	w := newWatcher(evs)
	v.subs[w] = struct{}{}
	v.watches.Add(1)
	v.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-v.done:
		}
		v.mu.Lock()
		if _, ok := v.subs[w]; ok {
			delete(v.subs, w)
			w.end()
			v.watches.Add(-1)
		}
		v.lastUsed.Store(time.Now().UnixNano())
		v.mu.Unlock()
	}()
	return w.ch, nil
}

// views are the shows' seat maps this engine keeps current.
type views struct {
	mu sync.RWMutex
	m  map[string]*view
}

// view returns the show's view, starting it when the engine does not watch the show
// yet. When every slot is taken by a watched show, it returns a view that is not
// started (cancel nil), for one read. watching counts the caller as a watch until it
// subscribes, so that the view is not dropped meanwhile.
func (e *Engine) view(sh *show, watching bool) (*view, error) {
	e.views.mu.Lock()
	defer e.views.mu.Unlock()
	if e.closed {
		return nil, unavailable("engine", fmt.Errorf("closed"))
	}
	if v := e.views.m[sh.id]; v != nil {
		switch {
		case v.sh.epoch > sh.epoch: // the caller's copy is of an earlier show: one read
			return newView(e, sh), nil
		case v.sh.epoch < sh.epoch: // the view is of an earlier show
			delete(e.views.m, sh.id)
			go v.stop()
		default:
			if watching {
				v.watches.Add(1)
			}
			return v, nil
		}
	}
	if len(e.views.m) >= e.cfg.MaxWatchedShows {
		var lru *view
		for _, v := range e.views.m {
			if v.watches.Load() == 0 && (lru == nil || v.lastUsed.Load() < lru.lastUsed.Load()) {
				lru = v
			}
		}
		if lru == nil {
			return newView(e, sh), nil
		}
		delete(e.views.m, lru.sh.id)
		go lru.stop()
	}
	v := newView(e, sh)
	if watching {
		v.watches.Add(1)
	}
	e.views.m[sh.id] = v
	v.start(e.viewCtx)
	return v, nil
}

// dropView forgets an idle view (its loop ends after this).
func (e *Engine) dropView(v *view) {
	e.views.mu.Lock()
	if e.views.m[v.sh.id] == v {
		delete(e.views.m, v.sh.id)
	}
	e.views.mu.Unlock()
	v.cancel()
}

// stopViews ends every view; Close calls it.
func (e *Engine) stopViews() {
	e.views.mu.Lock()
	e.closed = true
	vs := make([]*view, 0, len(e.views.m))
	for _, v := range e.views.m {
		vs = append(vs, v)
	}
	clear(e.views.m)
	e.views.mu.Unlock()
	for _, v := range vs {
		v.stop()
	}
}

// wrote tells the show's view (if the engine watches the show) that this engine wrote
// the feed entry id, so that its next read waits for it.
func (e *Engine) wrote(sh *show, id any) {
	s, _ := id.(string)
	p, ok := parseStreamID(s)
	if !ok {
		return
	}
	e.views.mu.RLock()
	v := e.views.m[sh.id]
	e.views.mu.RUnlock()
	if v == nil {
		return
	}
	for {
		cur := v.want.Load()
		if uint64(p) <= cur || v.want.CompareAndSwap(cur, uint64(p)) {
			return
		}
	}
}

// resyncView asks the show's view, if any, to rebuild.
func (e *Engine) resyncView(sh *show) {
	e.views.mu.RLock()
	v := e.views.m[sh.id]
	e.views.mu.RUnlock()
	if v != nil {
		v.resync.Store(true)
	}
}
