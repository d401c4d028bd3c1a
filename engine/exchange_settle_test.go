package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestExchangeRecommittedBySettler: an exchange's COMMIT goes to a server that dies
// (the COMMIT never arrives); the server restarts (same cluster and timeline), the
// settler finds the exchange absent there and commits it again. Expected: the booking
// exchanged once, the retry (same key) answered with it, Redis right: the kept and new
// seats sold at the new generation, the given seat free at once.
func TestExchangeRecommittedBySettler(t *testing.T) {
	first := testsvc.StartPostgres(t)
	url := fmt.Sprintf("postgres://holdfast@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", first.Port)
	v := newEnvWith(t, migratedPool(t, url), testsvc.Redis(t), func(c *Config) {
		c.StatementTimeout = time.Second
		c.MarkerRepairInterval = time.Hour // the settler's own work, not the repair's
	})
	v.show("rx", "A1", "A2", "B1")
	b, err := v.e.Confirm(t.Context(), v.hold("rx", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("rx", time.Minute, "alice", "B1")
	var once sync.Once
	v.e.hooks.atCommit = func(context.Context, int) { once.Do(first.Kill) }
	exchange := func() (Booking, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return v.e.Exchange(ctx, b.ID, []string{"A1"}, nil, h, ConfirmOptions{IdempotencyKey: "xk"})
	}
	if _, err := exchange(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an exchange whose server died at its COMMIT: %v, want ErrUnavailable", err)
	}
	first.Start()
	var got Booking
	waitFor(t, "the retry gets the exchanged booking", 30*time.Second, func() bool {
		var err error
		got, err = exchange()
		if err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("retry: %v", err)
		}
		return err == nil
	})
	t.Logf("retry: %+v; settled: %s", got, settledCounts(v.e))
	now, err := v.e.Booking(t.Context(), b.ID)
	if err != nil || !slices.Equal(now.SeatIDs, []string{"A2", "B1"}) || now.Generation != h.Generation {
		t.Errorf("booking after the settlement: %+v %v; want A2 B1 at generation %d", now, err, h.Generation)
	}
	if n := v.count("SELECT count(*)::int FROM booking_events WHERE kind='exchanged'"); n != 1 {
		t.Errorf("%d exchanged events, want 1", n)
	}
	// The settler writes the markers and the tombstones once its batch has answered
	// (the background repair runs once an hour here): A1 given back, A2 and B1 sold at
	// the exchange's generation.
	want := fmt.Sprint(h.Generation)
	waitFor(t, "the settler's markers and tombstones", 10*time.Second, func() bool {
		sold := v.soldMarkers("rx")
		_, a1 := sold["A1"]
		return !a1 && sold["A2"] == want && sold["B1"] == want
	})
	t.Logf("committed_again %v", testutil.ToFloat64(v.e.m.settled.WithLabelValues("committed_again")))
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "rx", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "bob"}); err != nil {
		t.Errorf("A1, given back by the exchange, is not sellable: %v", err)
	}
}

// TestExchangeHolderCountsInRedis: a show with a holder limit of 3. alice books A1 A2
// and holds B1 (3 counted); she exchanges A1 for B1 (2 booked, none held): Redis's
// count of her booked seats must be the database's, and she may hold one more seat,
// not two.
func TestExchangeHolderCountsInRedis(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("hl", "A1", "A2", "B1", "C1", "C2")
	if err := v.e.SetSaleRules(t.Context(), "hl", SaleRules{HolderLimit: 3}); err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), v.hold("hl", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("hl", time.Minute, "alice", "B1")
	if _, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, dc := v.holderCounts("hl")
	t.Logf("Redis counts %v, database %v", rc, dc)
	if rc[holderTag("alice")] != dc[holderTag("alice")] {
		t.Errorf("alice's count: Redis %q, database %q", rc[holderTag("alice")], dc[holderTag("alice")])
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "hl", SeatIDs: []string{"C1", "C2"}, TTL: time.Minute, HolderID: "alice"}); !errors.Is(err, ErrHolderLimit) {
		t.Errorf("alice holds 2 more at 2 booked of 3: %v, want ErrHolderLimit", err)
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "hl", SeatIDs: []string{"C1"}, TTL: time.Minute, HolderID: "alice"}); err != nil {
		t.Errorf("alice holds 1 more at 2 booked of 3: %v", err)
	}
}

// TestExchangeOffers: a hold with an offer gives the booking its offer; one without
// keeps the booking's.
func TestExchangeOffers(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("of", "A1", "A2", "B1", "B2")
	ctx := t.Context()
	h0, err := v.e.Hold(ctx, HoldRequest{ShowID: "of", SeatIDs: []string{"A1", "A2"}, HolderID: "alice", Offer: "first", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(ctx, h0, ConfirmOptions{})
	if err != nil || b.Offer != "first" {
		t.Fatalf("%+v %v", b, err)
	}
	h1 := v.hold("of", time.Minute, "alice", "B1")
	x, err := v.e.Exchange(ctx, b.ID, []string{"A1"}, nil, h1, ConfirmOptions{})
	if err != nil || x.Offer != "first" {
		t.Errorf("exchange with a hold without offer: %+v %v, want offer first", x, err)
	}
	h2, err := v.e.Hold(ctx, HoldRequest{ShowID: "of", SeatIDs: []string{"B2"}, HolderID: "alice", Offer: "second", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h2.Offer = "forged"
	y, err := v.e.Exchange(ctx, b.ID, []string{"A2"}, nil, h2, ConfirmOptions{})
	if err != nil || y.Offer != "second" {
		t.Errorf("exchange with a hold of offer second: %+v %v", y, err)
	}
	if got, _ := v.e.Booking(ctx, b.ID); got.Offer != "second" {
		t.Errorf("Booking offer %q", got.Offer)
	}
}

// TestExchangeQueuedWhileTransferred: the booking moves to bob while alice's exchange is
// on its way to its batch: refused, nothing changed, alice's hold hers still.
func TestExchangeQueuedWhileTransferred(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("tq", "A1", "A2", "B1")
	ctx := t.Context()
	b, err := v.e.Confirm(ctx, v.hold("tq", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("tq", time.Minute, "alice", "B1")
	var once sync.Once
	v.e.hooks.beforeWrite = func(context.Context) {
		once.Do(func() {
			if _, err := v.e.TransferBooking(context.Background(), b.ID, "bob"); err != nil {
				t.Errorf("transfer: %v", err)
			}
		})
	}
	_, err = v.e.Exchange(ctx, b.ID, []string{"A1"}, nil, h, ConfirmOptions{IdempotencyKey: "q"})
	t.Logf("exchange of a booking transferred meanwhile: %v", err)
	if err == nil {
		t.Fatal("alice exchanged bob's booking")
	}
	got, _ := v.e.Booking(ctx, b.ID)
	if got.HolderID != "bob" || !slices.Equal(got.SeatIDs, []string{"A1", "A2"}) || got.Generation != b.Generation {
		t.Errorf("booking now %+v", got)
	}
	if _, err := v.e.Confirm(ctx, h, ConfirmOptions{}); err != nil {
		t.Errorf("alice's hold after the refusal: %v", err)
	}
	v.agreeOnShow("tq")
}

// TestExchangeSameKeyConcurrently: the same exchange sent twice at once under one key
// (a client's retry while the first is on its way): one exchange, both answered with
// it, Redis right after.
func TestExchangeSameKeyConcurrently(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.ConfirmConns = 4 })
	refused := 0
	defer func() { t.Logf("%d retries of 40 refused ErrInvalidArgument", refused) }()
	for i := range 40 {
		show := fmt.Sprintf("sk%d", i)
		v.show(show, "A1", "A2", "B1")
		b, err := v.e.Confirm(t.Context(), v.hold(show, time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := v.hold(show, time.Minute, "alice", "B1")
		var wg sync.WaitGroup
		res := make([]Booking, 2)
		errs := make([]error, 2)
		for j := range 2 {
			wg.Go(func() {
				res[j], errs[j] = v.e.Exchange(context.Background(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{IdempotencyKey: "same"})
			})
		}
		wg.Wait()
		for j := range 2 {
			if errors.Is(errs[j], ErrInvalidArgument) {
				refused++
			}
			if errs[j] != nil || !slices.Equal(res[j].SeatIDs, []string{"A2", "B1"}) {
				t.Errorf("%s: call %d: %+v %v", show, j, res[j], errs[j])
			}
		}
		if hv := v.holdValue(show, "B1"); hv != "" {
			t.Errorf("%s: B1 hold key left: %q", show, hv)
		}
		sold := v.soldMarkers(show)
		if _, ok := sold["A1"]; ok || len(sold) != 2 {
			t.Errorf("%s: markers %v", show, sold)
		}
	}
}

// TestExchangeFeedOrder: the feed has confirmed, exchanged, cancelled of the booking, in
// that order, each with the booking as it was then.
func TestExchangeFeedOrder(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("fo", "A1", "A2", "B1")
	ctx := t.Context()
	b, err := v.e.Confirm(ctx, v.hold("fo", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("fo", time.Minute, "alice", "B1")
	if _, err := v.e.Exchange(ctx, b.ID, []string{"A1"}, nil, h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	evs, _ := waitEvents(t, v.e, "", 3)
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind+fmt.Sprint(ev.Booking.SeatIDs)+fmt.Sprint(ev.Booking.Generation)+string(ev.Booking.Status))
	}
	t.Logf("feed: %v", kinds)
	if len(evs) != 3 || evs[0].Kind != EventConfirmed || evs[1].Kind != EventExchanged || evs[2].Kind != EventCancelled {
		t.Errorf("feed kinds %v", kinds)
	}
	if len(evs) == 3 && (!slices.Equal(evs[1].Booking.SeatIDs, []string{"A2", "B1"}) || !slices.Equal(evs[2].Booking.SeatIDs, []string{"A2", "B1"})) {
		t.Errorf("feed bookings %v", kinds)
	}
}

// TestExchangeRetryRacingItsCommit: a retry under the same key whose key look-up runs
// before the first call's COMMIT and whose booking read runs after it (the retry, on a
// second engine, is held between the two until the first call has answered). It is
// answered with the exchange (Replayed), as any retry under the key; before, it was
// ErrInvalidArgument (the seat given is no longer in the booking), a definitive refusal
// of a request that succeeded.
func TestExchangeRetryRacingItsCommit(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	other := v.twin()
	ctx := t.Context()
	v.show("rr", "A1", "A2", "B1")
	b, err := v.e.Confirm(ctx, v.hold("rr", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("rr", time.Minute, "alice", "B1")
	looked, goOn := make(chan struct{}), make(chan struct{})
	other.hooks.afterRead = func(_ context.Context, path string) {
		if path == "exchange" {
			close(looked)
			<-goOn
		}
	}
	opts := ConfirmOptions{IdempotencyKey: "race"}
	retried := make(chan error, 1)
	var retry Booking
	go func() {
		var err error
		retry, err = other.Exchange(context.Background(), b.ID, []string{"A1"}, nil, h, opts)
		retried <- err
	}()
	<-looked // the retry found the key unused
	first, err := v.e.Exchange(ctx, b.ID, []string{"A1"}, nil, h, opts)
	close(goOn)
	if err != nil || first.Replayed {
		t.Fatalf("the first call: %+v, %v", first, err)
	}
	if rerr := <-retried; rerr != nil || !retry.Replayed || !slices.Equal(retry.SeatIDs, first.SeatIDs) || retry.Generation != first.Generation {
		t.Errorf("the retry under the key of an exchange that committed: %+v, %v; want the exchange, replayed (first %+v)", retry, rerr, first)
	}
}

// TestExchangeOnRedisCluster: exchanges of seats and places, with a holder limit, on a
// three-master Redis Cluster (shows on different masters): markers, tombstones, area
// counts and holder counts as on a single Redis.
func TestExchangeOnRedisCluster(t *testing.T) {
	cluster := testsvc.StartCluster(t)
	v := newEnvWith(t, testsvc.Database(t), cluster.Client())
	ctx := t.Context()
	for i := range 4 {
		show := fmt.Sprintf("cx%d", i)
		v.areaVenue(show, 10)
		if err := v.e.SetSaleRules(ctx, show, SaleRules{HolderLimit: 8}); err != nil {
			t.Fatal(err)
		}
		h0, err := v.holdPlaces(show, time.Minute, "alice", 3, "A1")
		if err != nil {
			t.Fatal(err)
		}
		b, err := v.e.Confirm(ctx, h0, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := v.holdPlaces(show, time.Minute, "alice", 2, "A2")
		if err != nil {
			t.Fatal(err)
		}
		after, err := v.e.Exchange(ctx, b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}, h, ConfirmOptions{IdempotencyKey: "c"})
		if err != nil {
			t.Fatalf("%s: Exchange on the cluster: %v", show, err)
		}
		if !slices.Equal(after.SeatIDs, []string{"A2"}) || !slices.Equal(after.Places, []Places{{AreaID: "FLOOR", Count: 4}}) {
			t.Fatalf("%s: after %+v", show, after)
		}
		v.agreeOnShow(show, "FLOOR")
		if rc, dc := v.holderCounts(show); rc[holderTag("alice")] != dc[holderTag("alice")] {
			t.Errorf("%s: alice's counts Redis %v database %v", show, rc, dc)
		}
		if _, err := v.holdPlaces(show, time.Minute, "bob", 6, "A1"); err != nil {
			t.Errorf("%s: what the exchange gave back: %v", show, err)
		}
		if again, err := v.e.Exchange(ctx, b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}, h, ConfirmOptions{IdempotencyKey: "c"}); err != nil || !again.Replayed {
			t.Errorf("%s: retry %+v %v", show, again, err)
		}
		rep, err := v.e.Reconcile(ctx, show)
		if err != nil || len(rep.Lost) != 0 || rep.Lowered != 0 {
			t.Errorf("%s: Reconcile %+v %v", show, rep, err)
		}
	}
}
