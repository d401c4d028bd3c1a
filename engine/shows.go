package engine

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// show is a show's inventory as the engine keeps it in memory, with every Redis key
// built once. It is one show: epoch is its identity (migration 00009), which no later
// show of the id shares. Meeting another identity of the id (PostgreSQL's, or Redis's
// in a script's STALE) drops the copy (dropShow).
type show struct {
	id       string
	epoch    int64
	k        keys
	seats    []string          // sorted
	layout   []Seat            // in layout order (see layoutOrder)
	holdKeys map[string]string // seat -> its hold key
	soldKeys map[string]string // seat -> the sold-marker hash of its bucket
	buckets  []string          // every sold-marker hash of the show
	index    map[string]int    // seat -> its index in layout
	bySeat   []int             // the layout index of each seat of seats
	sections []bestSection     // by number: the sections, in layout order
	meta     []string          // by layout index: the seat's best-available meta (internal/lua/common.lua)
	place    []int             // by layout index: the seat's place in its index segment, from 1 (0 before indexMeta)
	bucket   []int             // by layout index: the seat's sold bucket

	areas     []Area         // in id order (areas.go)
	areaIndex map[string]int // area -> its index in areas

	slotsOnce sync.Once
	slots     chan struct{} // holds in flight (Config.MaxHoldsInFlight): a semaphore

	holdGroups callGroups // its hold calls to Redis in flight and the holds waiting for one (groups.go)

	rules   showRules                 // the sale rules (sale.go)
	queue   atomic.Pointer[queueRead] // the last read of its waiting room (queue.go)
	dropped atomic.Bool               // the engine dropped this copy (dropShow): no script runs on it
}

// holdSlots is the show's semaphore of holds in flight, of n slots.
func (sh *show) holdSlots(n int) chan struct{} {
	sh.slotsOnce.Do(func() { sh.slots = make(chan struct{}, n) })
	return sh.slots
}

// inventoryReadMin is the least bound of a show's inventory read: a large show's read
// (100,000 seats) must not fail under a short Config.StatementTimeout, which is meant
// for a confirmation's statements.
const inventoryReadMin = 10 * time.Second

// show returns a show's inventory, loading it from PostgreSQL on first use: one read
// for every caller at the time, bounded by Config.StatementTimeout (inventoryReadMin at
// least), that each caller waits for until its ctx ends (shared). An unknown show id is remembered for
// Config.UnknownShowTTL. A cached show's identity is read again in the background once
// its rules are older than rulesRefresh (refreshRules).
func (e *Engine) show(ctx context.Context, showID string) (*show, error) {
	if sh, known := e.shows.get(showID); sh != nil {
		e.refreshRules(sh)
		return sh, nil
	} else if !known {
		return nil, notFound("show %q", showID)
	}
	bound := max(e.cfg.StatementTimeout, inventoryReadMin)
	sh, _, err := shared(ctx, &e.loads, showID, "postgres", bound, func(ctx context.Context) (*show, error) {
		if sh, _ := e.shows.get(showID); sh != nil {
			return sh, nil
		}
		rows, err := e.q.SeatLayoutListByShow(ctx, showID)
		if err != nil {
			return nil, unavailable("postgres", err)
		}
		areas, epoch, err := e.loadAreas(ctx, showID, rows)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 && len(areas) == 0 {
			e.shows.forget(showID, time.Now().Add(e.cfg.UnknownShowTTL))
			return nil, notFound("show %q", showID)
		}
		sh := newShow(e.cfg.KeyPrefix, showID, epoch, layoutFromRows(rows))
		sh.setAreas(areas)
		return e.adopt(sh), nil
	})
	if err != nil {
		return nil, err
	}
	return sh, nil
}

// showCache keeps at most max shows' inventories (the oldest loaded go first) and
// remembers, for a while, show ids that do not exist (at most max of them too).
type showCache struct {
	mu      sync.RWMutex
	max     int
	shows   map[string]*show
	order   []string             // load order of shows, for eviction
	unknown map[string]time.Time // show id -> until when it is known not to exist
}

func newShowCache(max int) *showCache {
	return &showCache{max: max, shows: map[string]*show{}, unknown: map[string]time.Time{}}
}

// get returns the cached show, or nil; known is false when the id is remembered as
// unknown.
func (c *showCache) get(id string) (sh *show, known bool) {
	c.mu.RLock()
	sh = c.shows[id]
	until, isUnknown := c.unknown[id]
	c.mu.RUnlock()
	return sh, sh != nil || !isUnknown || time.Now().After(until)
}

// put caches sh unless that show (its identity) or a later one is cached already, and
// returns the cached one, and the copy of an earlier show it replaced (nil if none).
func (c *showCache) put(sh *show) (cached, replaced *show) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if have := c.shows[sh.id]; have != nil {
		if have.epoch >= sh.epoch {
			return have, nil
		}
		c.shows[sh.id] = sh
		return sh, have
	}
	delete(c.unknown, sh.id)
	for len(c.shows) >= c.max {
		oldest := c.order[0]
		c.order = c.order[1:]
		delete(c.shows, oldest)
	}
	c.shows[sh.id] = sh
	c.order = append(c.order, sh.id)
	return sh, nil
}

// all returns the cached shows.
func (c *showCache) all() []*show {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Collect(maps.Values(c.shows))
}

// remove drops sh if it is the cached copy of its show.
func (c *showCache) remove(sh *show) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shows[sh.id] != sh {
		return
	}
	delete(c.shows, sh.id)
	c.order = slices.DeleteFunc(c.order, func(o string) bool { return o == sh.id })
}

// forget remembers that id is not a show, until until.
func (c *showCache) forget(id string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.unknown) >= c.max {
		clear(c.unknown)
	}
	c.unknown[id] = until
}

// newShow builds a show's in-memory inventory from its identity and layout.
func newShow(prefix, showID string, epoch int64, layout []Seat) *show {
	seats := make([]string, len(layout))
	for i, s := range layout {
		seats[i] = s.ID
	}
	slices.Sort(seats)
	sh := &show{id: showID, epoch: epoch, k: newKeys(prefix, showID), seats: seats, layout: layoutOrder(layout),
		holdKeys: make(map[string]string, len(seats)), soldKeys: make(map[string]string, len(seats))}
	sh.index = make(map[string]int, len(seats))
	for i, s := range sh.layout {
		sh.index[s.ID] = i
	}
	sh.bySeat = make([]int, len(seats))
	sh.bucket = make([]int, len(seats))
	for i, s := range sh.seats {
		sh.bucket[sh.index[s]] = i / soldBucketSize
	}
	sh.indexMeta()
	for i, s := range sh.seats {
		sh.bySeat[i] = sh.index[s]
		sh.holdKeys[s] = sh.k.hold(s)
		if i%soldBucketSize == 0 {
			sh.buckets = append(sh.buckets, sh.k.sold(i/soldBucketSize))
		}
		sh.soldKeys[s] = sh.buckets[i/soldBucketSize]
	}
	return sh
}

// bestScale spaces ranks in a best-available score: rank * bestScale + layout index.
const bestScale = 1 << 20

// runSegment bounds the seats of a row that adjacency joins: a longer row (a show
// created from bare ids is one row) is indexed as segments of this many seats, and a
// best-available block never spans two. It bounds the walk along a row that each
// seat change makes in the index.
const runSegment = 32

// bestSection is a section of the layout as the best-available index has it: its label
// and its seats' category (best.lua numbers them; a hold chooses among some).
type bestSection struct{ section, category string }

// indexMeta computes each seat's best-available meta: its score, its section's number
// (in layout order), its segment (the layout index of the segment's first seat: a run of
// at most runSegment adjacent seats of one row) and its place in the segment, from 1.
func (sh *show) indexMeta() {
	sh.sections = nil
	numbers := map[string]int{}
	sh.meta = make([]string, len(sh.layout))
	sh.place = make([]int, len(sh.layout))
	inRow := make([]int, len(sh.layout)) // the seat's place in its row
	for i := 1; i < len(sh.layout); i++ {
		if a, b := sh.layout[i-1], sh.layout[i]; a.Section == b.Section && a.Row == b.Row {
			inRow[i] = inRow[i-1] + 1
		}
	}
	joined := func(i, j int) bool { // j = i+1: side by side in one segment of a row
		a, b := sh.layout[i], sh.layout[j]
		return a.Section == b.Section && a.Row == b.Row && b.Position == a.Position+1 && inRow[j]%runSegment != 0
	}
	seg := 0
	for i, s := range sh.layout {
		sec, ok := numbers[s.Section]
		if !ok {
			sec = len(sh.sections)
			numbers[s.Section] = sec
			sh.sections = append(sh.sections, bestSection{s.Section, s.Category})
		}
		if i > 0 && joined(i-1, i) {
			sh.place[i] = sh.place[i-1] + 1
		} else {
			seg, sh.place[i] = i, 1
		}
		sh.meta[i] = strconv.FormatInt(int64(s.Rank)*bestScale+int64(i), 10) + " " + strconv.Itoa(sec) + " " + strconv.Itoa(seg) + " " + strconv.Itoa(sh.place[i])
	}
}

// joinedRight reports whether seat i (layout index) is adjacent to seat i+1 for
// best-available blocks (one segment holds both).
func (sh *show) joinedRight(i int) bool { return i+1 < len(sh.place) && sh.place[i+1] > 1 }

// scriptKeys returns the common key layout of the scripts for these seats (counter,
// holder zset, hold keys, sold buckets; see internal/lua/common.lua), or ErrNotFound
// naming a seat the show does not have.
func (sh *show) scriptKeys(tag string, seats []string) ([]string, error) {
	n := len(seats)
	ks := make([]string, 2+2*n)
	ks[0], ks[1] = sh.k.gen(), sh.k.holder(tag)
	for i, s := range seats {
		hk, ok := sh.holdKeys[s]
		sk := sh.soldKeys[s]
		if !ok {
			if hk, sk, ok = sh.placeKeys(s); !ok {
				if area, _, _, isPlace := parsePlaceKey(s); isPlace {
					return nil, notFound("area %q in show %q", area, sh.id) // not its place key: that names the hold
				}
				return nil, notFound("seat %q in show %q", s, sh.id)
			}
		}
		ks[2+i], ks[2+n+i] = hk, sk
	}
	return ks, nil
}

// CreateShow creates a show with its seats. Creating a show that exists with the same
// seats does nothing; with other seats it is ErrInvalidArgument (a show's inventory is
// fixed).
func (e *Engine) CreateShow(ctx context.Context, showID string, seatIDs []string) error {
	_, err := e.EnsureShow(ctx, showID, seatIDs)
	return err
}

// EnsureShow is CreateShow that also reports whether it created the show.
func (e *Engine) EnsureShow(ctx context.Context, showID string, seatIDs []string) (created bool, err error) {
	if err := validateID("showID", showID); err != nil {
		return false, err
	}
	seats, err := sortedSeatIDs("seatIDs", seatIDs, e.cfg.MaxSeatsPerShow)
	if err != nil {
		return false, err
	}
	return e.ensureShow(ctx, showID, derivedLayout(seats), nil)
}
