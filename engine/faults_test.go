package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// privateEnv is an engine on a Redis server of the test's own, which it may flush,
// restart or stop.
func privateEnv(t *testing.T, tweak ...func(*Config)) (*env, *testsvc.RedisServer) {
	t.Helper()
	srv := testsvc.StartRedis(t)
	return newEnvWith(t, testsvc.Database(t), srv.Client(), tweak...), srv
}

// sell books the given seats, one booking each, and returns seat -> booking.
func (v *env) sell(show string, seats ...string) map[string]Booking {
	v.t.Helper()
	out := map[string]Booking{}
	for _, s := range seats {
		h := v.hold(show, time.Minute, "", s)
		b, err := v.e.Confirm(v.t.Context(), h, ConfirmOptions{})
		if err != nil {
			v.t.Fatalf("confirm %s: %v", s, err)
		}
		out[s] = b
	}
	return out
}

// marksOf is what the sold markers of these bookings' seats must say: seat ->
// generation.
func marksOf(sold map[string]Booking) map[string]string {
	out := map[string]string{}
	for s, b := range sold {
		out[s] = strconv.FormatInt(b.Generation, 10)
	}
	return out
}

func TestRedisLosesEverything(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"flushall", "restart"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			v, srv := privateEnv(t)
			seats := seatNames(6)
			v.show("s1", seats...)
			sold := v.sell("s1", seats[0], seats[1], seats[2])
			if how == "flushall" {
				if err := v.rdb.FlushAll(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				srv.Restart()
			}
			// A sold seat Redis forgot is refused at once: the engine notices the lost
			// counter and rebuilds the show from the database before granting.
			if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{seats[0]}}); !errors.Is(err, ErrSeatsUnavailable) {
				t.Fatalf("hold on a sold seat after the loss: %v, want ErrSeatsUnavailable", err)
			}
			if got := v.soldMarkers("s1"); !maps.Equal(got, marksOf(sold)) {
				t.Fatalf("markers after the loss %v, want %v", got, marksOf(sold))
			}
			// New holds confirm on the first call, with generations above the fence.
			h := v.hold("s1", time.Minute, "", seats[3], seats[4])
			b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
			if err != nil {
				t.Fatalf("confirm after the loss: %v", err)
			}
			if b.Generation <= 3 {
				t.Fatalf("generation %d after the loss, want above the fence 3", b.Generation)
			}
			if v.doubleBookings() != 0 || v.bookings("s1") != 4 {
				t.Fatal("double booking or lost booking")
			}
		})
	}
}

// TestCounterWentBackwards: Redis kept its keys but its counter is behind the database
// (a failover to a replica that missed writes). A hold on a seat whose fence is above the
// re-issued generation still confirms on the first call.
func TestCounterWentBackwards(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	v := newEnv(t, func(c *Config) { c.Registerer = reg })
	seats := seatNames(4)
	v.show("s1", seats...)
	sold := v.sell("s1", seats...) // generations 1..4; S003's fence is 4
	if err := v.e.Cancel(t.Context(), sold[seats[3]].ID); err != nil {
		t.Fatal(err)
	}
	if err := v.rdb.Set(t.Context(), newKeys(v.cfg.KeyPrefix, "s1").gen(), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	h := v.hold("s1", time.Minute, "", seats[3])
	if h.Generation != 2 {
		t.Fatalf("setup: generation %d", h.Generation)
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatalf("confirm with a regressed counter: %v", err)
	}
	if b.Generation <= 4 {
		t.Fatalf("booking generation %d, want above the high-water mark 4", b.Generation)
	}
	if c := v.counter("s1"); c < b.Generation {
		t.Fatalf("counter %d below the booking's generation %d", c, b.Generation)
	}
	if n := testutil.ToFloat64(v.e.m.counterRepairs); n != 1 {
		t.Fatalf("counter repairs %v, want 1", n)
	}
	if n := v.count("SELECT count(*) FROM booking_events WHERE kind = 'counter_repaired'"); n != 1 {
		t.Fatalf("%d counter_repaired events", n)
	}
	if v.doubleBookings() != 0 {
		t.Fatal("double booking")
	}
}

// TestForgottenSoldMarker: Redis lost one sold marker; a hold on the seat is granted but
// its confirm hits the database claim, is refused, and repairs the marker.
func TestForgottenSoldMarker(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	sold := v.sell("s1", "A1")
	if err := v.rdb.HDel(t.Context(), v.soldKey("s1", "A1"), "A1").Err(); err != nil {
		t.Fatal(err)
	}
	h := v.hold("s1", time.Minute, "", "A1", "A2")
	_, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	var sue *SeatsUnavailableError
	if !errors.As(err, &sue) || len(sue.SeatIDs) != 1 || sue.SeatIDs[0] != "A1" {
		t.Fatalf("confirm on a sold seat Redis forgot: %v, want seats unavailable naming A1", err)
	}
	if v.soldMarkers("s1")["A1"] != marksOf(sold)["A1"] {
		t.Fatal("the marker was not repaired")
	}
	if v.bookings("s1") != 1 || v.claims("s1")["A2"] != "" {
		t.Fatal("the refused confirm wrote")
	}
}

func TestResyncRestoresMarkers(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	seats := seatNames(250) // three sold-marker buckets
	v.show("s1", seats...)
	seats[4], seats[7], seats[9] = seats[104], seats[207], seats[249]
	sold := v.sell("s1", seats[1], seats[4], seats[7])
	held := v.hold("s1", time.Minute, "", seats[2])
	ctx := t.Context()
	k := newKeys(v.cfg.KeyPrefix, "s1")
	cancelled := v.sell("s1", seats[9])[seats[9]]
	if err := v.e.Cancel(ctx, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	// Damage: a lost marker, a stale marker (a cancelled booking's seat marked sold), a
	// hold on a sold seat, a counter behind.
	v.rdb.HDel(ctx, v.soldKey("s1", seats[4]), seats[4])
	v.rdb.HSet(ctx, v.soldKey("s1", seats[9]), seats[9], strconv.FormatInt(cancelled.Generation, 10))
	v.rdb.Set(ctx, k.hold(seats[7]), newToken()+":1:1:", time.Minute)
	v.rdb.Set(ctx, k.gen(), 0, 0)
	if err := v.e.Resync(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if got := v.soldMarkers("s1"); !maps.Equal(got, marksOf(sold)) {
		t.Fatalf("markers %v, want %v", got, marksOf(sold))
	}
	if v.holdValue("s1", seats[7]) != "" {
		t.Fatal("a hold on a sold seat survived Resync")
	}
	if !strings.HasPrefix(v.holdValue("s1", seats[2]), held.Token) {
		t.Fatal("Resync dropped a live hold on a free seat")
	}
	if c := v.counter("s1"); c < 3 {
		t.Fatalf("counter %d after Resync, want at least the high-water mark 3", c)
	}
	// Everything after FLUSHALL too.
	v.rdb.FlushAll(ctx)
	if err := v.e.Resync(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if got := v.soldMarkers("s1"); !maps.Equal(got, marksOf(sold)) {
		t.Fatalf("markers after FLUSHALL and Resync %v, want %v", got, marksOf(sold))
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", seatNames(12)...)
	good := v.hold("s1", time.Minute, "alice", "S000")
	redisBefore, dbBefore := v.redisSnapshot(), v.dbSnapshot()
	long := strings.Repeat("a", 65)
	with := func(f func(*Hold)) Hold {
		h := good
		h.SeatIDs = append([]string(nil), good.SeatIDs...)
		f(&h)
		return h
	}
	holds := []struct {
		name string
		req  HoldRequest
		want error
	}{
		{"show with braces", HoldRequest{ShowID: "{s1}", SeatIDs: []string{"S001"}}, ErrInvalidArgument},
		{"show with a colon", HoldRequest{ShowID: "s:1", SeatIDs: []string{"S001"}}, ErrInvalidArgument},
		{"empty show", HoldRequest{ShowID: "", SeatIDs: []string{"S001"}}, ErrInvalidArgument},
		{"show of 65 characters", HoldRequest{ShowID: long, SeatIDs: []string{"S001"}}, ErrInvalidArgument},
		{"seat with a colon", HoldRequest{ShowID: "s1", SeatIDs: []string{"S:1"}}, ErrInvalidArgument},
		{"seat with braces", HoldRequest{ShowID: "s1", SeatIDs: []string{"{S001}"}}, ErrInvalidArgument},
		{"empty seat", HoldRequest{ShowID: "s1", SeatIDs: []string{""}}, ErrInvalidArgument},
		{"seat of 65 characters", HoldRequest{ShowID: "s1", SeatIDs: []string{long}}, ErrInvalidArgument},
		{"no seats", HoldRequest{ShowID: "s1"}, ErrInvalidArgument},
		{"duplicate seats", HoldRequest{ShowID: "s1", SeatIDs: []string{"S001", "S002", "S001"}}, ErrInvalidArgument},
		{"11 seats", HoldRequest{ShowID: "s1", SeatIDs: seatNames(12)[1:12]}, ErrInvalidArgument},
		{"negative TTL", HoldRequest{ShowID: "s1", SeatIDs: []string{"S001"}, TTL: -time.Second}, ErrInvalidArgument},
		{"sub-millisecond TTL", HoldRequest{ShowID: "s1", SeatIDs: []string{"S001"}, TTL: time.Microsecond}, ErrInvalidArgument},
		{"TTL too long", HoldRequest{ShowID: "s1", SeatIDs: []string{"S001"}, TTL: time.Hour}, ErrInvalidArgument},
		{"holder with a newline", HoldRequest{ShowID: "s1", SeatIDs: []string{"S001"}, HolderID: "a\nb"}, ErrInvalidArgument},
		{"unknown show", HoldRequest{ShowID: "nope", SeatIDs: []string{"S001"}}, ErrNotFound},
		{"unknown seat", HoldRequest{ShowID: "s1", SeatIDs: []string{"S001", "Z9"}}, ErrNotFound},
	}
	for _, c := range holds {
		if _, err := v.e.Hold(t.Context(), c.req); !errors.Is(err, c.want) {
			t.Errorf("hold %s: %v, want %v", c.name, err, c.want)
		}
	}
	var iae *InvalidArgumentError
	if _, err := v.e.Hold(t.Context(), holds[9].req); !errors.As(err, &iae) || iae.Field != "HoldRequest.SeatIDs" {
		t.Errorf("duplicate seats: %v, want an InvalidArgumentError naming HoldRequest.SeatIDs", err)
	}
	presented := []struct {
		name string
		h    Hold
		want error
	}{
		{"forged token", with(func(h *Hold) { h.Token = newToken() }), ErrHoldLost},
		{"malformed token", with(func(h *Hold) { h.Token = "not-a-token" }), ErrInvalidArgument},
		{"uppercase token", with(func(h *Hold) { h.Token = strings.ToUpper(h.Token) }), ErrInvalidArgument},
		{"forged generation", with(func(h *Hold) { h.Generation++ }), ErrHoldLost},
		{"zero generation", with(func(h *Hold) { h.Generation = 0 }), ErrInvalidArgument},
		{"seat outside the hold", with(func(h *Hold) { h.SeatIDs = []string{"S005"} }), ErrHoldLost},
		{"extra seat", with(func(h *Hold) { h.SeatIDs = append(h.SeatIDs, "S005") }), ErrHoldLost},
		{"unknown seat", with(func(h *Hold) { h.SeatIDs = []string{"Z9"} }), ErrNotFound},
		{"other holder", with(func(h *Hold) { h.HolderID = "bob" }), ErrHoldLost},
		{"unknown show", with(func(h *Hold) { h.ShowID = "nope" }), ErrNotFound},
		{"bad show", with(func(h *Hold) { h.ShowID = "a{b" }), ErrInvalidArgument},
	}
	for _, c := range presented {
		if _, err := v.e.Confirm(t.Context(), c.h, ConfirmOptions{}); !errors.Is(err, c.want) {
			t.Errorf("confirm %s: %v, want %v", c.name, err, c.want)
		}
		if _, err := v.e.Extend(t.Context(), c.h, time.Minute); !errors.Is(err, c.want) {
			t.Errorf("extend %s: %v, want %v", c.name, err, c.want)
		}
		if err := v.e.Release(t.Context(), c.h); !errors.Is(err, c.want) {
			t.Errorf("release %s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := v.e.Confirm(t.Context(), good, ConfirmOptions{IdempotencyKey: "has space"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("idempotency key with a space: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), good, ConfirmOptions{IdempotencyKey: strings.Repeat("k", 256)}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("idempotency key of 256 bytes: %v", err)
	}
	if _, err := v.e.Extend(t.Context(), good, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("extend by 0: %v", err)
	}
	for _, c := range []struct {
		show  string
		seats []string
	}{{"bad:show", []string{"A"}}, {"s2", nil}, {"s2", []string{"A", "A"}}, {"s2", []string{"A}"}}, {"s1", []string{"S000"}}} {
		if err := v.e.CreateShow(t.Context(), c.show, c.seats); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CreateShow(%q, %v): %v, want ErrInvalidArgument", c.show, c.seats, err)
		}
	}
	if _, err := v.e.Seats(t.Context(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Seats(unknown): %v", err)
	}
	if redisAfter, dbAfter := v.redisSnapshot(), v.dbSnapshot(); redisAfter != redisBefore || dbAfter != dbBefore {
		t.Fatalf("bad input changed state:\nredis before %s\nredis after  %s\ndb before %s\ndb after  %s", redisBefore, redisAfter, dbBefore, dbAfter)
	}
	if _, err := New(v.pool, v.rdb, &Config{MaxSeatsPerHold: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New with a negative MaxSeatsPerHold: %v", err)
	}
	for _, c := range []Config{{ConfirmBatch: maxConfirmBatch + 1}, {ConfirmSavepoints: true, ConfirmBatch: maxSavepointBatch + 1}, {ConfirmBatchWait: -time.Millisecond}} {
		if _, err := New(v.pool, v.rdb, &c); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("New with %+v: %v, want ErrInvalidArgument", c, err)
		}
	}
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	if _, err := New(v.pool, plain, nil); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("a client that ignores context deadlines: %v, want ErrInvalidArgument naming ContextTimeoutEnabled", err)
	}
	if _, err := New(v.pool, v.rdb, &Config{KeyPrefix: "a{b}"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New with a bad prefix: %v", err)
	}
	if created, err := v.e.EnsureShow(t.Context(), "s1", seatNames(12)); err != nil || created {
		t.Errorf("EnsureShow of an existing show with the same seats: %v %v", created, err)
	}
}

// TestHoldInARoomEndsByItsDeadline: with Redis frozen (SIGSTOP) or stopped, a hold on
// a show with a waiting room answers ErrUnavailable by its caller's deadline, with the
// autopipeliners on and off. The look-up that refuses a holder outside the room goes
// through the room's deferred autopipeliner, whose queued commands do not end with
// their context: unbounded, it waited 35 s on a frozen Redis and 3.3 s on a stopped one.
func TestHoldInARoomEndsByItsDeadline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		noAP  bool
		stop  bool
		holds string
	}{{"frozen", false, false, "ann"}, {"frozen, no autopipeliner", true, false, "ann"},
		{"stopped", false, true, "ann"}, {"frozen, a holder outside the room", false, false, "bob"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, srv := privateEnv(t, func(cfg *Config) { cfg.NoAutoPipeline = c.noAP })
			v.show("room", seatNames(10)...)
			v.setRules("room", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
			v.admitted("room", "ann")
			v.hold("room", time.Minute, "ann", "S001")
			if c.stop {
				srv.Stop()
			} else {
				srv.Pause()
				defer srv.Resume()
			}
			const deadline = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			_, err := v.e.Hold(ctx, HoldRequest{ShowID: "room", SeatIDs: []string{"S002"}, HolderID: c.holds})
			if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took > deadline+time.Second {
				t.Fatalf("a hold by %s with Redis %s and a deadline of %v: %v after %v, want ErrUnavailable by the deadline",
					c.holds, c.name, deadline, err, took)
			}
		})
	}
}

// TestInlineCallsEndByTheirBound: a script call that goes straight to a plain client
// runs on its caller's goroutine (boundedScripter), with no goroutine to answer for it
// at its bound: go-redis must end it there itself. With Redis frozen, stopped or never
// there, more calls at once than the client has connections, by callers that set no
// deadline, each answer an error within the bound (and a loaded machine's second); one
// the bound ended says so (errScriptTimeout), not that its caller's deadline passed.
func TestInlineCallsEndByTheirBound(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	for _, how := range []string{"frozen", "frozen, new client", "stopped", "never there"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			connect := func(addr string) *redis.Client {
				c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 4})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			var srv *testsvc.RedisServer
			var rdb *redis.Client
			if how == "never there" {
				rdb = connect("127.0.0.1:1") // no server, and no test's server will take it
			} else {
				srv = testsvc.StartRedis(t)
				rdb = connect(srv.Addr())
				var wg sync.WaitGroup
				for range 4 { // connections in the pool
					wg.Go(func() { _ = rdb.Ping(t.Context()).Err() })
				}
				wg.Wait()
			}
			switch how {
			case "frozen":
				srv.Pause()
				defer srv.Resume()
			case "frozen, new client":
				srv.Pause()
				defer srv.Resume()
				rdb = connect(srv.Addr())
			case "stopped":
				srv.Stop()
			}
			b := newBoundedScripter(rdb, rdb, bound)
			if b.inline != lua.Caller(rdb) {
				t.Fatal("a plain client's calls do not run inline")
			}
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					start := time.Now()
					var err error
					if i%4 == 0 {
						err = b.Eval(context.Background(), "return 1", []string{"k"}).Err()
					} else {
						err = b.FCall(context.Background(), "holdfast_any", []string{"k"}).Err()
					}
					took := time.Since(start)
					if err == nil || took > bound+time.Second {
						t.Errorf("call %d with Redis %s: %v after %v, want an error within %v", i, how, err, took, bound)
					}
					if errors.Is(err, context.DeadlineExceeded) || took >= bound && !errors.Is(err, errScriptTimeout) {
						t.Errorf("call %d with Redis %s, by a caller without a deadline: %v, want errScriptTimeout", i, how, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestReadsOutsideTheRoomAreBounded: with Redis frozen, a crowd's holds outside the
// room leave at most admissionReads look-ups waiting, not one a try: each would wait in
// the room's pipeline for as long as Redis stays frozen. With every slot taken, a hold
// without a deadline (as over HTTP), by an admitted holder, still answers ErrUnavailable
// within the bounds: holdAdmissionWait for a slot, redisCallTimeout for the script.
// Not parallel: it counts goroutines.
func TestReadsOutsideTheRoomAreBounded(t *testing.T) {
	v, srv := privateEnv(t)
	v.show("room", seatNames(10)...)
	v.setRules("room", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	v.admitted("room", "ann")
	srv.Pause()
	defer srv.Resume()
	before := runtime.NumGoroutine()
	const tries = 2 * admissionReads
	for i := range tries {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		_, err := v.e.Hold(ctx, HoldRequest{ShowID: "room", SeatIDs: []string{"S002"}, HolderID: fmt.Sprintf("bot-%d", i)})
		cancel()
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("hold %d outside the room with Redis frozen: %v, want ErrUnavailable", i, err)
		}
	}
	if grown := runtime.NumGoroutine() - before; grown > admissionReads+admissionReads/2 {
		t.Fatalf("%d holds outside the room with Redis frozen left %d more goroutines waiting (reads in flight: at most %d)",
			tries, grown, admissionReads)
	}
	if taken := len(v.e.admissionReads); taken != admissionReads {
		t.Fatalf("%d of %d read slots taken after the crowd, want all: the case below needs them taken", taken, admissionReads)
	}
	start := time.Now()
	_, err := v.e.Hold(context.Background(), HoldRequest{ShowID: "room", SeatIDs: []string{"S003"}, HolderID: "ann"})
	if took := time.Since(start); !errors.Is(err, ErrUnavailable) || took > holdAdmissionWait+redisCallTimeout+time.Second {
		t.Fatalf("an admitted holder's hold without a deadline, every read slot taken: %v after %v, want ErrUnavailable within %v",
			err, took, holdAdmissionWait+redisCallTimeout)
	}
}

// TestReadSlotsComeBack: more holds outside the room than admissionReads, one after
// another on a healthy Redis, are each refused as not admitted, and leave every read
// slot free.
func TestReadSlotsComeBack(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("room", seatNames(10)...)
	v.setRules("room", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	for i := range admissionReads + 10 {
		if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "room", SeatIDs: []string{"S001"}, HolderID: fmt.Sprintf("bot-%d", i)}); !errors.Is(err, ErrNotAdmitted) {
			t.Fatalf("hold %d outside the room: %v, want ErrNotAdmitted", i, err)
		}
	}
	if taken := len(v.e.admissionReads); taken != 0 {
		t.Fatalf("%d read slots still taken after %d holds that all answered", taken, admissionReads+10)
	}
}

func TestBackendsDownAreUnavailable(t *testing.T) {
	t.Parallel()
	v, srv := privateEnv(t)
	v.show("s1", "A1", "A2")
	h := v.hold("s1", time.Minute, "", "A1")
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"A2"}})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold with Redis down: %v, want ErrUnavailable", err)
	}
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm with Redis down: %v, want ErrUnavailable", err)
	}
	if err := v.e.Release(ctx, h); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("release with Redis down: %v", err)
	}
	if err := v.e.Ready(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ready with Redis down: %v", err)
	}
	// A seat map never read: its build fails, and the read says so at once instead of
	// waiting for Redis (the context would allow it).
	if _, err := v.e.SeatMap(t.Context(), "s1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a first seat-map read with Redis down: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("calls with Redis down took %v: they must end with the context", elapsed)
	}
	if v.bookings("s1") != 0 {
		t.Fatal("a booking was written with Redis down")
	}

	// PostgreSQL down: a pool on a port where nothing listens.
	dead, err := pgxpool.New(t.Context(), "postgres://holdfast@127.0.0.1:"+strconv.Itoa(testsvc.FreePort(t))+"/x?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	w := newEnvWith(t, dead, testsvc.Redis(t))
	ctx2, cancel2 := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel2()
	if err := w.e.CreateShow(ctx2, "s1", []string{"A1"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("create show with PostgreSQL down: %v", err)
	}
	if _, err := w.e.Hold(ctx2, HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}}); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Fatalf("hold with PostgreSQL down: %v, want ErrUnavailable", err)
	}
}

func TestEvictingRedisIsRefused(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartRedis(t, "--maxmemory-policy", "allkeys-lru")
	v := newEnvWith(t, testsvc.Database(t), srv.Client())
	if err := v.e.CreateShow(t.Context(), "s1", []string{"A1"}); err != nil {
		t.Fatal(err)
	}
	_, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "noeviction") {
		t.Fatalf("hold on an evicting Redis: %v, want ErrUnavailable naming noeviction", err)
	}
	if err := v.e.Ready(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ready on an evicting Redis: %v", err)
	}
	v.rdb.ConfigSet(t.Context(), "maxmemory-policy", "noeviction")
	if err := v.e.Ready(t.Context()); err != nil {
		t.Fatalf("ready after setting noeviction: %v", err)
	}
	v.hold("s1", time.Minute, "", "A1")
}

// TestPolicyCheckSharedByTheFirstHolds: a sale's first holds on a new engine share one
// eviction-policy check (one CONFIG GET), late arrivals included, instead of one each — a crowd of checks that,
// on a busy machine or a Redis Cluster (one per master), ran past their bound and
// answered the holds ErrUnavailable.
func TestPolicyCheckSharedByTheFirstHolds(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	const n = 100
	v.show("s1", seatNames(n)...)
	if err := v.rdb.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{fmt.Sprintf("S%03d", i)}}); err != nil {
				t.Errorf("hold %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	// A hold that found no good check, and reached the shared read only after the
	// first check had recorded one and ended (the race a CI run lost: two reads).
	if err := v.e.sharedPolicyCheck(t.Context()); err != nil {
		t.Fatal(err)
	}
	if calls := commandCalls(t, v.rdb, "config|get"); calls != 1 {
		t.Fatalf("%d first holds and a late one read the eviction policy %d times, want once", n, calls)
	}
}

// TestPolicyChangedIsFoundByTheRecheck: once a check has passed, holds do not wait for
// the next one, and a policy changed to one that evicts is found by it: the holds after
// are refused.
func TestPolicyChangedIsFoundByTheRecheck(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	v.show("s1", seatNames(50)...)
	v.hold("s1", time.Minute, "", "S000")
	v.rdb.ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lru")
	v.e.policyCheckedAt.Store(time.Now().Add(-policyRecheck).UnixNano()) // the recheck is due
	var refused error
	waitFor(t, "a hold refused after the policy changed", 10*time.Second, func() bool {
		_, refused = v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{fmt.Sprintf("S%03d", 1+rand.IntN(49))}})
		return refused != nil && !errors.Is(refused, ErrSeatsUnavailable)
	})
	if !errors.Is(refused, ErrUnavailable) || !strings.Contains(refused.Error(), "noeviction") {
		t.Fatalf("hold after the policy changed: %v, want ErrUnavailable naming noeviction", refused)
	}
}

// commandCalls is how many times Redis ran cmd (INFO commandstats) since its last
// CONFIG RESETSTAT.
func commandCalls(t *testing.T, rdb redis.UniversalClient, cmd string) int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

func TestRedisOutOfMemory(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	v.show("s1", seatNames(10)...)
	h := v.hold("s1", time.Minute, "", "S000")
	before := v.redisSnapshot()
	v.rdb.ConfigSet(t.Context(), "maxmemory", "1")
	_, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"S001", "S002"}})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold out of memory: %v, want ErrUnavailable", err)
	}
	v.rdb.ConfigSet(t.Context(), "maxmemory", "0")
	if after := v.redisSnapshot(); after != before {
		t.Fatalf("an out-of-memory hold wrote:\n%s\n%s", before, after)
	}
	// Release only deletes: it works while Redis is full.
	v.rdb.ConfigSet(t.Context(), "maxmemory", "1")
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatalf("release out of memory: %v", err)
	}
	if v.holdValue("s1", "S000") != "" {
		t.Fatal("release kept the hold")
	}
	v.rdb.ConfigSet(t.Context(), "maxmemory", "0")
}

// TestFunctionFlushBetweenCalls: Redis loses the scripts' function library (FUNCTION
// FLUSH; a restart without persistence or a failover to a replica that lacked it
// answer alike) between calls of every kind: a call alone (hold, release, the waiting
// room's, the waitlist's) and a pipelined batch (a confirmation's reserve and mark)
// each loads it again and runs.
func TestFunctionFlushBetweenCalls(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	ctx := t.Context()
	v.show("s1", "A1", "A2", "A3")
	flush := func() {
		t.Helper()
		if err := v.rdb.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	h := v.hold("s1", time.Minute, "", "A1")
	flush()
	h2 := v.hold("s1", time.Minute, "", "A2")
	flush()
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm after FUNCTION FLUSH: %v", err)
	}
	flush()
	if err := v.e.Release(ctx, h2); err != nil {
		t.Fatalf("release after FUNCTION FLUSH: %v", err)
	}
	v.waitVenue("w1", 10)
	flush()
	v.join("w1", "ann", "A", 1, time.Minute)
	flush()
	if _, err := v.e.Extend(ctx, v.hold("s1", time.Minute, "", "A3"), time.Minute); err != nil {
		t.Fatalf("extend after FUNCTION FLUSH: %v", err)
	}
	libs, err := v.rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: lua.LibraryName()}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("the library after the calls: %v, %v", libs, err)
	}
}

// TestRowLockTimeout: another session holds the seat's fence row; Confirm gives up
// after the lock timeout with ErrUnavailable and leaves no transaction open.
func TestRowLockTimeout(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.LockTimeout = 200 * time.Millisecond })
	v.show("s1", "A1")
	h := v.hold("s1", time.Minute, "", "A1")
	tx, err := v.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "SELECT * FROM seat_fences WHERE seat_id = 'A1' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = v.e.Confirm(ctx, h, ConfirmOptions{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("confirm behind a row lock: %v, want ErrUnavailable", err)
	}
	if ctx.Err() != nil {
		t.Fatal("confirm waited for the context instead of the lock timeout")
	}
	tx.Rollback(t.Context())
	// The engine's own background work (a marker repair round) may be between two
	// statements of a transaction at any moment: what must not be is a session that stays.
	waitFor(t, "no session left idle in a transaction", 5*time.Second, func() bool {
		return v.count("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'") == 0
	})
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatalf("confirm once the lock is gone: %v", err)
	}
}

func TestLogsAndMetricsKeepSecrets(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	reg := prometheus.NewRegistry()
	v := newEnv(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Registerer = reg
	})
	v.show("s1", "A1", "A2", "A3")
	var secrets []string
	h := v.hold("s1", time.Minute, "alice", "A1")
	secrets = append(secrets, h.Token)
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "secret-key-1"})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, "secret-key-1")
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "secret-key-1"}); err != nil {
		t.Fatal(err)
	}
	v.e.Cancel(t.Context(), b.ID)
	h2 := v.hold("s1", time.Minute, "alice", "A2")
	secrets = append(secrets, h2.Token)
	v.rdb.Set(t.Context(), newKeys(v.cfg.KeyPrefix, "s1").gen(), 1, 0)
	h3 := v.hold("s1", time.Minute, "alice", "A3")
	secrets = append(secrets, h3.Token)
	if _, err := v.e.Confirm(t.Context(), h3, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	v.e.Extend(t.Context(), h2, time.Minute)
	v.e.Release(t.Context(), h2)
	v.e.Confirm(t.Context(), h2, ConfirmOptions{})

	mu.Lock()
	logs := buf.String()
	mu.Unlock()
	if !strings.Contains(logs, "booking confirmed") {
		t.Fatalf("expected log lines, got %q", logs)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var metrics strings.Builder
	for _, f := range fams {
		metrics.WriteString(f.String())
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret reached the logs: %s", logs)
		}
		if strings.Contains(metrics.String(), s) {
			t.Fatal("a secret reached the metrics")
		}
	}
	if strings.Contains(metrics.String(), "alice") || strings.Contains(logs, "alice") {
		t.Fatal("a holder id reached the logs or metrics")
	}
	if got := testutil.ToFloat64(v.e.m.ops.WithLabelValues("confirm", "replay")); got != 1 {
		t.Fatalf("confirm replay count %v, want 1", got)
	}
	if got := testutil.ToFloat64(v.e.m.ops.WithLabelValues("confirm", "lost")); got != 1 {
		t.Fatalf("confirm lost count %v, want 1", got)
	}
	if got := testutil.ToFloat64(v.e.m.ops.WithLabelValues("hold", "ok")); got != 3 {
		t.Fatalf("hold ok count %v, want 3", got)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestCancelWithRedisDown: the cancellation commits but its marker write fails, so the
// seat still looks sold: Cancel says ErrUnavailable, not success, and a retried Cancel
// finishes the job (before the background repair would).
func TestCancelWithRedisDown(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t, func(c *Config) { c.MarkerRepairInterval = time.Hour })
	v.show("s1", "A1")
	id := v.sell("s1", "A1")["A1"].ID
	v.e.hooks.afterCommit = func(context.Context) bool { return false } // the write fails
	err := v.e.Cancel(t.Context(), id)
	v.e.hooks.afterCommit = nil
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancel with Redis frozen: %v, want ErrUnavailable", err)
	}
	if b, err := v.e.Booking(t.Context(), id); err != nil || b.Status != BookingCancelled {
		t.Fatalf("the cancellation did not commit: %+v %v", b, err)
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("setup: the stale marker should still refuse holds: %v", err)
	}
	if err := v.e.Cancel(t.Context(), id); err != nil {
		t.Fatalf("retried cancel: %v", err)
	}
	if len(v.soldMarkers("s1")) != 0 {
		t.Fatal("the retried cancel left the marker")
	}
	v.hold("s1", time.Minute, "", "A1")
}

// TestConsumedHoldNeverRebooks: the sold-marker write after a commit failed, so the hold
// keys outlived the booking; the booking is cancelled. The old hold is still "current"
// in Redis, but its generation was consumed: confirming it again must not re-book the
// seat (the counter-repair path must not re-issue it).
func TestConsumedHoldNeverRebooks(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1")
	h := v.hold("s1", time.Minute, "alice", "A1")
	k := newKeys(v.cfg.KeyPrefix, "s1")
	value := v.holdValue("s1", "A1")
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As if the post-commit marker write had failed: the hold key is still there.
	v.rdb.Set(t.Context(), k.hold("A1"), value, time.Minute)
	v.rdb.HDel(t.Context(), v.soldKey("s1", "A1"), "A1")
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	_, err = v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if !errors.Is(err, ErrStaleGeneration) && !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm of a consumed, cancelled hold: %v, want a refusal", err)
	}
	if n := v.bookings("s1"); n != 0 {
		t.Fatalf("the consumed hold re-booked the seat: %d confirmed bookings", n)
	}
}

// TestWaitingRoomRefusesAtOnceAfterAnOutage: once a waiting-room call found Redis
// unavailable, the next ones are refused without a call of their own (ErrUnavailable,
// saying so) instead of each waiting out its bound; once Redis is back, the room
// answers again — after queueDownFor at the latest, and at once after a call answered.
func TestWaitingRoomRefusesAtOnceAfterAnOutage(t *testing.T) {
	t.Parallel()
	v, srv := privateEnv(t)
	v.show("room", seatNames(10)...)
	v.setRules("room", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(-time.Second)}})
	ctx := t.Context()
	if _, err := v.e.Join(ctx, "room", "ann"); err != nil {
		t.Fatalf("join with Redis up: %v", err)
	}
	srv.Stop()
	if _, err := v.e.Join(ctx, "room", "bob"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("join with Redis down: %v, want ErrUnavailable", err)
	}
	// The next one is refused by the mark the failed call left, not by a call of its own.
	_, err := v.e.Join(ctx, "room", "cat")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "last call found Redis unavailable") {
		t.Fatalf("join right after a failed one: %v, want ErrUnavailable from the outage mark", err)
	}
	if _, err := v.e.Ticket(ctx, "room", "ann"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "last call found Redis unavailable") {
		t.Fatalf("ticket right after a failed join: %v, want ErrUnavailable from the outage mark", err)
	}
	srv.Restart()
	// Back: within queueDownFor the mark still refuses; then a join answers (Redis
	// restarted empty, so the engine rebuilds the show's state on the way).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := v.e.Join(ctx, "room", "dan")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("join after Redis came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An answered call cleared the mark: the next call is not refused by it.
	if v.e.queueFailedAt.Load() != 0 {
		t.Fatal("the outage mark stayed after a call answered")
	}
	if _, err := v.e.Ticket(ctx, "room", "dan"); err != nil {
		t.Fatalf("ticket after the room answered again: %v", err)
	}
}
