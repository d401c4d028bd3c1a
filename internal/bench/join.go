package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/lua"
)

// The waiting room's join: what one costs Redis while a crowd joins, with the scripts'
// library alone on the server, and with eleven libraries of other versions loaded
// beside it (what the engines now delete once no engine of their version has run for
// a while: engine/library.go), in alternating rounds.

const (
	joinRounds     = 6 // alternating: one library, then eleven more
	joinsPerRound  = 8000
	joinCallers    = 200
	staleLibraries = 11
)

// joinRound is one round's measurement.
type joinRound struct {
	cpuPerJoin, scriptPerCall float64 // µs of Redis
	lat                       []time.Duration
	elapsed                   time.Duration
}

func (e *env) joinWorkload(ctx context.Context, r *Report) error {
	eng, err := e.engine(engine.Config{})
	if err != nil {
		return err
	}
	var alone, crowded []joinRound
	for round := range joinRounds {
		stale := round%2 == 1
		jr, err := e.joinRoundOf(ctx, eng, round, stale)
		if err != nil {
			return err
		}
		if stale {
			crowded = append(crowded, jr)
		} else {
			alone = append(alone, jr)
		}
		e.progress("   round %d (%s): Redis CPU %.1f µs a join, the function %.1f µs", round,
			map[bool]string{false: "one library", true: "eleven more"}[stale], jr.cpuPerJoin, jr.scriptPerCall)
	}
	cpu := joinRows(r, "one library", alone)
	cpuStale := joinRows(r, fmt.Sprintf("%d stale libraries beside it", staleLibraries), crowded)
	r.goal("waiting room: Redis CPU per join, one library (µs)", "<= 15", cpu, cpu <= 15)
	e.progress("   Redis CPU per join with %d stale libraries / one library: %.2f", staleLibraries, cpuStale/cpu)
	return nil
}

// joinRoundOf is one round, with the stale libraries loaded beside the engine's when
// stale: a round of warm-up first, not measured (Redis's Lua collector settles), then
// the measured one, each on a room of its own from empty, so that rounds compare alike.
func (e *env) joinRoundOf(ctx context.Context, eng *engine.Engine, round int, stale bool) (jr joinRound, err error) {
	if stale {
		if err := e.loadStaleLibraries(ctx); err != nil {
			return jr, err
		}
		defer func() {
			if derr := e.deleteStaleLibraries(ctx); err == nil {
				err = derr
			}
		}()
	}
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("J%04d", i)
	}
	for _, n := range []int{100 + round, round} {
		show := fmt.Sprintf("room-join-%d", n)
		if err := eng.CreateShow(ctx, show, ids); err != nil {
			return jr, err
		}
		rules := engine.SaleRules{HolderLimit: 6, Queue: &engine.WaitingRoom{OpensAt: time.Now().Add(-time.Second)}}
		if err := eng.SetSaleRules(ctx, show, rules); err != nil {
			return jr, err
		}
		if jr, err = e.joinRound(ctx, eng, show, round); err != nil {
			return jr, err
		}
	}
	return jr, nil
}

// redisMeter is what Redis has spent so far: CPU seconds, script calls and their time.
type redisMeter struct {
	cpu, calls float64
	scripts    time.Duration
}

func (e *env) readRedisMeter(ctx context.Context) (m redisMeter, err error) {
	if m.cpu, err = e.redisCPU(ctx); err != nil {
		return m, err
	}
	m.calls, m.scripts, err = e.scriptStats(ctx)
	return m, err
}

// joinRound has joinCallers callers join joinsPerRound new holders to show's room, and
// measures what Redis spent.
func (e *env) joinRound(ctx context.Context, eng *engine.Engine, show string, round int) (joinRound, error) {
	before, err := e.readRedisMeter(ctx)
	if err != nil {
		return joinRound{}, err
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	lats := make([][]time.Duration, joinCallers)
	began := time.Now()
	var wg sync.WaitGroup
	for c := range joinCallers {
		wg.Go(func() {
			for i := next.Add(1); i <= joinsPerRound; i = next.Add(1) {
				t := time.Now()
				if _, err := eng.Join(ctx, show, fmt.Sprintf("joiner-%d-%d", round, i)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lats[c] = append(lats[c], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	if err := failed.Load(); err != nil {
		return joinRound{}, fmt.Errorf("a join: %w", *err)
	}
	after, err := e.readRedisMeter(ctx)
	if err != nil {
		return joinRound{}, err
	}
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	return joinRound{cpuPerJoin: (after.cpu - before.cpu) * 1e6 / joinsPerRound,
		scriptPerCall: float64((after.scripts - before.scripts).Microseconds()) / (after.calls - before.calls),
		lat:           lat, elapsed: elapsed}, nil
}

// joinRows adds a variant's row (its rounds together) and returns its median Redis CPU
// per join.
func joinRows(r *Report, variant string, rounds []joinRound) float64 {
	var all []time.Duration
	var elapsed time.Duration
	var cpu, script []float64
	for _, jr := range rounds {
		all = append(all, jr.lat...)
		elapsed += jr.elapsed
		cpu, script = append(cpu, jr.cpuPerJoin), append(script, jr.scriptPerCall)
	}
	slices.Sort(all)
	s := stats{ops: int64(len(all)), elapsed: elapsed, lat: all}
	r.Rows = append(r.Rows, Row{Workload: "waiting room: join", Variant: variant, Clients: joinCallers, OpsPerS: s.rate(),
		P50ms: s.pct(.5), P99ms: s.pct(.99),
		Note: fmt.Sprintf("Redis CPU per join %.1f-%.1f µs (median %.1f), the function's own time %.1f-%.1f µs; %d rounds of %s new holders",
			slices.Min(cpu), slices.Max(cpu), median(cpu), slices.Min(script), slices.Max(script), len(rounds), thousands(joinsPerRound))})
	return median(cpu)
}

// median is the middle of xs (the mean of the two middle ones when even).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return 0
	}
	return (s[(n-1)/2] + s[n/2]) / 2
}

// staleLibrary is the name of the i-th library of another version the join rounds
// load: a valid holdfast library name, leased so that no engine deletes it meanwhile.
func staleLibrary(i int) string { return fmt.Sprintf("holdfast_0000000000%02x", 0xe0+i) }

// loadStaleLibraries loads staleLibraries copies of the library under other names on
// every master, as eleven upgrades would have left them.
func (e *env) loadStaleLibraries(ctx context.Context) error {
	for i := range staleLibraries {
		name := staleLibrary(i)
		if err := e.rdb.Set(ctx, "holdfast:library:"+name, "1", time.Hour).Err(); err != nil {
			return err
		}
		code := strings.ReplaceAll(lua.LibraryCode(), lua.LibraryName(), name)
		if err := lua.EachServer(ctx, e.rdb, func(ctx context.Context, c *redis.Client) error {
			return c.FunctionLoad(ctx, code).Err()
		}); err != nil {
			return fmt.Errorf("load a stale library: %w", err)
		}
	}
	return nil
}

// deleteStaleLibraries deletes what loadStaleLibraries loaded, and their leases.
func (e *env) deleteStaleLibraries(ctx context.Context) error {
	for i := range staleLibraries {
		name := staleLibrary(i)
		if err := lua.EachServer(ctx, e.rdb, func(ctx context.Context, c *redis.Client) error {
			return c.FunctionDelete(ctx, name).Err()
		}); err != nil {
			return fmt.Errorf("delete a stale library: %w", err)
		}
		if err := e.rdb.Del(ctx, "holdfast:library:"+name).Err(); err != nil {
			return err
		}
	}
	return nil
}
