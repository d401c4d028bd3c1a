package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/httpapi"
)

// The seat-map workloads: a 20,000-seat show mid-sale (5,000 seats sold, 5,000 held),
// read by 16 readers in one process straight from the backends (every claim from
// PostgreSQL and a PTTL per unsold seat from Redis, per read: seatsDirect, the baseline),
// the shared SeatMap snapshot and Seats; then over HTTP (the compact map
// and its 304 against /livez on the same server). The change feed to its SSE
// subscribers is feed.go's.

const (
	mapSeats   = 20_000
	mapSold    = 5_000
	mapHeld    = 5_000
	mapReaders = 16
)

// midSale creates the show and brings it mid-sale through eng.
func (e *env) midSale(ctx context.Context, eng *engine.Engine, show string) ([]string, error) {
	seats := make([]string, mapSeats)
	for i := range seats {
		seats[i] = fmt.Sprintf("M%05d", i)
	}
	if err := eng.CreateShow(ctx, show, seats); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := rng.Perm(mapSeats)
	err := parallel(ctx, 32, mapSold+mapHeld, func(ctx context.Context, i int) error {
		h, err := eng.Hold(ctx, engine.HoldRequest{ShowID: show, SeatIDs: []string{seats[order[i]]}, TTL: holdTTL})
		if err != nil || i >= mapSold {
			return err
		}
		_, err = eng.Confirm(ctx, h, engine.ConfirmOptions{})
		return err
	})
	return seats, err
}

// seatsDirect reads a show's seats straight from the backends: the claims from
// PostgreSQL and a PTTL per unsold seat from Redis, on every read. It is the baseline
// the view is measured against.
func seatsDirect(ctx context.Context, q *db.Queries, rdb redis.UniversalClient, prefix, show string, seats []string) ([]engine.SeatState, error) {
	claims, err := q.SeatClaimListByShow(ctx, show)
	if err != nil {
		return nil, err
	}
	sold := make(map[string]bool, len(claims))
	for _, c := range claims {
		sold[c.SeatID] = true
	}
	pipe := rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(seats))
	base := showBase(prefix, show) + "hold:"
	for i, s := range seats {
		if !sold[s] {
			ttls[i] = pipe.PTTL(ctx, base+s)
		}
	}
	now := time.Now()
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]engine.SeatState, len(seats))
	for i, s := range seats {
		out[i] = engine.SeatState{SeatID: s, Status: engine.SeatFree}
		switch {
		case sold[s]:
			out[i].Status = engine.SeatSold
		case ttls[i].Val() >= 0:
			exp := now.Add(ttls[i].Val())
			out[i].Status, out[i].ExpiresAt = engine.SeatHeld, &exp
		}
	}
	return out, nil
}

// pgXacts is the scratch database's transaction count. A backend publishes its
// statistics at the end of a transaction at most once a second, an idle one within
// 10 s, and one that exits at once: the pool's connections are closed first, so that
// every backend has published. The count leaves out the earlier calls' own queries
// (each published when the next call closes its connection).
func (e *env) pgXacts(ctx context.Context) (float64, error) {
	e.pool.Reset()
	time.Sleep(300 * time.Millisecond)
	var n float64
	err := e.pool.QueryRow(ctx, "SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	n -= float64(e.xactProbes)
	e.xactProbes++
	return n, err
}

// redisCalls is how many commands Redis has run (INFO commandstats).
func (e *env) redisCalls(ctx context.Context) (float64, error) {
	var n float64
	err := e.infoFields(ctx, "commandstats", func(name, value string) {
		if !strings.HasPrefix(name, "cmdstat_") {
			return
		}
		_, rest, _ := strings.Cut(value, "calls=")
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseFloat(calls, 64)
		n += v
	})
	return n, err
}

// infoFields calls fn with each "name:value" line of an INFO section.
func (e *env) infoFields(ctx context.Context, section string, fn func(name, value string)) error {
	info, err := e.rdb.Info(ctx, section).Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fn(name, value)
		}
	}
	return nil
}

// scriptTime is the time Redis has spent running scripts (FCALL and FCALL_RO, and
// EVALSHA and EVAL, from INFO commandstats): their own work, without the network I/O
// that redisCPU also counts.
func (e *env) scriptTime(ctx context.Context) (time.Duration, error) {
	_, spent, err := e.scriptStats(ctx)
	return spent, err
}

// scriptStats is how many script calls Redis has run and the time it spent in them
// (scriptTime).
func (e *env) scriptStats(ctx context.Context) (calls float64, spent time.Duration, err error) {
	err = e.infoFields(ctx, "commandstats", func(name, value string) {
		switch name {
		case "cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval":
		default:
			return
		}
		for _, f := range strings.Split(value, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				spent += time.Duration(n) * time.Microsecond
			}
		}
	})
	return calls, spent, err
}

// redisCPU is the Redis server's CPU seconds so far (user and system).
func (e *env) redisCPU(ctx context.Context) (float64, error) {
	var sec float64
	err := e.infoFields(ctx, "cpu", func(name, value string) {
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, _ := strconv.ParseFloat(value, 64)
			sec += f
		}
	})
	return sec, err
}

func (e *env) seatMapWorkload(ctx context.Context, r *Report) error {
	// The reading engine does no background PostgreSQL work while measured (its marker
	// repair loop would add 4 transactions a second that are not reads).
	eng, err := e.engine(engine.Config{MarkerRepairInterval: 10 * time.Minute})
	if err != nil {
		return err
	}
	const show = "map20k"
	e.progress("  bringing a %d-seat show mid-sale (%d sold, %d held)", mapSeats, mapSold, mapHeld)
	seats, err := e.midSale(ctx, eng, show)
	if err != nil {
		return err
	}
	if _, err := eng.SeatMap(ctx, show); err != nil { // the view's first build, before timing
		return err
	}
	prefix := e.prefixes[len(e.prefixes)-1]
	q := db.New(e.pool)
	variants := []struct {
		name string
		read func(ctx context.Context) error
	}{
		{"before: PostgreSQL + PTTLs per read", func(ctx context.Context) error {
			_, err := seatsDirect(ctx, q, e.rdb, prefix, show, seats)
			return err
		}},
		{"SeatMap (shared snapshot)", func(ctx context.Context) error {
			_, err := eng.SeatMap(ctx, show)
			return err
		}},
		{"Seats (a fresh slice)", func(ctx context.Context) error {
			_, err := eng.Seats(ctx, show)
			return err
		}},
	}
	// Vacuum and analyze what the sale wrote now, so that autovacuum's transactions do
	// not land in the measured windows.
	if _, err := e.pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return err
	}
	var before float64
	for _, v := range variants {
		s, use, err := e.readCost(ctx, v.read)
		if err != nil {
			return err
		}
		row := Row{Workload: "seat map: 20k seats mid-sale", Variant: v.name, Clients: mapReaders, OpsPerS: s.rate(),
			P50ms: s.pct(.5), P99ms: s.pct(.99), Note: fmt.Sprintf("%.3g PG xacts/read, %.3g Redis cmds/read (%.0f PG xacts, %.0f pool acquires, %.0f Redis cmds in %.0f reads)%s",
				use.xacts/use.reads, use.redis/use.reads, use.xacts, use.acquires, use.redis, use.reads, errNote(s))}
		if before == 0 {
			before = s.rate()
		} else {
			row.Ratio = s.rate() / before
		}
		r.Rows = append(r.Rows, row)
		seatMapGoals(r, v.name, s, use)
	}
	if err := e.expiryLag(ctx, r, eng); err != nil {
		return err
	}
	return e.seatMapHTTP(ctx, r, eng, show)
}

// readUse is what a seat-map read workload asked of the backends: PostgreSQL
// transactions, the pool's acquisitions (the engine's own use of PostgreSQL) and Redis
// commands, over its reads.
type readUse struct{ reads, xacts, acquires, redis float64 }

// readCost drives read from mapReaders clients and counts what it asked of the
// backends, per measured read an upper bound (the warm-up's reads are not in the
// divisor). pg_stat_database counts every transaction of the database (the counters'
// own query is taken off).
func (e *env) readCost(ctx context.Context, read func(ctx context.Context) error) (stats, readUse, error) {
	x0, err := e.pgXacts(ctx)
	if err != nil {
		return stats{}, readUse{}, err
	}
	a0 := e.pool.Stat().AcquireCount()
	c0, err := e.redisCalls(ctx)
	if err != nil {
		return stats{}, readUse{}, err
	}
	s := drive(ctx, mapReaders, e.o.Warmup, e.o.Duration, func(ctx context.Context, _ int64) error { return read(ctx) })
	c1, err := e.redisCalls(ctx)
	if err != nil {
		return s, readUse{}, err
	}
	acquires := float64(e.pool.Stat().AcquireCount() - a0)
	x1, err := e.pgXacts(ctx)
	if err != nil {
		return s, readUse{}, err
	}
	return s, readUse{reads: float64(s.ops + s.errs), xacts: x1 - x0 - 1, acquires: acquires, redis: c1 - c0 - 1}, nil
}

// seatMapGoals are the goals of the seat map's reads from the engine's view: fast, and
// neither PostgreSQL nor Redis asked.
func seatMapGoals(r *Report, variant string, s stats, use readUse) {
	rc := use.redis / use.reads
	switch variant {
	case "SeatMap (shared snapshot)":
		r.goal("seat map: SeatMap reads/s, 16 readers", ">= 20000", s.rate(), s.rate() >= 20_000)
		r.goal("seat map: SeatMap PostgreSQL uses per read (pool acquires)", "0", use.acquires/use.reads, use.acquires == 0)
		r.goal("seat map: SeatMap Redis commands per read", "<= 0.001", rc, rc <= 0.001)
	case "Seats (a fresh slice)":
		r.goal("seat map: Seats reads/s, 16 readers (40x the old path)", ">= 2000", s.rate(), s.rate() >= 2_000)
		r.goal("seat map: Seats PostgreSQL uses per read (pool acquires)", "0", use.acquires/use.reads, use.acquires == 0)
		r.goal("seat map: Seats Redis commands per read", "<= 0.001", rc, rc <= 0.001)
	}
}

// expiryLag holds 200 free seats of the show for 1-2 s and watches the map until each
// shows free: how long after its hold's expiry (Redis's clock, as Hold.ExpiresAt).
func (e *env) expiryLag(ctx context.Context, r *Report, eng *engine.Engine) error {
	const n = 200
	m, err := eng.SeatMap(ctx, "map20k")
	if err != nil {
		return err
	}
	exp := map[int]time.Time{} // layout index -> expiry
	for i := 0; i < len(m.States) && len(exp) < n; i++ {
		if m.States[i] != engine.SeatFree {
			continue
		}
		h, err := eng.Hold(ctx, engine.HoldRequest{ShowID: "map20k", SeatIDs: []string{m.Layout[i].ID}, TTL: time.Second + time.Duration(len(exp))*5*time.Millisecond})
		if err != nil {
			return err
		}
		exp[i] = h.ExpiresAt
	}
	var lags []time.Duration
	deadline := time.Now().Add(10 * time.Second)
	for len(exp) > 0 && time.Now().Before(deadline) {
		m, err := eng.SeatMap(ctx, "map20k")
		if err != nil {
			return err
		}
		now := time.Now()
		for i, t := range exp {
			if m.States[i] == engine.SeatFree {
				lags = append(lags, now.Sub(t))
				delete(exp, i)
			}
		}
		time.Sleep(time.Millisecond)
	}
	if len(exp) > 0 {
		return fmt.Errorf("%d expired holds never showed free", len(exp))
	}
	slices.Sort(lags)
	pct := func(p float64) float64 {
		return float64(lags[min(len(lags)-1, int(float64(len(lags))*p))].Microseconds()) / 1000
	}
	r.Rows = append(r.Rows, Row{Workload: "seat map: expiries", Variant: "hold expiry -> free in the map", Clients: 1,
		P50ms: pct(.5), P99ms: pct(.99), Note: fmt.Sprintf("%d holds of 1-2 s; first free %.1f ms after its expiry (negative: before, by the clocks' rounding)", n, pct(0))})
	r.goal("seat map: expired hold shows free, p99 after its Redis expiry (ms)", "<= 250", pct(.99), pct(.99) <= 250 && pct(0) > -5)
	return nil
}

func errNote(s stats) string {
	if s.errs == 0 {
		return ""
	}
	return fmt.Sprintf(", %d errors", s.errs)
}

// serveAPI serves eng's HTTP API on a loopback port until the returned stop.
func serveAPI(eng *engine.Engine) (addr string, stop func(), err error) {
	api, err := httpapi.New(eng, httpapi.Options{ReadRateLimit: 1e9, ReadRateBurst: 1 << 30, RateLimit: 1e9, RateBurst: 1 << 30,
		MaxStreams: 100_000, MaxStreamsPerAddress: 100_000, StreamConnectRate: 1e6})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// seatMapHTTP measures GET /livez, the compact map and its 304 on one server.
func (e *env) seatMapHTTP(ctx context.Context, r *Report, eng *engine.Engine, show string) error {
	addr, stop, err := serveAPI(eng)
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	base := "http://" + addr
	get := func(ctx context.Context, path string, h http.Header) (int, int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, "", err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, int(n), resp.Header.Get("ETag"), nil
	}
	_, plain, etag, err := get(ctx, "/v1/shows/"+show+"/seats", nil)
	if err != nil {
		return err
	}
	_, zipped, _, err := get(ctx, "/v1/shows/"+show+"/seats", http.Header{"Accept-Encoding": {"gzip"}})
	if err != nil {
		return err
	}
	want := func(status int) func(int) error {
		return func(got int) error {
			if got != status {
				return fmt.Errorf("status %d, want %d", got, status)
			}
			return nil
		}
	}
	variants := []struct {
		name, path string
		h          http.Header
		check      func(int) error
		note       string
	}{
		{"GET /livez", "/livez", nil, want(200), ""},
		{"compact map, gzip", "/v1/shows/" + show + "/seats", http.Header{"Accept-Encoding": {"gzip"}}, want(200),
			fmt.Sprintf("%d bytes (%d without gzip) for %d seats", zipped, plain, mapSeats)},
		{"304 revalidation", "/v1/shows/" + show + "/seats", http.Header{"If-None-Match": {etag}}, want(304), ""},
	}
	var livez float64
	for _, v := range variants {
		s := drive(ctx, mapReaders, e.o.Warmup, e.o.Duration, func(ctx context.Context, _ int64) error {
			status, _, _, err := get(ctx, v.path, v.h)
			if err != nil {
				return err
			}
			return v.check(status)
		})
		row := Row{Workload: "seat map over HTTP", Variant: v.name, Clients: mapReaders, OpsPerS: s.rate(),
			P50ms: s.pct(.5), P99ms: s.pct(.99), Note: v.note + errNote(s)}
		if livez == 0 {
			livez = s.rate()
		} else {
			row.Ratio = s.rate() / livez
		}
		r.Rows = append(r.Rows, row)
		switch v.name {
		case "compact map, gzip":
			r.goal("seat map over HTTP: compact map vs /livez", ">= 0.25", row.Ratio, row.Ratio >= 0.25)
		case "304 revalidation":
			r.goal("seat map over HTTP: 304 vs /livez", ">= 0.8", row.Ratio, row.Ratio >= 0.8)
		}
	}
	return nil
}

// counterValue is the value of a counter in reg (0 when it has none).
func counterValue(reg *prometheus.Registry, name string) float64 {
	fams, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// thousands writes n with comma separators: 5,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// field returns the JSON string value after key in line (no escapes in what it reads).
func field(line []byte, key string) string {
	at := bytes.Index(line, []byte(key))
	if at < 0 {
		return ""
	}
	v := line[at+len(key):]
	end := bytes.IndexByte(v, '"')
	if end < 0 {
		return ""
	}
	return string(v[:end])
}
