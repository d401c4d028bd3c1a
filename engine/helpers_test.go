package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/db"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// env is one test's engine with its own database and Redis key prefix.
type env struct {
	t    *testing.T
	e    *Engine
	pool *pgxpool.Pool
	rdb  redis.UniversalClient
	cfg  Config
}

// newEnv makes an engine on a fresh database and the shared test Redis (own prefix).
// tweak may change the Config before New.
func newEnv(t *testing.T, tweak ...func(*Config)) *env {
	t.Helper()
	return newEnvWith(t, testsvc.Database(t), testsvc.Redis(t), tweak...)
}

func newEnvWith(t *testing.T, pool *pgxpool.Pool, rdb redis.UniversalClient, tweak ...func(*Config)) *env {
	t.Helper()
	cfg := Config{KeyPrefix: testsvc.KeyPrefix(t)}
	for _, f := range tweak {
		f(&cfg)
	}
	e, err := New(pool, rdb, &cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(e.Close)
	return &env{t: t, e: e, pool: pool, rdb: rdb, cfg: e.cfg}
}

// twin is a second engine (another process, say) on the same database and Redis.
func (v *env) twin() *Engine {
	v.t.Helper()
	cfg := v.cfg
	e, err := New(v.pool, v.rdb, &cfg)
	if err != nil {
		v.t.Fatal(err)
	}
	v.t.Cleanup(e.Close)
	return e
}

func seatNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("S%03d", i)
	}
	return s
}

// newProxiedEnv is an env whose Redis (a private server) the engine reaches through a
// proxy the test can hold or cut (testsvc.Proxy).
func newProxiedEnv(t *testing.T) (*env, *testsvc.Proxy) {
	t.Helper()
	srv := testsvc.StartRedis(t)
	proxy := testsvc.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return newEnvWith(t, testsvc.Database(t), rdb), proxy
}

func (v *env) show(id string, seats ...string) {
	v.t.Helper()
	if err := v.e.CreateShow(v.t.Context(), id, seats); err != nil {
		v.t.Fatalf("CreateShow(%s): %v", id, err)
	}
}

func (v *env) hold(show string, ttl time.Duration, holder string, seats ...string) Hold {
	v.t.Helper()
	h, err := v.e.Hold(v.t.Context(), HoldRequest{ShowID: show, SeatIDs: seats, TTL: ttl, HolderID: holder})
	if err != nil {
		v.t.Fatalf("Hold(%s %v): %v", show, seats, err)
	}
	return h
}

func (v *env) count(query string, args ...any) int {
	v.t.Helper()
	var n int
	if err := v.pool.QueryRow(v.t.Context(), query, args...).Scan(&n); err != nil {
		v.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// bookings counts a show's confirmed bookings.
func (v *env) bookings(show string) int {
	return v.count("SELECT count(*) FROM bookings WHERE show_id = $1 AND status = 'confirmed'", show)
}

// doubleBookings counts seats claimed by more than one confirmed booking, checked
// independently of the claim table's primary key: through booking_seats.
func (v *env) doubleBookings() int {
	return v.count(`SELECT count(*) FROM (
		SELECT bs.show_id, bs.seat_id FROM booking_seats bs
		JOIN bookings b USING (show_id, booking_id)
		WHERE b.status = 'confirmed'
		GROUP BY bs.show_id, bs.seat_id HAVING count(*) > 1) d`)
}

// waitExpired waits until Redis dropped every hold key of h (PTTL -2), or fails.
func (v *env) waitExpired(h Hold) {
	v.t.Helper()
	k := newKeys(v.cfg.KeyPrefix, h.ShowID)
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range h.SeatIDs {
		for {
			d, err := v.rdb.PTTL(context.Background(), k.hold(s)).Result()
			if err != nil {
				v.t.Fatalf("PTTL: %v", err)
			}
			if d == -2 {
				break
			}
			if time.Now().After(deadline) {
				v.t.Fatalf("hold on %s never expired (PTTL %v)", s, d)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// holdValue is the raw Redis value of a seat's hold key ("" when absent).
func (v *env) holdValue(show, seat string) string {
	v.t.Helper()
	s, err := v.rdb.Get(context.Background(), newKeys(v.cfg.KeyPrefix, show).hold(seat)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		v.t.Fatalf("GET: %v", err)
	}
	return s
}

func (v *env) counter(show string) int64 {
	v.t.Helper()
	n, err := v.rdb.Get(context.Background(), newKeys(v.cfg.KeyPrefix, show).gen()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		v.t.Fatalf("GET gen: %v", err)
	}
	return n
}

// soldMarkers is Redis's seat -> generation map of a show's sold seats, across its
// buckets (tombstones of cancelled bookings left out).
func (v *env) soldMarkers(show string) map[string]string {
	v.t.Helper()
	sh, err := v.e.show(context.Background(), show)
	if err != nil {
		v.t.Fatal(err)
	}
	all := map[string]string{}
	for _, b := range sh.buckets {
		m, err := v.rdb.HGetAll(context.Background(), b).Result()
		if err != nil {
			v.t.Fatalf("HGETALL: %v", err)
		}
		for s, g := range m {
			if !strings.HasPrefix(g, "-") {
				all[s] = g
			}
		}
	}
	return all
}

// soldKey is the sold-marker hash that holds a seat's marker.
func (v *env) soldKey(show, seat string) string {
	v.t.Helper()
	sh, err := v.e.show(context.Background(), show)
	if err != nil {
		v.t.Fatal(err)
	}
	return sh.soldKeys[seat]
}

// claims is the database's seat -> booking id map of a show.
func (v *env) claims(show string) map[string]string {
	return v.claimsBy(show, func(r db.SeatClaimListByShowRow) string { return r.BookingID.String() })
}

// claimMarks is what Redis's sold markers must say by the database: its seat ->
// generation map of a show's claimed seats.
func (v *env) claimMarks(show string) map[string]string {
	return v.claimsBy(show, func(r db.SeatClaimListByShowRow) string { return strconv.FormatInt(r.Generation, 10) })
}

func (v *env) claimsBy(show string, value func(db.SeatClaimListByShowRow) string) map[string]string {
	v.t.Helper()
	rows, err := v.e.q.SeatClaimListByShow(v.t.Context(), show)
	if err != nil {
		v.t.Fatal(err)
	}
	m := map[string]string{}
	for _, r := range rows {
		m[r.SeatID] = value(r)
	}
	return m
}

// redisSnapshot is every key under the engine's prefix with its value, for "nothing
// changed" assertions; the sets of shows the engine's loops look at are left out, and
// so is the waitlist horizon that the waitlist loop moves (its key, its feed entries
// and the feed's count of them).
func (v *env) redisSnapshot() string {
	v.t.Helper()
	ctx := context.Background()
	var out []string
	keys, err := testsvc.Keys(ctx, v.rdb, v.cfg.KeyPrefix+":*")
	if err != nil {
		v.t.Fatal(err)
	}
	for _, k := range keys {
		if k == v.e.movesKey() || k == v.e.waitlistsKey() {
			continue // the loops' lists of shows to look at: a call may list its show before it is refused
		}
		if strings.HasSuffix(k, ":wl:at") || strings.HasSuffix(k, ":feed:n") {
			continue
		}
		typ := v.rdb.Type(ctx, k).Val()
		var val string
		switch typ {
		case "string":
			val = v.rdb.Get(ctx, k).Val()
		case "hash":
			val = fmt.Sprint(v.rdb.HGetAll(ctx, k).Val())
		case "zset":
			val = fmt.Sprint(v.rdb.ZRangeWithScores(ctx, k, 0, -1).Val())
		case "stream":
			for _, m := range v.rdb.XRange(ctx, k, "-", "+").Val() {
				if _, horizon := m.Values["w"]; !horizon {
					delete(m.Values, "n")
					val += fmt.Sprint(m.ID, m.Values, " ")
				}
			}
		}
		out = append(out, k+"="+val)
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// dbSnapshot is the engine's tables' contents (without timestamps).
func (v *env) dbSnapshot() string {
	v.t.Helper()
	var s *string
	err := v.pool.QueryRow(v.t.Context(), `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT 'fence ' || show_id || ' ' || seat_id || ' ' || generation FROM seat_fences
		UNION ALL SELECT 'claim ' || show_id || ' ' || seat_id || ' ' || booking_id FROM seat_claims
		UNION ALL SELECT 'booking ' || show_id || ' ' || booking_id || ' ' || status FROM bookings
		UNION ALL SELECT 'event ' || show_id || ' ' || event_id || ' ' || kind FROM booking_events
		UNION ALL SELECT 'seat ' || show_id || ' ' || seat_id FROM seats) t(x)`).Scan(&s)
	if err != nil {
		v.t.Fatal(err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// pgxNewPool opens a pool closed when the test ends.
func pgxNewPool(t *testing.T, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	t.Helper()
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err == nil {
		t.Cleanup(p.Close)
	}
	return p, err
}

// watchSlack is what the watchdog allows a call beyond its documented bound: a loaded
// machine (make test-busy) schedules late, never minutes late.
const watchSlack = 10 * time.Second

// confirmWatched is e.Confirm watched by wd: a call that outlives its documented bound —
// ctx's deadline plus Engine.confirmOverrun — fails the test with every goroutine's
// stack. ctx must have a deadline.
func confirmWatched(ctx context.Context, wd *testsvc.Watchdog, e *Engine, h Hold, opts ConfirmOptions) (Booking, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		panic("confirmWatched: a context without a deadline has no bound to watch")
	}
	defer wd.Watch("Confirm of "+strings.Join(h.SeatIDs, ","), time.Until(deadline)+e.confirmOverrun()+watchSlack)()
	return e.Confirm(ctx, h, opts)
}

// proxiedDatabase is the test's database (base) and a pool that reaches it through a TCP
// proxy of its own, for faults on the wire.
func proxiedDatabase(t *testing.T) (base, pool *pgxpool.Pool, proxy *testsvc.Proxy) {
	t.Helper()
	base = testsvc.Database(t)
	cfg := base.Config().ConnConfig
	proxy = testsvc.StartProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	host, port, _ := strings.Cut(proxy.Addr(), ":")
	pcfg := base.Config().Copy()
	pcfg.ConnConfig.Host = host
	p, _ := strconv.Atoi(port)
	pcfg.ConnConfig.Port = uint16(p)
	pool, err := pgxNewPool(t, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	return base, pool, proxy
}

// cutAtCommit has proxy drop its connection when the next COMMIT passes once armed is
// set (then unset): the COMMIT reaches the server, its reply never comes back.
func cutAtCommit(proxy *testsvc.Proxy) (armed *atomic.Bool) {
	armed = new(atomic.Bool)
	proxy.SetCut(func(chunk []byte) bool {
		return armed.Load() && bytes.Contains(bytes.ToLower(chunk), []byte("commit\x00")) && armed.CompareAndSwap(true, false)
	})
	return armed
}
