package engine

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// AreaState is a standing area's places as the seat map shows them: Free is Capacity
// less the places of live holds (Held) and of bookings (Sold).
type AreaState struct {
	AreaID            string
	Section, Category string
	Capacity          int
	Free, Held, Sold  int
}

// The seat map's areas (view.go). The feed names a hold's places of an area by its place
// key (<area>~<count>~<hold id>, areas.go) wherever it names a seat: held until x ("h"),
// gone ("d"), sold ("s"), no longer sold ("u"). The view keeps each place key it has
// seen live, by area, and counts them: a key is one set member, so an entry applied
// twice (a rebuild's catch-up) counts once. Area a takes slot len(layout)+a of the
// view's touched seats and expiry heap, so its state is published with the seats'.

// placeHold is a place key's hold: its area, count and expiry (Redis ms).
type placeHold struct {
	area, count int
	exp         int64
}

// areaView is the view's record of the show's areas: each area's place keys, and their
// places summed (kept with the keys, so that a publication costs nothing per hold).
type areaView struct {
	held         []map[string]placeHold // by area: live place keys of holds
	sold         []map[string]int       // by area: place keys of bookings -> count
	nHeld, nSold []int                  // by area: the places of held and sold
	pub          []AreaState            // as published, in the show's area order
}

func newAreaView(sh *show) areaView {
	a := areaView{held: make([]map[string]placeHold, len(sh.areas)), sold: make([]map[string]int, len(sh.areas)),
		nHeld: make([]int, len(sh.areas)), nSold: make([]int, len(sh.areas)), pub: make([]AreaState, len(sh.areas))}
	for i, ar := range sh.areas {
		a.held[i], a.sold[i] = map[string]placeHold{}, map[string]int{}
		a.pub[i] = AreaState{AreaID: ar.ID, Section: ar.Section, Category: ar.Category, Capacity: ar.Capacity, Free: ar.Capacity}
	}
	return a
}

// applyPlace applies a feed field (h, d, s, u) naming key, when key is a place key of
// one of the show's areas; x is the entry's expiry for "h". Caller holds mu.
func (v *view) applyPlace(field, key string, x int64) {
	id, count, _, ok := parsePlaceKey(key)
	a, known := v.sh.areaIndex[id]
	if !ok || !known {
		return
	}
	switch field {
	case "h":
		v.areas.hold(a, key, placeHold{area: a, count: count, exp: x})
		heap.Push(&v.expq, expiry{at: x, idx: len(v.sh.layout) + a, key: key})
	case "d":
		v.areas.drop(a, key)
	case "s":
		v.areas.drop(a, key)
		v.areas.sell(a, key, count)
	case "u":
		v.areas.unsell(a, key)
	}
	v.touch(len(v.sh.layout) + a)
}

// hold records place key k of area a as held (again: its count or expiry may change).
func (r *areaView) hold(a int, k string, h placeHold) {
	r.drop(a, k)
	r.held[a][k] = h
	r.nHeld[a] += h.count
}

// drop forgets place key k of area a as held.
func (r *areaView) drop(a int, k string) {
	if h, ok := r.held[a][k]; ok {
		r.nHeld[a] -= h.count
		delete(r.held[a], k)
	}
}

// sell records place key k of area a as sold, count places.
func (r *areaView) sell(a int, k string, count int) {
	r.unsell(a, k)
	r.sold[a][k] = count
	r.nSold[a] += count
}

// unsell forgets place key k of area a as sold.
func (r *areaView) unsell(a int, k string) {
	if n, ok := r.sold[a][k]; ok {
		r.nSold[a] -= n
		delete(r.sold[a], k)
	}
}

// expirePlaces drops the place key of expiry x (slot len(layout)+area) when its hold is
// still the one that expires then. Caller holds mu.
func (v *view) expirePlaces(x expiry) {
	a := x.idx - len(v.sh.layout)
	if h, ok := v.areas.held[a][x.key]; ok && h.exp == x.at {
		v.areas.drop(a, x.key)
		v.touch(x.idx)
	}
}

// areaState is area a's places: every hold it counts is live (expireDue drops the
// others first). Caller holds mu.
func (v *view) areaState(a int) AreaState {
	st := v.areas.pub[a]
	st.Held, st.Sold = v.areas.nHeld[a], v.areas.nSold[a]
	st.Free = max(st.Capacity-st.Held-st.Sold, 0)
	return st
}

// publishAreas publishes the touched areas' states (slots len(layout) and up of
// touched) and returns those that changed. Caller holds mu.
func (v *view) publishAreas(touched []int) []AreaState {
	var changed []AreaState
	n := len(v.sh.layout)
	for _, i := range touched {
		if i < n {
			continue
		}
		a := i - n
		if st := v.areaState(a); st != v.areas.pub[a] {
			v.areas.pub[a] = st
			changed = append(changed, st)
		}
	}
	return changed
}

// areaReads is what a rebuild reads of the show's areas: the place keys of the holds
// in each area's expiry set (ax) with their hold keys' expiries, and the places sold.
type areaReads struct {
	keys   [][]string             // by area
	scores [][]int64              // by area, as keys: their expiry as ax has it
	exps   [][]*redis.DurationCmd // by area, as keys
	sold   map[string]int         // claimed place key -> count
}

// readAreas reads the show's areas for a rebuild: the place keys first (one round trip),
// then their expiries in pipe (run by the caller with the seats'), and the sold places
// from PostgreSQL.
func (v *view) readAreas(ctx context.Context, pipe redis.Pipeliner) (areaReads, error) {
	sh := v.sh
	r := areaReads{keys: make([][]string, len(sh.areas)), exps: make([][]*redis.DurationCmd, len(sh.areas)),
		scores: make([][]int64, len(sh.areas)), sold: map[string]int{}}
	if len(sh.areas) == 0 {
		return r, nil
	}
	members := make([]*redis.ZSliceCmd, len(sh.areas))
	kp := v.e.rdb.Pipeline()
	for a, ar := range sh.areas {
		members[a] = kp.ZRangeWithScores(ctx, sh.k.base+"ax:"+ar.ID, 0, -1)
	}
	if _, err := kp.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return r, v.e.redisErr(err)
	}
	for a := range sh.areas {
		for _, z := range members[a].Val() {
			k, _ := z.Member.(string)
			r.keys[a] = append(r.keys[a], k)
			r.scores[a] = append(r.scores[a], int64(z.Score))
			r.exps[a] = append(r.exps[a], pipe.PExpireTime(ctx, sh.k.hold(k)))
		}
	}
	rows, err := v.e.q.PlaceMarkListByShow(ctx, sh.id)
	if err != nil {
		return r, v.e.pgErr(err)
	}
	for _, row := range rows {
		if row.Claimed {
			r.sold[row.AreaID+"~"+strconv.Itoa(int(row.Places))+"~"+row.HoldID] = int(row.Places)
		}
	}
	return r, nil
}

// setAreas makes r the view's areas (a rebuild, under mu): every hold key still alive,
// and those gone that expired after the waitlist horizon (0: none; ax keeps them until
// a sweep gives their places back: see readLateHolds), and the places sold; every area
// touched.
func (v *view) setAreas(r areaReads, horizon int64) {
	n := len(v.sh.layout)
	for a := range v.sh.areas {
		clear(v.areas.held[a])
		clear(v.areas.sold[a])
		v.areas.nHeld[a], v.areas.nSold[a] = 0, 0
		for j, k := range r.keys[a] {
			x := r.exps[a][j].Val().Milliseconds()
			if x <= 0 && horizon > 0 && r.scores[a][j] > horizon {
				x = r.scores[a][j]
			}
			if x > 0 {
				if _, c, _, ok := parsePlaceKey(k); ok {
					v.areas.hold(a, k, placeHold{area: a, count: c, exp: x})
					v.expq = append(v.expq, expiry{at: x, idx: n + a, key: k})
				}
			}
		}
		v.touch(n + a)
	}
	for k, c := range r.sold {
		if id, _, _, ok := parsePlaceKey(k); ok {
			if a, known := v.sh.areaIndex[id]; known {
				v.areas.drop(a, k)
				v.areas.sell(a, k, c)
			}
		}
	}
}

// mergeAreas is areas of events in order as one list: each area once, in its last
// state.
func mergeAreas(into []AreaState, more []AreaState) []AreaState {
	for _, st := range more {
		if k := slices.IndexFunc(into, func(s AreaState) bool { return s.AreaID == st.AreaID }); k >= 0 {
			into[k] = st
			continue
		}
		into = append(into, st)
	}
	return into
}
