package engine

// Failover: a primary and a standby of the test's own (testsvc.StartPostgresPair), the
// standby's WAL through a proxy that partitions or severs it, engines on one URL naming
// both hosts. make test runs each scenario once, briefly; make chaos longer.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/holdfast/holdfast/migrations"
)

// pairEnv is an engine on a primary/standby pair, through one URL naming both
// (TunePool), with short statement bounds so that the scenarios stay short.
func pairEnv(t *testing.T, pair *testsvc.PostgresPair, tweak ...func(*Config)) *env {
	t.Helper()
	return newEnvWith(t, migratedPool(t, pair.URL("postgres")), testsvc.Redis(t), append([]func(*Config){func(c *Config) {
		c.StatementTimeout = time.Second
		c.MarkerRepairInterval = 200 * time.Millisecond
	}}, tweak...)...)
}

// migratedPool is a pool of 20 on url, tuned for failover as holdfast's own is
// (TunePool), over a migrated database.
func migratedPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	TunePool(cfg)
	cfg.MaxConns = 20
	pool, err := pgxNewPool(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// sentinelClient is a go-redis failover client for a Sentinel-form URL, as holdfast
// makes one, with short timeouts.
func sentinelClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseFailoverURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	rdb := redis.NewFailoverClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// lostReported is the set of booking ids the engine's JSON log reported lost.
func lostReported(logs *bytes.Buffer, mu *sync.Mutex) map[string]bool {
	mu.Lock()
	defer mu.Unlock()
	reported := map[string]bool{}
	for _, line := range strings.Split(logs.String(), "\n") {
		var l struct {
			Msg       string `json:"msg"`
			BookingID string `json:"booking_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && strings.Contains(l.Msg, "missing from the database") {
			reported[l.BookingID] = true
		}
	}
	return reported
}

// failoverWorkload is the chaos workload of a failover test, every confirmation of it
// watched (a hang fails the test with every goroutine's stack).
func failoverWorkload(t *testing.T, v *env, show string, seats int) *chaosWorkload {
	w := newChaosWorkload(v, show, seats)
	w.wd = testsvc.NewWatchdog(t)
	return w
}

// confirmProbe holds and confirms one seat after another of show on e, from since on,
// until one confirmation succeeds or ctx ends; it returns when that was. Each
// confirmation is watched by wd.
func confirmProbe(ctx context.Context, wd *testsvc.Watchdog, e *Engine, show string, seats []string) (time.Time, error) {
	var last error
	for i := 0; ctx.Err() == nil; i++ {
		h, err := e.Hold(ctx, HoldRequest{ShowID: show, SeatIDs: []string{seats[i%len(seats)]}, TTL: 30 * time.Second, HolderID: fmt.Sprintf("probe%d", i)})
		if err == nil {
			if _, err = confirmWatched(ctx, wd, e, h, ConfirmOptions{}); err == nil {
				return time.Now(), nil
			}
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("no confirmation: %w (last: %v)", ctx.Err(), last)
}

// probes measure, on each engine, the time from a promotion to its first
// confirmation after it, on a show of their own, while the workload runs.
type probes struct {
	t       *testing.T
	engines []*Engine
	seats   []string
	wg      sync.WaitGroup
	took    []time.Duration
	errs    []error
	wd      *testsvc.Watchdog
}

func newProbes(t *testing.T, v *env, engines []*Engine) *probes {
	p := &probes{t: t, engines: engines, seats: seatNames(100 * len(engines)), took: make([]time.Duration, len(engines)), errs: make([]error, len(engines)),
		wd: testsvc.NewWatchdog(t)}
	v.show("probe", p.seats...)
	return p
}

// promoted starts the probes: call it as soon as the standby is promoted.
func (p *probes) promoted() {
	at := time.Now()
	for i, e := range p.engines {
		p.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done, err := confirmProbe(ctx, p.wd, e, "probe", p.seats[i*100:(i+1)*100])
			p.took[i], p.errs[i] = done.Sub(at), err
		})
	}
}

// wait returns each engine's time to its first confirmation; an engine that never
// confirmed again fails the test.
func (p *probes) wait() []time.Duration {
	p.t.Helper()
	p.wg.Wait()
	for i, err := range p.errs {
		if err != nil {
			p.t.Fatalf("engine %d after the promotion: %v", i, err)
		}
	}
	return p.took
}

// TestFailoverSynchronous: the primary of a synchronous pair dies (SIGKILL of every
// process) mid-sale and the standby is promoted. Every acknowledged booking is on the
// new primary, no seat is booked twice, no refused request has a booking, and the same
// engines confirm again without a restart.
func TestFailoverSynchronous(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, true)
	v := pairEnv(t, pair)
	engines := []*Engine{v.e, v.twin()}
	w := failoverWorkload(t, v, "failover", 30)
	d := 3 * time.Second * chaosScale()
	probe := newProbes(t, v, engines)
	var fault sync.WaitGroup
	fault.Go(func() {
		time.Sleep(d / 3)
		pair.Primary.Kill()
		pair.Promote()
		probe.promoted()
	})
	w.run(engines, 16, d)
	fault.Wait()
	ds := probe.wait()
	w.check(t, v.e)
	t.Logf("first confirmation after the promotion: %v; in-flight confirmations settled by the engines: %s; %s", ds, settledCounts(engines[0]), settledCounts(engines[1]))
}

// TestFailoverStandbyPartitioned: the synchronous standby stops answering (its link is
// partitioned) for longer than a batch's bound while confirmations go on, then the
// primary dies and the standby — which never received what the primary committed
// since — is promoted. A confirmation made while the standby is cut off reaches COMMIT,
// which waits for the standby: it is answered ErrUnavailable, not success; after the
// promotion the engine commits it again on the new primary, and its retry gets that
// booking. No booking committed on the old primary alone was acknowledged: every
// acknowledged booking is on the new primary.
func TestFailoverStandbyPartitioned(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, true)
	v := pairEnv(t, pair)
	engines := []*Engine{v.e, v.twin()}
	w := failoverWorkload(t, v, "partitioned", 30)
	v.show("cutoff", "A1")
	cut := v.hold("cutoff", time.Minute, "cut", "A1")
	batch := v.e.batchTimeout()
	d := 2*time.Second + batch + time.Second + time.Second*chaosScale()
	probe := newProbes(t, v, engines)
	var cutErr error
	var fault sync.WaitGroup
	fault.Go(func() {
		time.Sleep(time.Second)
		pair.Link.Partition(true)
		partitioned := time.Now()
		_, cutErr = v.e.Confirm(context.Background(), cut, ConfirmOptions{IdempotencyKey: "cut"})
		time.Sleep(time.Until(partitioned.Add(batch + time.Second)))
		pair.Primary.Kill()
		pair.Promote()
		probe.promoted()
	})
	w.run(engines, 16, d)
	fault.Wait()
	ds := probe.wait()
	if !errors.Is(cutErr, ErrUnavailable) || !errors.Is(cutErr, errCommitUnknown) {
		t.Errorf("a confirmation whose COMMIT could not reach the synchronous standby: %v, want ErrUnavailable, its COMMIT's outcome unknown", cutErr)
	}
	var again Booking
	waitFor(t, "the cut-off confirmation's retry gets its booking, committed again on the new primary", 30*time.Second, func() bool {
		var err error
		again, err = v.e.Confirm(context.Background(), cut, ConfirmOptions{IdempotencyKey: "cut"})
		return err == nil
	})
	if n := v.bookings("cutoff"); n != 1 || !again.Replayed || testutil.ToFloat64(v.e.m.settled.WithLabelValues("committed_again")) < 1 {
		t.Errorf("the cut-off confirmation: retry %+v, %d bookings of its show on the new primary; want its booking, committed again there, replayed", again, n)
	}
	w.check(t, v.e)
	unproven := testutil.ToFloat64(v.e.m.unproven) + testutil.ToFloat64(engines[1].m.unproven)
	t.Logf("COMMITs found waiting for the standby, not acknowledged: %v (and the cut-off one); first confirmation after the promotion: %v; in-flight confirmations settled by the engines: %s; %s",
		unproven, ds, settledCounts(engines[0]), settledCounts(engines[1]))
}

// TestFailoverPendingCommitKeepsItsHold: a COMMIT waits for a partitioned synchronous
// standby for longer than a hold's reservation. Its confirmation is answered
// ErrUnavailable; a retry with the same key after the reservation would have ended is
// still ErrUnavailable — never ErrHoldLost, since the booking may yet commit — and no
// one else can hold the seat; once the standby is back, the COMMIT completes and the
// retry gets the booking.
func TestFailoverPendingCommitKeepsItsHold(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, true)
	v := pairEnv(t, pair)
	ctx := t.Context()
	v.show("pend", "A1")
	// A hold shorter than a reservation: only the reservation keeps it.
	h := v.hold("pend", 3*time.Second, "buyer", "A1")
	pair.Link.Partition(true)
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a confirmation whose COMMIT waits for the cut-off standby: %v, want ErrUnavailable", err)
	}
	time.Sleep(v.e.reserveLife() + time.Second)
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a retry while its COMMIT is pending: %v, want ErrUnavailable (the booking may still commit)", err)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "pend", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "rival"}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("another holder while the COMMIT is pending: %v, want ErrSeatsUnavailable", err)
	}
	pair.Link.Partition(false)
	var b Booking
	waitFor(t, "the retry gets the booking once the standby is back", time.Minute, func() bool {
		var err error
		b, err = v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: "k"})
		return err == nil
	})
	if !b.Replayed || v.bookings("pend") != 1 {
		t.Errorf("retry: %+v, %d bookings; want the pending COMMIT's booking, replayed", b, v.bookings("pend"))
	}
}

// TestFailoverFrozenPrimary: the primary hangs (SIGSTOP of every process: connections
// stay open, nothing answers) and the standby is promoted. Each engine confirms again
// a few seconds after the promotion (the batches on the frozen server end at their
// client-side bound, the pool is dialled again, and new connections skip the frozen
// host after connect_timeout), and the marker outbox is drained on the new primary.
func TestFailoverFrozenPrimary(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, true)
	v := pairEnv(t, pair)
	engines := []*Engine{v.e, v.twin()}
	w := failoverWorkload(t, v, "frozen", 30)
	d := 3 * time.Second * chaosScale()
	probe := newProbes(t, v, engines)
	var fault sync.WaitGroup
	fault.Go(func() {
		time.Sleep(d / 3)
		pair.Primary.Freeze()
		time.Sleep(time.Second)
		pair.Promote()
		probe.promoted()
	})
	w.run(engines, 16, d)
	fault.Wait()
	ds := probe.wait()
	waitFor(t, "the marker outbox drained on the new primary", 30*time.Second, func() bool {
		return v.count("SELECT count(*) FROM marker_outbox") == 0
	})
	w.check(t, v.e)
	t.Logf("first confirmation after the promotion: %v; in-flight confirmations settled by the engines: %s; %s", ds, settledCounts(engines[0]), settledCounts(engines[1]))
	if chaosScale() > 1 {
		for i, d := range ds {
			if d > 5*time.Second {
				t.Errorf("engine %d confirmed again %v after the promotion (goal: within 5 s)", i, d)
			}
		}
	}
}

// TestFailoverAsynchronousReconciles: an asynchronous standby, partitioned while
// bookings are acknowledged, is promoted after the primary dies: those bookings are
// lost. The engine finds the new server by itself, reports each lost booking (metric
// and report) and sets their seats' markers back to what the new primary says, so the
// seats sell again; the bookings the standby had stay sold.
func TestFailoverAsynchronousReconciles(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, false)
	var logs bytes.Buffer
	var mu sync.Mutex
	v := pairEnv(t, pair, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	})
	ctx := t.Context()
	seats := seatNames(20)
	v.show("async", seats...)
	confirm := func(seat string) Booking {
		t.Helper()
		h := v.hold("async", time.Minute, "buyer-"+seat, seat)
		b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
		if err != nil {
			t.Fatalf("confirm %s: %v", seat, err)
		}
		return b
	}
	var kept, lost []Booking
	for _, s := range seats[:5] {
		kept = append(kept, confirm(s))
	}
	pair.WaitReplayed()
	pair.Link.Partition(true)
	for _, s := range seats[5:10] {
		lost = append(lost, confirm(s))
	}
	pair.Primary.Kill()
	pair.Promote()

	// The engine finds the new server on its own (its repair loop), and reconciles.
	waitFor(t, "the lost bookings reported", 60*time.Second, func() bool {
		return testutil.ToFloat64(v.e.m.lostBookings) == float64(len(lost))
	})
	rep, err := v.e.Reconcile(ctx, "async")
	if err != nil || rep.Lowered != 0 || len(rep.Lost) != 0 {
		t.Errorf("Reconcile after the engine's own: %+v %v, want nothing to do", rep, err)
	}
	// Each lost booking is named, by its id, in an error log line.
	reported := lostReported(&logs, &mu)
	for _, b := range lost {
		if !reported[b.ID.String()] {
			t.Errorf("lost booking %s (seats %v) not reported by id in the log", b.ID, b.SeatIDs)
		}
	}
	for _, b := range lost {
		if _, err := v.e.Booking(ctx, b.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("lost booking %s: %v, want ErrNotFound (the new primary never had it)", b.ID, err)
		}
		h, err := v.e.Hold(ctx, HoldRequest{ShowID: "async", SeatIDs: b.SeatIDs, TTL: time.Minute, HolderID: "again"})
		if err != nil {
			t.Fatalf("the seats of lost booking %v are not sellable again: %v", b.SeatIDs, err)
		}
		if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
			t.Fatalf("confirm the seats of lost booking %v again: %v", b.SeatIDs, err)
		}
	}
	for _, b := range kept {
		if _, err := v.e.Booking(ctx, b.ID); err != nil {
			t.Errorf("replicated booking %s: %v", b.ID, err)
		}
		_, err := v.e.Hold(ctx, HoldRequest{ShowID: "async", SeatIDs: b.SeatIDs, TTL: time.Minute, HolderID: "thief"})
		if !errors.Is(err, ErrSeatsUnavailable) {
			t.Errorf("the seats of replicated booking %v: %v, want ErrSeatsUnavailable", b.SeatIDs, err)
		}
	}
	if n := v.doubleBookings(); n != 0 {
		t.Errorf("%d seats booked twice", n)
	}
}

// TestFailoverAsynchronousDelayedLink: an asynchronous standby behind a link that
// delays every WAL chunk by 50 ms; buyers confirm without pause; the primary dies with
// its network path (what the link holds is lost) and the standby is promoted. Whatever the delay made it lose, every acknowledged booking the
// new primary does not have is reported by its id (and nothing else is), its seats are
// sellable again, and no seat is booked twice.
func TestFailoverAsynchronousDelayedLink(t *testing.T) {
	pair := testsvc.StartPostgresPair(t, false)
	var logs bytes.Buffer
	var mu sync.Mutex
	v := pairEnv(t, pair, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	})
	seats := make([]string, 5000)
	for i := range seats {
		seats[i] = fmt.Sprintf("S%04d", i)
	}
	v.show("delayed", seats...)
	pair.Link.Delay(50 * time.Millisecond)
	var amu sync.Mutex
	acked := map[uuid.UUID][]string{}
	ctx, cancel := context.WithCancel(context.Background())
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(seats) {
					return
				}
				h, err := v.e.Hold(ctx, HoldRequest{ShowID: "delayed", SeatIDs: []string{seats[i]}, TTL: time.Minute, HolderID: fmt.Sprint("b", w)})
				if err != nil {
					continue
				}
				if b, err := v.e.Confirm(ctx, h, ConfirmOptions{IdempotencyKey: seats[i]}); err == nil {
					amu.Lock()
					acked[b.ID] = b.SeatIDs
					amu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	// The primary's host dies with its network path: what the link still holds is lost.
	pair.Link.Partition(true)
	pair.Link.Sever()
	pair.Primary.Kill()
	pair.Promote()
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	// Once every batch of the old server has ended, nothing Redis has is unknown to
	// the engine's reconciliation: run it (the engine's own runs may have done it).
	time.Sleep(v.e.reserveLife())
	if _, err := v.e.Reconcile(context.Background(), "delayed"); err != nil {
		t.Fatal(err)
	}
	reported := lostReported(&logs, &mu)
	lost := 0
	for id, ss := range acked {
		_, err := v.e.Booking(context.Background(), id)
		switch {
		case errors.Is(err, ErrNotFound):
			lost++
			if !reported[id.String()] {
				t.Errorf("acknowledged booking %s (seats %v) lost and not reported", id, ss)
			}
			if _, err := v.e.Hold(context.Background(), HoldRequest{ShowID: "delayed", SeatIDs: ss, TTL: time.Minute, HolderID: "again-" + id.String()}); err != nil {
				t.Errorf("the seats %v of lost booking %s are not sellable again: %v", ss, id, err)
			}
		case err != nil:
			t.Fatal(err)
		case reported[id.String()]:
			t.Errorf("booking %s is on the new primary but was reported lost", id)
		}
	}
	if n := v.doubleBookings(); n != 0 {
		t.Errorf("%d seats booked twice", n)
	}
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged: the scenario tested nothing")
	}
	t.Logf("%d bookings acknowledged, %d lost with the 50 ms link and reported, %d reports in all", len(acked), lost, len(reported))
}

// TestReconcile: markers ahead of the database — a sold marker for a booking the
// database does not have, a tombstone for a cancellation it does not have — are set
// back to what it says and reported; a booking confirmed while Reconcile runs (after
// it read Redis) keeps its marker; the markers equal the claims afterwards.
func TestReconcile(t *testing.T) {
	v := newEnv(t)
	ctx := t.Context()
	seats := seatNames(6)
	v.show("rc", seats...)
	sold, err := v.e.Confirm(ctx, v.hold("rc", time.Minute, "a", seats[0]), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := v.e.show(ctx, "rc")
	if err != nil {
		t.Fatal(err)
	}
	// A booking of generation 1000 on seats 1 and 2, and a cancellation of the booking
	// of seat 0, that the database never had.
	for s, m := range map[string]string{seats[1]: "1000", seats[2]: "1000", seats[0]: marker(sold.Generation, false)} {
		if err := v.rdb.HSet(ctx, sh.soldKeys[s], s, m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Redis knows the lost booking's id (the sale's marker write records it).
	lostID := uuid.New()
	if err := v.rdb.HSet(ctx, sh.k.booked(), "1000", hex.EncodeToString(lostID[:])).Err(); err != nil {
		t.Fatal(err)
	}
	// A booking confirmed after Reconcile read Redis.
	var during Booking
	v.e.hooks.afterRead = func(ctx context.Context, path string) {
		if path != "reconcile" || during.ID != uuid.Nil {
			return
		}
		if during, err = v.e.Confirm(ctx, v.hold("rc", time.Minute, "b", seats[3]), ConfirmOptions{}); err != nil {
			t.Errorf("confirm during Reconcile: %v", err)
		}
	}
	rep, err := v.e.Reconcile(ctx, "rc")
	if err != nil {
		t.Fatal(err)
	}
	want := []LostBooking{{ShowID: "rc", Generation: 1000, SeatIDs: []string{seats[1], seats[2]}, BookingID: lostID}}
	if !slices.EqualFunc(rep.Lost, want, func(a, b LostBooking) bool {
		return a.ShowID == b.ShowID && a.Generation == b.Generation && slices.Equal(a.SeatIDs, b.SeatIDs) && a.BookingID == b.BookingID
	}) || rep.LostCancellations != 1 || rep.Lowered != 3 {
		t.Errorf("report %+v, want lost %+v, 1 lost cancellation, 3 lowered", rep, want)
	}
	if got, want := v.soldMarkers("rc"), v.claimMarks("rc"); !maps.Equal(got, want) {
		t.Errorf("markers %v, claims %v", got, want)
	}
	if _, ok := v.claimMarks("rc")[seats[3]]; !ok || during.ID == uuid.Nil {
		t.Errorf("the booking confirmed during Reconcile is not sold: %v", during)
	}
	if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "rc", SeatIDs: seats[1:3], TTL: time.Minute, HolderID: "c"}); err != nil {
		t.Errorf("the lost booking's seats: %v, want them sellable", err)
	}
	if got := testutil.ToFloat64(v.e.m.lostBookings); got != 1 {
		t.Errorf("holdfast_lost_bookings_total %v, want 1", got)
	}
	// Bad input changes nothing.
	if _, err := v.e.Reconcile(ctx, "no such show!"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Reconcile(bad id): %v, want ErrInvalidArgument", err)
	}
}

// TestTunePoolPrefersTheHostThatAnswered: after a connection to the second host of the
// URL, the next connection tries that host first (a promoted standby is reached without
// waiting on the old primary first); a connect timeout is set when the URL has none.
func TestTunePoolPrefersTheHostThatAnswered(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("postgres://u@10.0.0.1:5432,10.0.0.2:5433,10.0.0.3:5434/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	TunePool(cfg)
	if cfg.ConnConfig.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("connect timeout %v, want %v", cfg.ConnConfig.ConnectTimeout, DefaultConnectTimeout)
	}
	c := cfg.ConnConfig.Config
	preferHost(&c, "10.0.0.3:5434")
	var order []string
	order = append(order, fmt.Sprintf("%s:%d", c.Host, c.Port))
	for _, fb := range c.Fallbacks {
		order = append(order, fmt.Sprintf("%s:%d", fb.Host, fb.Port))
	}
	if want := "10.0.0.3:5434 10.0.0.1:5432 10.0.0.2:5433"; strings.Join(order, " ") != want {
		t.Errorf("hosts %v, want %s", order, want)
	}
	if got := cfg.ConnConfig.Config.Host; got != "10.0.0.1" {
		t.Errorf("preferHost changed the pool's own config: first host %s", got)
	}
	withTimeout, _ := pgxpool.ParseConfig("postgres://u@h/db?connect_timeout=7")
	TunePool(withTimeout)
	if withTimeout.ConnConfig.ConnectTimeout != 7*time.Second {
		t.Errorf("a URL's connect_timeout was replaced: %v", withTimeout.ConnConfig.ConnectTimeout)
	}
}

// TestRedisSentinelFailover: the engines use a go-redis failover client (the Sentinel
// form of REDIS_URL); the Redis master dies mid-sale and the Sentinels promote its
// replica. Holds and markers the replica had not received are lost — a hold granted
// again on such a seat is refused at confirmation by the database's claim — so no seat
// is booked twice, every acknowledged booking is in the database, and after Resync the
// markers equal the claims; the same engines hold and confirm on the new master.
func TestRedisSentinelFailover(t *testing.T) {
	set := testsvc.StartSentinels(t)
	v := newEnvWith(t, testsvc.Database(t), sentinelClient(t, set.URL()))
	engines := []*Engine{v.e, v.twin()}
	w := failoverWorkload(t, v, "sentinel", 30)
	w.keysLost = true
	before, err := set.MasterAddr(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := 6 * time.Second * chaosScale()
	var fault sync.WaitGroup
	fault.Go(func() {
		time.Sleep(time.Second)
		set.Master.Stop()
	})
	w.run(engines, 16, d)
	fault.Wait()
	// A promotion takes the Sentinels' down-after time (1 s) and an election; an
	// election that fails is tried again after twice the failover timeout (10 s).
	var after string
	waitFor(t, "the Sentinels' promotion of the replica", 45*time.Second, func() bool {
		after, err = set.MasterAddr(t.Context())
		return err == nil && after != before
	})
	probe := newProbes(t, v, engines)
	probe.promoted()
	ds := probe.wait()
	w.check(t, v.e)
	t.Logf("master %s -> %s; confirmations on each engine within %v of the check", before, after, ds)
}

// TestFailoverAutoFailoverFormation: the set-up of make run-ha (internal/services/ha.sh)
// — a pg_auto_failover formation (monitor, primary, synchronous standby) and Redis with
// Sentinel — on ports of its own; the primary node dies (SIGKILL of its keeper and its
// PostgreSQL) mid-sale, and the monitor, not the test, decides when to promote the
// standby. Every acknowledged booking is on the new primary, no seat is booked twice,
// no refused request has a booking, and the same engines confirm again after it.
func TestFailoverAutoFailoverFormation(t *testing.T) {
	ha := startHA(t)
	v := newEnvWith(t, migratedPool(t, ha.env["DATABASE_URL"]), sentinelClient(t, ha.env["REDIS_URL"]), func(c *Config) { c.MarkerRepairInterval = 200 * time.Millisecond })
	engines := []*Engine{v.e, v.twin()}
	w := failoverWorkload(t, v, "formation", 30)
	probe := newProbes(t, v, engines)
	ctx, cancel := context.WithCancel(context.Background())
	var crashed, promoted time.Time
	var fault sync.WaitGroup
	fault.Go(func() {
		defer cancel()
		time.Sleep(2 * time.Second)
		was := ha.primary(t)
		crashed = time.Now()
		ha.run(t, "crash")
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if p := ha.primary(t); p != "" && p != was {
				promoted = time.Now()
				probe.promoted()
				time.Sleep(3 * time.Second * chaosScale())
				return
			}
		}
		t.Error("the monitor never promoted the standby")
	})
	w.runCtx(ctx, engines, 8)
	fault.Wait()
	ds := probe.wait()
	w.check(t, v.e)
	t.Logf("the monitor promoted the standby %v after the crash; first confirmation after the promotion: %v",
		promoted.Sub(crashed).Round(time.Millisecond), ds)
}

// haSetup is a running ha.sh set-up of a test's own.
type haSetup struct {
	env    map[string]string // DATABASE_URL, REDIS_URL
	script string
	vars   []string
}

// startHA starts ha.sh (PostgreSQL formation and Redis with Sentinel, no serve
// replicas) in a directory and on ports of the test's own; it is stopped when the
// test ends.
func startHA(t *testing.T) *haSetup {
	t.Helper()
	dir := testsvc.ReachableDir(t, "/var/tmp", "holdfast-ha-")
	script, err := filepath.Abs("../internal/services/ha.sh")
	if err != nil {
		t.Fatal(err)
	}
	ha := &haSetup{env: map[string]string{}, script: script,
		vars: []string{"HOLDFAST_SERVICES_DIR=" + dir, "HOLDFAST_HA_PORT=" + strconv.Itoa(haBase(t))}}
	t.Cleanup(func() { _ = ha.cmd("stop").Run() }) // before ReachableDir removes dir
	out := ha.run(t, "start")
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			ha.env[k] = strings.Trim(v, "'")
		}
	}
	if ha.env["DATABASE_URL"] == "" || ha.env["REDIS_URL"] == "" {
		t.Fatalf("ha.sh start printed no URLs: %q", out)
	}
	return ha
}

func (ha *haSetup) cmd(args ...string) *exec.Cmd {
	c := exec.Command(ha.script, args...)
	c.Env = append(os.Environ(), ha.vars...)
	return c
}

// run runs ha.sh with args and returns its stdout; a failure fails the test.
func (ha *haSetup) run(t *testing.T, args ...string) string {
	t.Helper()
	c := ha.cmd(args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("ha.sh %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// primary is the node the monitor has as primary now ("" while none).
func (ha *haSetup) primary(t *testing.T) string {
	out, err := ha.cmd("primary").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// haOffsets are the ports of an ha.sh set-up without serve replicas, from its base:
// the monitor and the two nodes, the Redis master, its replica and three Sentinels.
var haOffsets = []int{0, 1, 2, 379, 380, 381, 382, 383}

// ciPorts are the ports of CI's services (services.sh's defaults: PostgreSQL, Redis,
// the first Redis Cluster node), which a test's own servers must never take, whether
// CI's services run at that moment or not.
var ciPorts = []int{25432, 26379, 27001}

// haBases are the base ports haBase picks from: 20000, 20500, … 31500, bar those
// whose block would take one of ciPorts (26000 would take 26379, 27000 27001).
func haBases() []int {
	var bases []int
	for i := range 24 {
		base := 20000 + 500*i
		if !slices.ContainsFunc(haOffsets, func(off int) bool { return slices.Contains(ciPorts, base+off) }) {
			bases = append(bases, base)
		}
	}
	return bases
}

// haBase picks a base port for ha.sh whose ports are all free.
func haBase(t *testing.T) int {
	t.Helper()
	bases := haBases()
	for try := 0; try < 50; try++ {
		base := bases[rand.IntN(len(bases))]
		free := true
		for _, off := range haOffsets {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free block of ports for ha.sh")
	return 0
}

// TestHABaseAvoidsCIPorts: no block of ports haBase may pick takes one of CI's ports.
func TestHABaseAvoidsCIPorts(t *testing.T) {
	for _, base := range haBases() {
		for _, off := range haOffsets {
			if slices.Contains(ciPorts, base+off) {
				t.Errorf("base %d: ha.sh would listen on %d, one of CI's ports", base, base+off)
			}
		}
	}
	if n := len(haBases()); n != 22 {
		t.Errorf("%d bases, want 22 (24 less the two that take 26379 and 27001)", n)
	}
}

// TestFrozenServerAfterEveryRefusal: the server freezes (SIGSTOP) between a batch's last
// statement and its end, in a batch that wrote nothing (its one hold was lost in
// Redis): the batch gives up its transaction within its bound and the caller gets its
// refusal, instead of waiting for the ROLLBACK's reply as long as the server stays
// frozen.
func TestFrozenServerAfterEveryRefusal(t *testing.T) {
	pg := testsvc.StartPostgres(t)
	v := newEnvWith(t, migratedPool(t, pg.URL()), testsvc.Redis(t), func(c *Config) { c.StatementTimeout = time.Second })
	t.Cleanup(pg.Thaw) // before the pool closes and the server stops
	v.show("frozen-refusal", "A1")
	h := v.hold("frozen-refusal", time.Minute, "alice", "A1")
	v.e.hooks.beforeCommit = func(ctx context.Context) {
		if err := v.rdb.Del(ctx, newKeys(v.cfg.KeyPrefix, h.ShowID).hold("A1")).Err(); err != nil {
			t.Error(err)
		}
		pg.Freeze()
	}
	answered := make(chan error, 1)
	go func() {
		_, err := v.e.Confirm(context.Background(), h, ConfirmOptions{})
		answered <- err
	}()
	// A liveness bound, far above the batch's own (one statement's bound and its grace).
	select {
	case err := <-answered:
		if !errors.Is(err, ErrHoldLost) {
			t.Fatalf("confirm: %v, want ErrHoldLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the confirmation was not answered while the server stayed frozen: its batch waits for the ROLLBACK's reply")
	}
}

// inFlight is one confirmation whose COMMIT is in flight at the failover, as its buyer
// sees it: the first answer, then the definitive one, retrying with the same hold and
// key while the answer is ErrUnavailable.
type inFlight struct {
	h     Hold
	key   string
	first error
	b     Booking
	final error     // the definitive answer: nil (booked) or a refusal
	at    time.Time // when it came; zero: none came (the outcome stayed unknown)
}

// inFlightScenario is a failure of the primary while a sale's COMMITs are in flight.
type inFlightScenario struct {
	name string
	sync bool // synchronous replication
	// front: the engine reaches the primary through a proxy, which strike may use.
	front bool
	// arm runs before the confirmations; strike once every COMMIT is on its way: the
	// primary fails and the standby is promoted.
	arm, strike func(t *testing.T, pair *testsvc.PostgresPair, front *testsvc.Proxy)
	// after, if set, runs once every buyer has its answer.
	after func(t *testing.T, v *env, pair *testsvc.PostgresPair)
}

// TestFailoverInFlightConfirmations: 32 confirmations (four batches of 8) are at COMMIT
// when the primary fails, and the standby is promoted. Their buyers get ErrUnavailable
// and retry with the same hold and key. Each confirmation gets a definitive answer
// within 2 s of the engine seeing the new primary — booked, and then on the new
// primary, or refused, with its seats sellable — bar those whose outcome cannot be known,
// which stay ErrUnavailable and are counted (in these scenarios none: the new primary is
// on a later timeline of the same cluster, so what it lacks it never gets); no call
// outlives its bound (the watchdog), no seat is booked twice, and every booking
// acknowledged is on the new primary. The scenarios:
//   - kill: the standby's link delays WAL by 150 ms; the primary is killed while the
//     COMMITs wait for the standby, which is promoted once what the link held has
//     arrived: the bookings are on it, the replies never came;
//   - partition: the link is partitioned; the primary is killed while its COMMITs wait:
//     none of them is on the new primary;
//   - frozen: the same with the primary frozen (SIGSTOP) instead of killed: its COMMITs
//     hang, with their connections open, as long as the test;
//   - asynchronous: an asynchronous standby, partitioned; the engine's path to the
//     primary holds the replies: the primary commits every booking, the replies never
//     come, and it is killed: none of them is on the new primary.
func TestFailoverInFlightConfirmations(t *testing.T) {
	partitioned := func(t *testing.T, pair *testsvc.PostgresPair, _ *testsvc.Proxy) { pair.Link.Partition(true) }
	for _, sc := range []inFlightScenario{
		{name: "kill", sync: true,
			arm: func(t *testing.T, pair *testsvc.PostgresPair, _ *testsvc.Proxy) {
				pair.Link.Delay(150 * time.Millisecond)
			},
			strike: func(t *testing.T, pair *testsvc.PostgresPair, _ *testsvc.Proxy) {
				waitFor(t, "a COMMIT waiting for the standby", 10*time.Second, func() bool { return pair.SyncRepWaiters() > 0 })
				pair.Primary.Kill()
				waitUpTo(3*time.Second, func() bool { return pair.Standby.Psql("SELECT count(*) FROM bookings") == "32" })
				pair.Promote()
			}},
		{name: "partition", sync: true, arm: partitioned,
			strike: func(t *testing.T, pair *testsvc.PostgresPair, _ *testsvc.Proxy) {
				waitFor(t, "the four COMMITs waiting for the standby", 10*time.Second, func() bool { return pair.SyncRepWaiters() == 4 })
				pair.Primary.Kill()
				pair.Promote()
			}},
		{name: "frozen", sync: true, arm: partitioned,
			strike: func(t *testing.T, pair *testsvc.PostgresPair, _ *testsvc.Proxy) {
				waitFor(t, "the four COMMITs waiting for the standby", 10*time.Second, func() bool { return pair.SyncRepWaiters() == 4 })
				pair.Primary.Freeze()
				pair.Promote()
			},
			after: func(t *testing.T, v *env, pair *testsvc.PostgresPair) {
				// The old primary wakes up, a primary still, on its old timeline: the
				// engine does not use it.
				pair.Primary.Thaw()
				old, err := pgxpool.New(t.Context(), pair.Primary.URL())
				if err != nil {
					t.Fatal(err)
				}
				defer old.Close()
				conn, err := old.Acquire(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
				if _, err := v.e.backendOf(t.Context(), conn); !errors.Is(err, errDeposed) {
					t.Errorf("a connection to the woken old primary: %v, want errDeposed", err)
				}
			}},
		{name: "asynchronous", front: true, arm: partitioned,
			strike: func(t *testing.T, pair *testsvc.PostgresPair, front *testsvc.Proxy) {
				waitFor(t, "the old primary committed every booking", 10*time.Second, func() bool {
					return pair.Primary.Psql("SELECT count(*) FROM bookings") == "32"
				})
				pair.Primary.Kill()
				pair.Promote()
			}},
	} {
		t.Run(sc.name, func(t *testing.T) { inFlightAtFailover(t, sc) })
	}
}

// waitUpTo waits until cond holds or d has passed.
func waitUpTo(d time.Duration, cond func() bool) {
	for deadline := time.Now().Add(d); !cond() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// inFlightAtFailover runs one scenario of TestFailoverInFlightConfirmations.
func inFlightAtFailover(t *testing.T, sc inFlightScenario) {
	const total = 32
	pair := testsvc.StartPostgresPair(t, sc.sync)
	url := pair.URL("postgres")
	var front *testsvc.Proxy
	if sc.front {
		front = testsvc.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", pair.Primary.Port))
		url = pair.FrontURL("postgres", front)
	}
	v := newEnvWith(t, migratedPool(t, url), testsvc.Redis(t), func(c *Config) {
		c.StatementTimeout = time.Second
		c.MarkerRepairInterval = 200 * time.Millisecond
		c.ConfirmBatch, c.ConfirmConns, c.ConfirmBatchWait = 8, 4, 50*time.Millisecond
	})
	t.Cleanup(pair.Primary.Thaw) // before the pool closes
	seats := seatNames(total)
	v.show("inflight", seats...)
	fs := make([]*inFlight, total)
	for i := range fs {
		fs[i] = &inFlight{h: v.hold("inflight", 5*time.Second, fmt.Sprintf("b%02d", i), seats[i]), key: fmt.Sprintf("k%02d", i)}
	}
	// The batches' COMMITs go out together, once all 32 confirmations are at COMMIT.
	var atCommit atomic.Int64
	reached, release := make(chan struct{}), make(chan struct{})
	v.e.hooks.atCommit = func(ctx context.Context, n int) {
		if atCommit.Add(int64(n)) == total {
			close(reached)
		}
		select {
		case <-release:
		case <-time.After(1500 * time.Millisecond): // within the COMMIT step's bound
		}
	}
	// The show and its holds are on the standby before the scenario arms its fault (an
	// asynchronous standby may lag: promoted without them, it would not know the show).
	pair.WaitReplayed()
	sc.arm(t, pair, front)
	wd := testsvc.NewWatchdog(t)
	giveUp := make(chan struct{}) // closed 10 s after the engine saw the new primary
	stop := sync.OnceFunc(func() { close(giveUp) })
	t.Cleanup(stop)
	var buyers sync.WaitGroup
	for _, f := range fs {
		buyers.Go(func() { f.buy(wd, v.e, giveUp) })
	}
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d confirmations reached COMMIT", atCommit.Load(), total)
	}
	if front != nil {
		front.HoldReplies(true) // the COMMITs reach the primary, their replies never come back
	}
	close(release)
	struck := time.Now()
	sc.strike(t, pair, front)
	var seen time.Time
	waitFor(t, "the engine sees the new primary", time.Minute, func() bool {
		seen = serverChangedAt(v.e)
		return !seen.IsZero()
	})
	time.AfterFunc(time.Until(seen.Add(10*time.Second)), stop)
	buyers.Wait()
	checkInFlight(t, v, sc.name, fs, seen)
	if sc.after != nil {
		sc.after(t, v, pair)
	}
	t.Logf("%s: the engine saw the new primary %v after the primary failed; settled by the engine: %s", sc.name, seen.Sub(struck).Round(time.Millisecond), settledCounts(v.e))
}

// serverChangedAt is when e last found PostgreSQL to be another server (zero: never).
func serverChangedAt(e *Engine) time.Time {
	e.backends.mu.Lock()
	defer e.backends.mu.Unlock()
	return e.backends.changedAt
}

// buy is the buyer of f: it confirms, and, while the answer is ErrUnavailable and
// until giveUp is closed, confirms again with the same hold and key; it notes the
// definitive answer and when it came.
func (f *inFlight) buy(wd *testsvc.Watchdog, e *Engine, giveUp <-chan struct{}) {
	confirm := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		b, err := confirmWatched(ctx, wd, e, f.h, ConfirmOptions{IdempotencyKey: f.key})
		if !errors.Is(err, ErrUnavailable) {
			f.b, f.final, f.at = b, err, time.Now()
		}
		return err
	}
	f.first = confirm(20 * time.Second)
	for f.at.IsZero() {
		select {
		case <-giveUp:
			return
		case <-time.After(50 * time.Millisecond):
		}
		_ = confirm(time.Second)
	}
}

// checkInFlight asserts what the buyers of fs were told, seen being when the engine saw
// the new primary, and logs how many were booked, refused or left unknown.
func checkInFlight(t *testing.T, v *env, name string, fs []*inFlight, seen time.Time) {
	t.Helper()
	ctx := context.Background()
	var booked, refused, unknown, early int
	var slowest time.Duration
	for _, f := range fs {
		switch {
		case f.at.IsZero():
			unknown++
			t.Errorf("the confirmation of %v is still ErrUnavailable 10 s after the engine saw the new primary (first answer: %v)", f.h.SeatIDs, f.first)
			continue
		case !errors.Is(f.first, ErrUnavailable):
			early++ // its first answer was definitive
		}
		// Every answer counts, the first call's too: an answer before the engine saw
		// the new primary took no time after it.
		d := max(0, f.at.Sub(seen))
		slowest = max(slowest, d)
		if d > 2*time.Second {
			t.Errorf("the confirmation of %v was answered %v (%v) %v after the engine saw the new primary, want within 2 s",
				f.h.SeatIDs, f.b.ID, f.final, d.Round(time.Millisecond))
		}
		if f.final == nil {
			booked++
			got, err := v.e.Booking(ctx, f.b.ID)
			if err != nil || got.Status != BookingConfirmed || !slices.Equal(got.SeatIDs, f.h.SeatIDs) {
				t.Errorf("booking %s of %v acknowledged; on the new primary: %+v, %v", f.b.ID, f.h.SeatIDs, got, err)
			}
			continue
		}
		refused++
		h, err := v.e.Hold(ctx, HoldRequest{ShowID: f.h.ShowID, SeatIDs: f.h.SeatIDs, TTL: time.Minute, HolderID: "rival"})
		if err != nil {
			t.Errorf("the seats %v of a refused confirmation (%v) are not sellable: %v", f.h.SeatIDs, f.final, err)
		} else if err := v.e.Release(ctx, h); err != nil {
			t.Error(err)
		}
	}
	if n := v.doubleBookings(); n != 0 {
		t.Errorf("%d seats booked twice", n)
	}
	t.Logf("%s: %d confirmations in flight at the failover: %d booked, %d refused, %d unknown (still ErrUnavailable); %d of them answered for good at once; the slowest answered %v after the engine saw the new primary",
		name, len(fs), booked, refused, unknown, early, slowest.Round(time.Millisecond))
}

// settledCounts is what e's settler did, by outcome (holdfast_commits_settled_total).
func settledCounts(e *Engine) string {
	var out []string
	for _, o := range []string{"booked", "committed_again", "refused", "given_up"} {
		out = append(out, fmt.Sprintf("%s %v", o, testutil.ToFloat64(e.m.settled.WithLabelValues(o))))
	}
	return strings.Join(out, ", ")
}

// TestFailoverUnknownOutcomeIsNeverGuessed: a batch's primary dies with its COMMIT on
// the way, and the pool's next host is another cluster (another system identifier)
// which has the schema and the show too. The outcome cannot be known there: the
// confirmation and its retries stay ErrUnavailable, nothing is committed again there,
// and the hold stays reserved. Once that server is gone and the first one is back (a
// restart: the same cluster and timeline, another postmaster), the engine settles it
// there: the booking is not there (its COMMIT never arrived), so it is committed again,
// and the retry gets it.
func TestFailoverUnknownOutcomeIsNeverGuessed(t *testing.T) {
	first, other := testsvc.StartPostgres(t), testsvc.StartPostgres(t)
	url := fmt.Sprintf("postgres://holdfast@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		first.Port, other.Port)
	v := newEnvWith(t, migratedPool(t, url), testsvc.Redis(t), func(c *Config) {
		c.StatementTimeout = time.Second
		c.MarkerRepairInterval = 200 * time.Millisecond
	})
	// The other cluster has the show too: a booking committed again there would succeed.
	elsewhere := newEnvWith(t, migratedPool(t, other.URL()), testsvc.Redis(t))
	elsewhere.show("unknown", "A1")
	v.show("unknown", "A1")
	h := v.hold("unknown", time.Minute, "buyer", "A1")
	var once sync.Once
	v.e.hooks.atCommit = func(context.Context, int) { once.Do(first.Kill) } // the COMMIT goes to a dead server
	wd := testsvc.NewWatchdog(t)
	confirm := func() (Booking, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return confirmWatched(ctx, wd, v.e, h, ConfirmOptions{IdempotencyKey: "k"})
	}
	if _, err := confirm(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errCommitUnknown) {
		t.Fatalf("a confirmation whose primary died at its COMMIT: %v, want ErrUnavailable, its outcome unknown", err)
	}
	waitFor(t, "the engine sees the other cluster", 30*time.Second, func() bool { return !serverChangedAt(v.e).IsZero() })
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if _, err := confirm(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a retry while the pool reaches another cluster: %v, want ErrUnavailable (the outcome cannot be known there)", err)
		}
	}
	if n := elsewhere.bookings("unknown"); n != 0 || testutil.ToFloat64(v.e.m.settled.WithLabelValues("committed_again")) != 0 {
		t.Fatalf("the other cluster has %d bookings of the show (settled: %s): the outcome was guessed", n, settledCounts(v.e))
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "unknown", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "rival"}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("another holder while the outcome is unknown: %v, want ErrSeatsUnavailable (the hold stays reserved)", err)
	}
	other.StopImmediate()
	first.Start()
	var b Booking
	waitFor(t, "the retry gets the booking, committed again on the first server after its restart", 30*time.Second, func() bool {
		var err error
		b, err = confirm()
		return err == nil
	})
	if v.bookings("unknown") != 1 || !b.Replayed || testutil.ToFloat64(v.e.m.settled.WithLabelValues("committed_again")) != 1 {
		t.Errorf("after the restart: retry %+v, %d bookings, settled: %s; want the booking committed again, replayed", b, v.bookings("unknown"), settledCounts(v.e))
	}
}
