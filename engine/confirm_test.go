package engine

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
	"github.com/holdfast/holdfast/internal/testsvc"
)

func TestConfirmBooksAndMarksSold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2", "A3")
	h := v.hold("s1", time.Minute, "alice", "A2", "A1")
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatalf("confirm: %v", err)
	}
	if b.Status != BookingConfirmed || !slices.Equal(b.SeatIDs, []string{"A1", "A2"}) || b.Generation != h.Generation || b.HolderID != "alice" || b.Replayed {
		t.Fatalf("booking %+v", b)
	}
	got, err := v.e.Booking(t.Context(), b.ID)
	if err != nil || got.ID != b.ID || got.Status != BookingConfirmed || !slices.Equal(got.SeatIDs, b.SeatIDs) {
		t.Fatalf("Booking(id) = %+v, %v", got, err)
	}
	// The hold keys are replaced by the sold marker: a new hold is refused at once.
	if v.holdValue("s1", "A1") != "" || v.soldMarkers("s1")["A1"] != strconv.FormatInt(b.Generation, 10) {
		t.Fatalf("after confirm: hold %q, markers %v", v.holdValue("s1", "A1"), v.soldMarkers("s1"))
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A3", "A1"}}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("hold on a sold seat: %v", err)
	}
	// The same hold cannot confirm twice.
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("second confirm without a key: %v, want ErrHoldLost", err)
	}
	states, err := v.e.Seats(t.Context(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := []SeatStatus{SeatSold, SeatSold, SeatFree}
	for i, s := range states {
		if s.Status != want[i] {
			t.Fatalf("seat map %+v", states)
		}
	}
	if v.bookings("s1") != 1 || v.count("SELECT count(*) FROM booking_events WHERE kind = 'confirmed'") != 1 {
		t.Fatal("want one booking and one confirmed event")
	}
}

// TestBookingIDsFollowConfirmationOrder: a booking's id is a UUIDv7, and bookings
// confirmed one after another have increasing ids, so that their index entries are
// appended, not scattered.
func TestBookingIDsFollowConfirmationOrder(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := []string{"A1", "A2", "A3", "A4", "A5", "A6", "A7", "A8"}
	v.show("ids", seats...)
	var last uuid.UUID
	for i, s := range seats {
		b, err := v.e.Confirm(t.Context(), v.hold("ids", time.Minute, "alice", s), ConfirmOptions{})
		if err != nil {
			t.Fatalf("confirm %s: %v", s, err)
		}
		if b.ID.Version() != 7 {
			t.Fatalf("booking %d has id %s, of version %d, want 7", i, b.ID, b.ID.Version())
		}
		if i > 0 && bytes.Compare(b.ID[:], last[:]) <= 0 {
			t.Fatalf("booking %d has id %s, not after the one before it, %s", i, b.ID, last)
		}
		last = b.ID
	}
}

// TestLateConfirm: the owner whose hold expired confirms before, and after, the new owner.
func TestLateConfirm(t *testing.T) {
	t.Parallel()
	for _, lateFirst := range []bool{true, false} {
		v := newEnv(t)
		v.show("s1", "A1")
		old := v.hold("s1", 80*time.Millisecond, "alice", "A1")
		v.waitExpired(old)
		cur := v.hold("s1", time.Minute, "bob", "A1")
		var lateErr error
		if lateFirst {
			_, lateErr = v.e.Confirm(t.Context(), old, ConfirmOptions{})
		}
		if _, err := v.e.Confirm(t.Context(), cur, ConfirmOptions{}); err != nil {
			t.Fatalf("current owner confirm: %v", err)
		}
		if !lateFirst {
			_, lateErr = v.e.Confirm(t.Context(), old, ConfirmOptions{})
		}
		if !errors.Is(lateErr, ErrHoldLost) && !errors.Is(lateErr, ErrStaleGeneration) {
			t.Fatalf("late confirm (first=%v): %v, want ErrHoldLost or ErrStaleGeneration", lateFirst, lateErr)
		}
		if n := v.bookings("s1"); n != 1 {
			t.Fatalf("%d bookings, want 1", n)
		}
	}
}

// TestPausedOwnerIsRefused: the owner pauses between its first Redis check and its
// transaction; meanwhile its hold expires and a newer holder books the seat. Resumed, it
// is refused before the database does anything for it: its hold has no time left
// (ErrHoldLost); had it reached its batch, the check there and the fence behind it
// refuse it (TestHoldLostBeforeCommit, TestChaosEngineProcessPaused).
func TestPausedOwnerIsRefused(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1")
	other := v.twin()
	old := v.hold("s1", time.Second, "alice", "A1") // current at the first check on a loaded machine
	var newer Booking
	v.e.hooks.beforeWrite = func(ctx context.Context) {
		v.waitExpired(old)
		h, err := other.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}, HolderID: "bob"})
		if err != nil {
			t.Errorf("newer hold: %v", err)
			return
		}
		if newer, err = other.Confirm(ctx, h, ConfirmOptions{}); err != nil {
			t.Errorf("newer confirm: %v", err)
		}
	}
	_, err := v.e.Confirm(t.Context(), old, ConfirmOptions{})
	if !errors.Is(err, ErrHoldLost) {
		t.Fatalf("paused owner: %v, want ErrHoldLost", err)
	}
	if n := v.bookings("s1"); n != 1 {
		t.Fatalf("%d bookings, want 1", n)
	}
	if c := v.claims("s1"); c["A1"] != newer.ID.String() {
		t.Fatalf("claim %v, want the newer booking %s", c, newer.ID)
	}
	if n := testutil.ToFloat64(v.e.m.admissionRefusals.WithLabelValues("too_late")); n != 1 {
		t.Fatalf("%v too_late refusals, want 1", n)
	}
}

// TestHoldLostBeforeCommit: the hold expires after the writes, before COMMIT. The second
// Redis check rolls everything back. The hold lives long enough (2 s) for its batch's
// first check to find it current on a busy machine: one that expired before that check
// is an ordinary lost hold, refused without writes or an event.
func TestHoldLostBeforeCommit(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	h := v.hold("s1", 2*time.Second, "alice", "A1", "A2")
	v.e.hooks.beforeCommit = func(context.Context) { v.waitExpired(h) }
	before := v.dbSnapshot()
	_, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "k1"})
	if !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm: %v, want ErrHoldLost", err)
	}
	v.e.hooks.beforeCommit = nil
	if n := v.count("SELECT count(*) FROM bookings") + v.count("SELECT count(*) FROM seat_claims") +
		v.count("SELECT count(*) FROM seat_fences WHERE generation > 0"); n != 0 {
		t.Fatalf("a rolled-back confirm left %d rows", n)
	}
	after := v.dbSnapshot()
	if n := v.count("SELECT count(*) FROM booking_events WHERE kind = 'refused_lost'"); n != 1 || len(after) <= len(before) {
		t.Fatalf("want exactly the refused_lost event added, got %d", n)
	}
	// The seats are free for the next holder.
	h2 := v.hold("s1", time.Minute, "bob", "A1", "A2")
	if _, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{}); err != nil {
		t.Fatalf("next holder: %v", err)
	}
}

func TestIdempotentConfirm(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2", "A3")
	h := v.hold("s1", time.Minute, "alice", "A1")
	first, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "order-17"})
	if err != nil {
		t.Fatal(err)
	}
	// A retry after a lost response: the hold keys are gone, the key finds the booking.
	again, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "order-17"})
	if err != nil || again.ID != first.ID || !again.Replayed || !slices.Equal(again.SeatIDs, first.SeatIDs) {
		t.Fatalf("retry: %+v, %v; want booking %s replayed", again, err, first.ID)
	}
	// The same key with another request.
	other := v.hold("s1", time.Minute, "alice", "A2")
	if _, err := v.e.Confirm(t.Context(), other, ConfirmOptions{IdempotencyKey: "order-17"}); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("same key, other hold: %v, want ErrIdempotencyKeyReused", err)
	}
	if v.holdValue("s1", "A2") == "" {
		t.Fatal("the refused request lost its hold")
	}
	// Another holder replaying alice's key and hold never sees alice's booking.
	stolen := h
	stolen.HolderID = "mallory"
	b, err := v.e.Confirm(t.Context(), stolen, ConfirmOptions{IdempotencyKey: "order-17"})
	if err == nil || b.ID == first.ID {
		t.Fatalf("mallory replaying alice's key got %+v, %v", b, err)
	}
	// Mallory's own key with alice's booked hold: nothing either.
	if _, err := v.e.Confirm(t.Context(), stolen, ConfirmOptions{IdempotencyKey: "m-1"}); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("mallory: %v, want ErrHoldLost", err)
	}
	if v.bookings("s1") != 1 {
		t.Fatal("want one booking")
	}
}

func TestConcurrentRetriesWithOneKeyBookOnce(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1", "A2")
	h := v.hold("s1", time.Minute, "alice", "A1", "A2")
	const n = 16
	ids := make([]uuid.UUID, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			b, err := v.e.Confirm(context.Background(), h, ConfirmOptions{IdempotencyKey: "dup"})
			ids[i], errs[i] = b.ID, err
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("retry %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("retries returned different bookings: %v", ids)
		}
	}
	if v.bookings("s1") != 1 {
		t.Fatal("want exactly one booking")
	}
}

func TestCancelKeepsTheFence(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("s1", "A1")
	h := v.hold("s1", time.Minute, "alice", "A1")
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	got, err := v.e.Booking(t.Context(), b.ID)
	if err != nil || got.Status != BookingCancelled || got.CancelledAt == nil {
		t.Fatalf("after cancel: %+v %v", got, err)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatalf("cancel twice: %v", err)
	}
	if len(v.soldMarkers("s1")) != 0 || len(v.claims("s1")) != 0 {
		t.Fatal("cancel left a marker or a claim")
	}
	// The old hold cannot book again.
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) && !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("old hold after cancel: %v", err)
	}
	if f := v.count("SELECT generation FROM seat_fences WHERE seat_id = 'A1'"); int64(f) != h.Generation {
		t.Fatalf("fence %d after cancel, want %d", f, h.Generation)
	}
	// A new holder can.
	h2 := v.hold("s1", time.Minute, "bob", "A1")
	b2, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{})
	if err != nil || h2.Generation <= h.Generation {
		t.Fatalf("new holder: %v (generation %d after %d)", err, h2.Generation, h.Generation)
	}
	if v.claims("s1")["A1"] != b2.ID.String() {
		t.Fatal("claim is not the new booking's")
	}
	if err := v.e.Cancel(t.Context(), uuid.New()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
	if _, err := v.e.Booking(t.Context(), uuid.New()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown booking: %v", err)
	}
}

// TestManyBuyersOneSeatEndToEnd: many goroutines hold and confirm the same seats; every
// seat ends with at most one booking and every success is in the database.
func TestManyBuyersEndToEnd(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	seats := seatNames(8)
	v.show("s1", seats...)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var booked []Booking
	for i := range 64 {
		wg.Go(func() {
			ctx := context.Background()
			s := seats[i%len(seats)]
			h, err := v.e.Hold(ctx, HoldRequest{ShowID: "s1", SeatIDs: []string{s}, TTL: 50 * time.Millisecond})
			if err != nil {
				if !errors.Is(err, ErrSeatsUnavailable) {
					t.Errorf("hold: %v", err)
				}
				return
			}
			time.Sleep(time.Duration(i%3) * 30 * time.Millisecond) // some pay late
			b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
			switch {
			case err == nil:
				mu.Lock()
				booked = append(booked, b)
				mu.Unlock()
			case errors.Is(err, ErrHoldLost), errors.Is(err, ErrStaleGeneration), errors.Is(err, ErrSeatsUnavailable):
			default:
				t.Errorf("confirm: %v", err)
			}
		})
	}
	wg.Wait()
	if v.doubleBookings() != 0 {
		t.Fatal("a seat is booked twice")
	}
	for _, b := range booked {
		if got, err := v.e.Booking(t.Context(), b.ID); err != nil || got.Status != BookingConfirmed {
			t.Fatalf("acknowledged booking %s: %v", b.ID, err)
		}
	}
	if len(booked) != v.bookings("s1") {
		t.Fatalf("%d acknowledged, %d in the database", len(booked), v.bookings("s1"))
	}
}

// scriptCounter is a go-redis hook that counts the calls of each script by its
// function's name.
type scriptCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (s *scriptCounter) count(cmd redis.Cmder) {
	args := cmd.Args()
	if name, _ := args[0].(string); len(args) > 1 && strings.HasPrefix(strings.ToLower(name), "fcall") {
		fn, _ := args[1].(string)
		s.mu.Lock()
		s.calls[fn]++
		s.mu.Unlock()
	}
}

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// since returns the calls of each script since the last since, and starts again.
func (s *scriptCounter) since() (verify, reserve int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	verify, reserve = s.calls[lua.Verify.Name()], s.calls[lua.Reserve.Name()]
	s.calls = map[string]int{}
	return verify, reserve
}

// TestConfirmChecksTheHoldOnceUnlessAsked: a confirmation whose hold says it has time
// left is checked in Redis once, by its batch (reserve.lua), not before it too
// (verify.lua); one that does not say (no ExpiresAt, or too little of it) is checked
// first. A hold its batch does not find as presented is asked about before the answer:
// released, it is refused and the database is left as it was; its caller's expiry out
// of date (the hold extended since), it is confirmed all the same, though its batch was
// late for that expiry.
func TestConfirmChecksTheHoldOnceUnlessAsked(t *testing.T) {
	t.Parallel()
	rdb, err := testsvc.NewRedisClient()
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	counter := &scriptCounter{calls: map[string]int{}}
	rdb.AddHook(counter)
	v := newEnvWith(t, testsvc.Database(t), rdb, func(c *Config) { c.ConfirmConns = 1 })
	v.show("s1", "A1", "A2", "A3", "A4", "A5", "A6")
	confirm := func(h Hold) error {
		_, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
		return err
	}
	// The library loaded (the first calls load it): no call below is made twice.
	if err := confirm(v.hold("s1", time.Minute, "alice", "A1")); err != nil {
		t.Fatal(err)
	}
	noExpiry := v.hold("s1", time.Minute, "alice", "A5")
	noExpiry.ExpiresAt = time.Time{}
	if err := confirm(noExpiry); err != nil {
		t.Fatal(err)
	}

	h := v.hold("s1", time.Minute, "alice", "A2")
	counter.since()
	if err := confirm(h); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	if verify, reserve := counter.since(); verify != 0 || reserve != 1 {
		t.Fatalf("a hold with a minute left: %d verify.lua and %d reserve.lua calls, want 0 and 1", verify, reserve)
	}

	released := v.hold("s1", time.Minute, "alice", "A3")
	if err := v.e.Release(t.Context(), released); err != nil {
		t.Fatal(err)
	}
	before := v.dbSnapshot()
	counter.since()
	if err := confirm(released); !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm of a released hold: %v, want ErrHoldLost", err)
	}
	if verify, reserve := counter.since(); verify != 1 || reserve != 1 {
		t.Fatalf("a released hold: %d verify.lua and %d reserve.lua calls, want 1 and 1", verify, reserve)
	}
	if after := v.dbSnapshot(); after != before {
		t.Fatalf("a hold released before its confirmation changed the database:\nbefore %s\nafter  %s", before, after)
	}

	// The caller's copy says the hold expires in 300 ms (it was extended since). Its
	// batch is late for that, behind one that stalls: it is asked about in Redis, and
	// confirmed.
	h4 := v.hold("s1", time.Minute, "alice", "A4")
	h4.ExpiresAt = time.Now().Add(300 * time.Millisecond)
	gate := holdFirstBatch(v.e)
	unstall := sync.OnceFunc(func() { close(gate.open) })
	defer unstall() // a failure below must not leave the batch stalled
	first := make(chan error, 1)
	go func() { first <- confirm(v.hold("s1", time.Minute, "bob", "A6")) }()
	<-gate.entered
	counter.since()
	late := make(chan error, 1)
	go func() { late <- confirm(h4) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		counter.mu.Lock()
		asked := counter.calls[lua.Verify.Name()]
		counter.mu.Unlock()
		if asked > 0 {
			break
		}
		select {
		case err := <-late:
			t.Fatalf("the late confirmation answered %v without asking Redis about its hold", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the late confirmation was never asked about in Redis")
		}
		time.Sleep(5 * time.Millisecond)
	}
	unstall()
	if err := <-first; err != nil {
		t.Fatalf("the stalled batch's confirmation: %v", err)
	}
	if err := <-late; err != nil {
		t.Fatalf("confirm of a hold whose caller's expiry passed while it waited: %v", err)
	}
	if n := testutil.ToFloat64(v.e.m.admissionRefusals.WithLabelValues("too_late")); n != 0 {
		t.Fatalf("%v too_late refusals, want 0", n)
	}
	if n := v.bookings("s1"); n != 5 {
		t.Fatalf("%d bookings, want 5 (A1, A2, A4, A5, A6)", n)
	}
}
