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
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = fmt.Sprintf("J%04d", i)
	}
	// Each round joins a room of its own, from empty: the rounds compare alike.
	room := func(round int) (string, error) {
		show := fmt.Sprintf("room-join-%d", round)
		if err := eng.CreateShow(ctx, show, ids); err != nil {
			return "", err
		}
		return show, eng.SetSaleRules(ctx, show, engine.SaleRules{HolderLimit: 6, Queue: &engine.WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	}
	time.Sleep(time.Second) // the engine's first library clean-up has run
	var alone, crowded []joinRound
	for round := range joinRounds {
		stale := round%2 == 1
		if stale {
			if err := e.loadStaleLibraries(ctx); err != nil {
				return err
			}
		}
		// A round of warm-up first, not measured: Redis's Lua collector settles.
		warm, err := room(100 + round)
		if err == nil {
			_, err = e.joinRound(ctx, eng, warm, round)
		}
		var jr joinRound
		if show, rerr := room(round); err == nil && rerr == nil {
			jr, err = e.joinRound(ctx, eng, show, round)
		} else if err == nil {
			err = rerr
		}
		if stale {
			if derr := e.deleteStaleLibraries(ctx); err == nil {
				err = derr
			}
			crowded = append(crowded, jr)
		} else {
			alone = append(alone, jr)
		}
		if err != nil {
			return err
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

// joinRound has joinCallers callers join joinsPerRound new holders to show's room, and
// measures what Redis spent.
func (e *env) joinRound(ctx context.Context, eng *engine.Engine, show string, round int) (joinRound, error) {
	cpu0, err := e.redisCPU(ctx)
	if err != nil {
		return joinRound{}, err
	}
	calls0, script0, err := e.fcalls(ctx)
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
	cpu1, err := e.redisCPU(ctx)
	if err != nil {
		return joinRound{}, err
	}
	calls1, script1, err := e.fcalls(ctx)
	if err != nil {
		return joinRound{}, err
	}
	lat := slices.Concat(lats...)
	slices.Sort(lat)
	return joinRound{cpuPerJoin: (cpu1 - cpu0) * 1e6 / joinsPerRound, scriptPerCall: float64((script1 - script0).Microseconds()) / (calls1 - calls0),
		lat: lat, elapsed: elapsed}, nil
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

// fcalls is how many FCALLs Redis has run and the time it spent in them (INFO
// commandstats).
func (e *env) fcalls(ctx context.Context) (calls float64, spent time.Duration, err error) {
	err = e.infoFields(ctx, "commandstats", func(name, value string) {
		if name != "cmdstat_fcall" {
			return
		}
		for _, f := range strings.Split(value, ",") {
			k, v, _ := strings.Cut(f, "=")
			var n float64
			_, _ = fmt.Sscan(v, &n)
			switch k {
			case "calls":
				calls = n
			case "usec":
				spent = time.Duration(n) * time.Microsecond
			}
		}
	})
	return calls, spent, err
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
