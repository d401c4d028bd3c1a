package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
)

// agreeOnShow fails unless Redis and PostgreSQL agree on show: Redis marks sold
// exactly the claimed seats, each at its claim's generation, and each area's sold
// places are PostgreSQL's claimed places, none held.
func (v *env) agreeOnShow(show string, areas ...string) {
	v.t.Helper()
	if marks, claims := v.soldMarkers(show), v.claimMarks(show); !maps.Equal(marks, claims) {
		v.t.Fatalf("Redis's sold markers %v, PostgreSQL's claims %v", marks, claims)
	}
	for _, a := range areas {
		if _, held, sold := v.areaState(show, a); held != 0 || sold != v.areaSold(show, a) {
			v.t.Fatalf("area %s: Redis held %d sold %d, PostgreSQL sold %d", a, held, sold, v.areaSold(show, a))
		}
	}
}

// swapSnapshot is dbSnapshot with what an exchange changes besides: the bookings'
// generations and offers, their places, the areas' sold and the holders' counts.
func (v *env) swapSnapshot() string {
	v.t.Helper()
	var s *string
	err := v.pool.QueryRow(v.t.Context(), `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT 'booking ' || booking_id || ' ' || generation || ' ' || COALESCE(offer, '') FROM bookings
		UNION ALL SELECT 'places ' || booking_id || ' ' || area_id || ' ' || places || ' ' || hold_id || ' ' || claimed FROM booking_places
		UNION ALL SELECT 'seat ' || booking_id || ' ' || seat_id FROM booking_seats
		UNION ALL SELECT 'area ' || show_id || ' ' || area_id || ' ' || sold FROM areas
		UNION ALL SELECT 'holder ' || show_id || ' ' || holder_id || ' ' || seats FROM holder_seats) t(x)`).Scan(&s)
	if err != nil {
		v.t.Fatal(err)
	}
	if s == nil {
		return v.dbSnapshot()
	}
	return v.dbSnapshot() + "\n" + *s
}

// withoutRefusals is a snapshot without the refusals' and repairs' entries in the
// operators' log (refused_*, *_repaired): a refusal writes them, and changes nothing
// else.
func withoutRefusals(s string) string {
	return strings.Join(slices.DeleteFunc(strings.Split(s, "\n"), func(l string) bool {
		return strings.HasPrefix(l, "event ") && (strings.Contains(l, " refused_") || strings.HasSuffix(l, "_repaired"))
	}), "\n")
}

// TestExchangeSwapsSeatsInOneBooking: a booking of A1 A2 gives A1 for B1 of a new hold:
// the same booking id, now A2 B1 at the hold's generation; A2's claim and fence move to
// that generation, A1 is another buyer's at once; PostgreSQL and Redis agree; the feed
// has an exchanged event with the booking after it; the hold is spent.
func TestExchangeSwapsSeatsInOneBooking(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("x1", "A1", "A2", "B1", "B2")
	b, err := v.e.Confirm(t.Context(), v.hold("x1", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("x1", time.Minute, "alice", "B1")
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{})
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	if after.ID != b.ID || after.Status != BookingConfirmed || after.Generation != h.Generation || after.HolderID != "alice" ||
		!slices.Equal(after.SeatIDs, []string{"A2", "B1"}) {
		t.Fatalf("booking after the exchange: %+v (hold generation %d)", after, h.Generation)
	}
	if got, err := v.e.Booking(t.Context(), b.ID); err != nil || !slices.Equal(got.SeatIDs, after.SeatIDs) || got.Generation != after.Generation {
		t.Fatalf("Booking: %+v, %v", got, err)
	}
	if c := v.claims("x1"); len(c) != 2 || c["A2"] != b.ID.String() || c["B1"] != b.ID.String() {
		t.Fatalf("claims %v", c)
	}
	if n := v.count("SELECT count(*)::int FROM seat_fences WHERE show_id = 'x1' AND seat_id IN ('A2','B1') AND generation = $1", h.Generation); n != 2 {
		t.Fatalf("%d of A2, B1 fenced at the hold's generation", n)
	}
	v.agreeOnShow("x1")
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "x1", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "bob"}); err != nil {
		t.Fatalf("A1 after the exchange gave it back: %v", err)
	}
	evs, _ := waitEvents(t, v.e, "", 2)
	last := evs[len(evs)-1]
	if last.Kind != EventExchanged || last.Booking.ID != b.ID || last.Booking.Status != BookingConfirmed ||
		last.Booking.Generation != h.Generation || !slices.Equal(last.Booking.SeatIDs, after.SeatIDs) {
		t.Fatalf("last event %+v", last)
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); !errors.Is(err, ErrHoldLost) && !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("Confirm of the exchanged hold: %v, want it refused", err)
	}
	// A late confirmation of the booking's first hold, or of any hold older than the
	// exchange, is fenced off A2 (its fence moved to the exchange's generation).
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d double bookings", n)
	}
}

// TestExchangePlaces: places of an area the booking keeps join the hold's (one claim of
// the sum, under the hold); places given back are sellable at once; a booking of places
// alone takes an older hold (re-issued above its generation).
func TestExchangePlaces(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("x2", 10)
	older, err := v.holdPlaces("x2", time.Minute, "alice", 2) // before the booking: a lower generation
	if err != nil {
		t.Fatal(err)
	}
	b := v.bookPlaces("x2", "alice", 4, "A1")
	// Give A1 and 1 place, take 2 places: FLOOR 3 + 2 = 5, no seat.
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}, older, ConfirmOptions{})
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	if after.ID != b.ID || len(after.SeatIDs) != 0 || !slices.Equal(after.Places, []Places{{AreaID: "FLOOR", Count: 5}}) || after.Generation <= b.Generation {
		t.Fatalf("booking after: %+v (before: generation %d)", after, b.Generation)
	}
	if sold := v.areaSold("x2", "FLOOR"); sold != 5 {
		t.Fatalf("FLOOR sold %d, want 5", sold)
	}
	v.agreeOnShow("x2", "FLOOR")
	if n := v.count("SELECT count(*)::int FROM booking_places WHERE booking_id = $1 AND claimed", b.ID); n != 1 {
		t.Fatalf("%d claimed rows of the booking, want 1", n)
	}
	// The rest of the area and A1 are another buyer's.
	if _, err := v.holdPlaces("x2", time.Minute, "bob", 5, "A1"); err != nil {
		t.Fatalf("the rest after the exchange: %v", err)
	}
	// Cancelling the exchanged booking gives everything back.
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if sold := v.areaSold("x2", "FLOOR"); sold != 0 {
		t.Fatalf("FLOOR sold %d after the cancellation", sold)
	}
	v.agreeOnShow("x2")
	if _, held, sold := v.areaState("x2", "FLOOR"); held != 5 || sold != 0 {
		t.Fatalf("Redis after the cancellation: held %d sold %d, want bob's 5 and 0", held, sold)
	}
}

// TestExchangeRefusalsChangeNothing: every refusal leaves the booking, its claims and
// fences, Redis's markers and the hold exactly as they were, with a typed error.
func TestExchangeRefusalsChangeNothing(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("x3", 6)
	if err := v.e.SetSaleRules(t.Context(), "x3", SaleRules{HolderLimit: 6}); err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), v.hold("x3", time.Minute, "alice", "A1"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := v.e.Confirm(t.Context(), v.hold("x3", time.Minute, "carol", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.holdPlaces("x3", time.Minute, "alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	bobs, err := v.holdPlaces("x3", time.Minute, "bob", 1)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := v.holdPlaces("x3", time.Minute, "alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.e.Release(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	db0, rd0 := v.swapSnapshot(), v.redisSnapshot()
	cases := []struct {
		name   string
		id     uuid.UUID
		give   []string
		places []Places
		h      Hold
		opts   ConfirmOptions
		want   error
	}{
		{"a seat the booking has not", b.ID, []string{"A2"}, nil, h, ConfirmOptions{}, ErrInvalidArgument},
		{"places the booking has not", b.ID, nil, []Places{{AreaID: "FLOOR", Count: 1}}, h, ConfirmOptions{}, ErrInvalidArgument},
		{"a seat named twice", b.ID, []string{"A1", "A1"}, nil, h, ConfirmOptions{}, ErrInvalidArgument},
		{"another holder's hold", b.ID, []string{"A1"}, nil, bobs, ConfirmOptions{}, ErrInvalidArgument},
		{"another holder's booking", other.ID, []string{"A2"}, nil, h, ConfirmOptions{}, ErrInvalidArgument},
		{"part of the hold", b.ID, []string{"A1"}, nil, h, ConfirmOptions{Places: []Places{{AreaID: "FLOOR", Count: 1}}}, ErrInvalidArgument},
		{"an unknown booking", uuid.New(), nil, nil, h, ConfirmOptions{}, ErrNotFound},
		{"a hold lost", b.ID, []string{"A1"}, nil, lost, ConfirmOptions{}, ErrHoldLost},
	}
	for _, c := range cases {
		if _, err := v.e.Exchange(t.Context(), c.id, c.give, c.places, c.h, c.opts); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if db1, rd1 := v.swapSnapshot(), v.redisSnapshot(); db1 != db0 || rd1 != rd0 {
			t.Fatalf("%s changed something:\nPostgreSQL %s\nwas %s\nRedis %s\nwas %s", c.name, db1, db0, rd1, rd0)
		}
	}
	// A booking cancelled meanwhile: refused, and the hold is the holder's still.
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Exchange(t.Context(), b.ID, nil, nil, h, ConfirmOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("exchange into a cancelled booking: %v", err)
	}
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatalf("the hold after the refusals: %v", err)
	}
}

// TestExchangeHolderLimitInDatabase: the database counts an exchange's seats against
// the holder limit after what it gives back, so a swap at the limit passes and one past
// it is refused (ErrHolderLimit) and changes nothing.
func TestExchangeHolderLimitInDatabase(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("x4", "A1", "A2", "B1", "B2")
	b, err := v.e.Confirm(t.Context(), v.hold("x4", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("x4", time.Minute, "alice", "B1", "B2")
	// The limit comes after the hold (Redis would refuse the hold past it).
	if _, err := v.pool.Exec(t.Context(), "UPDATE shows SET holder_limit = 3 WHERE show_id = 'x4'"); err != nil {
		t.Fatal(err)
	}
	db0 := v.swapSnapshot()
	if _, err := v.e.Exchange(t.Context(), b.ID, nil, nil, h, ConfirmOptions{}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("an exchange to 4 seats past a limit of 3: %v, want ErrHolderLimit", err)
	}
	if v.swapSnapshot() != db0 {
		t.Fatal("the refused exchange changed the database")
	}
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, ConfirmOptions{})
	if err != nil || !slices.Equal(after.SeatIDs, []string{"A2", "B1", "B2"}) {
		t.Fatalf("an exchange to 3 seats: %+v, %v", after, err)
	}
	if n := v.count("SELECT seats FROM holder_seats WHERE show_id = 'x4' AND holder_id = 'alice'"); n != 3 {
		t.Fatalf("holder_seats %d, want 3", n)
	}
}

// TestExchangeIdempotent: a retry under the same key gets the same booking and changes
// nothing; another request under it is ErrIdempotencyKeyReused.
func TestExchangeIdempotent(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("x5", "A1", "A2", "B1")
	b, err := v.e.Confirm(t.Context(), v.hold("x5", time.Minute, "alice", "A1", "A2"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := v.hold("x5", time.Minute, "alice", "B1")
	opts := ConfirmOptions{IdempotencyKey: "swap-1"}
	first, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	db0 := v.swapSnapshot()
	again, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, h, opts)
	if err != nil || !again.Replayed || again.ID != first.ID || again.Generation != first.Generation || !slices.Equal(again.SeatIDs, first.SeatIDs) {
		t.Fatalf("retry: %+v, %v; first %+v", again, err, first)
	}
	if v.swapSnapshot() != db0 {
		t.Fatal("the retry changed the database")
	}
	if _, err := v.e.Exchange(t.Context(), b.ID, []string{"A2"}, nil, h, opts); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("another exchange under the key: %v", err)
	}
}

// TestExchangeNeverBothNorNeither: while 16 goroutines exchange one seat of each of 8
// bookings back and forth between two rows (and others try to hold and confirm the
// seats given back), a reader polling PostgreSQL in its own transactions always finds
// each booking with exactly two seats claimed, and every seat claimed at most once.
func TestExchangeNeverBothNorNeither(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	const n = 8
	var seats []string
	for i := range n {
		seats = append(seats, fmt.Sprintf("K%d", i), fmt.Sprintf("X%d", i), fmt.Sprintf("Y%d", i))
	}
	v.show("x6", seats...)
	ids := make([]uuid.UUID, n)
	for i := range n {
		b, err := v.e.Confirm(t.Context(), v.hold("x6", time.Minute, fmt.Sprint("h", i), fmt.Sprintf("K%d", i), fmt.Sprintf("X%d", i)), ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = b.ID
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var exchanges, stolen atomic.Int64
	var owners, others sync.WaitGroup
	stop := make(chan struct{})
	for i := range n {
		owners.Go(func() { // the owner swaps X <-> Y, 12 times
			have, want := fmt.Sprintf("X%d", i), fmt.Sprintf("Y%d", i)
			for k := 0; k < 12 && ctx.Err() == nil; {
				h, err := v.e.Hold(ctx, HoldRequest{ShowID: "x6", SeatIDs: []string{want}, TTL: time.Minute, HolderID: fmt.Sprint("h", i)})
				if err != nil {
					continue // the thief holds it for now
				}
				if _, err := v.e.Exchange(ctx, ids[i], []string{have}, nil, h, ConfirmOptions{}); err != nil {
					t.Errorf("exchange %d: %v", i, err)
					return
				}
				exchanges.Add(1)
				have, want, k = want, have, k+1
			}
		})
		others.Go(func() { // a thief holds the seats given back, and lets go
			for k := 0; ; k++ {
				s := fmt.Sprintf("%c%d", "XY"[k%2], i)
				select {
				case <-stop:
					return
				default:
				}
				h, err := v.e.Hold(ctx, HoldRequest{ShowID: "x6", SeatIDs: []string{s}, TTL: time.Minute, HolderID: "thief"})
				if err == nil {
					time.Sleep(2 * time.Millisecond)
					if err := v.e.Release(t.Context(), h); err != nil {
						t.Errorf("release: %v", err)
					}
					stolen.Add(1)
				}
			}
		})
	}
	var polls int
	others.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var bad int
			err := v.pool.QueryRow(ctx, `SELECT count(*)::int FROM bookings b WHERE b.show_id = 'x6' AND
				(SELECT count(*) FROM seat_claims c WHERE c.show_id = 'x6' AND c.booking_id = b.booking_id) <> 2`).Scan(&bad)
			if err == nil && bad > 0 {
				t.Errorf("poll %d: %d bookings without exactly two seats claimed", polls, bad)
				return
			}
			polls++
		}
	})
	owners.Wait()
	close(stop)
	others.Wait()
	t.Logf("%d exchanges, %d holds of seats given back, %d polls", exchanges.Load(), stolen.Load(), polls)
	if exchanges.Load() != 12*n {
		t.Fatalf("%d exchanges, want %d", exchanges.Load(), 12*n)
	}
	if d := v.doubleBookings(); d != 0 {
		t.Fatalf("%d double bookings", d)
	}
	v.agreeOnShow("x6")
}

// TestExchangeKeepsMarkersAtClaims: after an exchange that keeps places of an area the
// hold has none of, then a partial cancellation and a cancellation of the booking,
// Reconcile finds Redis exactly where PostgreSQL is each time: every marker at its
// claim's generation, nothing lost, nothing lowered. (A partial cancellation of places
// leaves the tombstone of the key's old name, which the database no longer names:
// Reconcile once took it for a lost cancellation.)
func TestExchangeKeepsMarkersAtClaims(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("x7", 10)
	b := v.bookPlaces("x7", "alice", 4, "A1")
	clean := func(step string) {
		t.Helper()
		rep, err := v.e.Reconcile(t.Context(), "x7")
		if err != nil || rep.Lowered != 0 || len(rep.Lost) != 0 || rep.LostCancellations != 0 {
			t.Fatalf("%s: Reconcile %+v, %v: Redis is not where PostgreSQL is", step, rep, err)
		}
		v.agreeOnShow("x7", "FLOOR")
	}
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, v.hold("x7", time.Minute, "alice", "A2"), ConfirmOptions{})
	if err != nil || !slices.Equal(after.SeatIDs, []string{"A2"}) || !slices.Equal(after.Places, []Places{{AreaID: "FLOOR", Count: 4}}) {
		t.Fatalf("Exchange: %+v, %v", after, err)
	}
	clean("after the exchange")
	if _, err := v.e.CancelSeats(t.Context(), b.ID, nil, []Places{{AreaID: "FLOOR", Count: 1}}); err != nil {
		t.Fatal(err)
	}
	clean("after a partial cancellation")
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	clean("after the cancellation")
	if sold := v.areaSold("x7", "FLOOR"); sold != 0 {
		t.Fatalf("FLOOR sold %d after the cancellation", sold)
	}
}

// TestExchangeTakesTheHoldsOffer: an exchange's booking takes the offer of the hold it
// took when that hold has one, and keeps its own when it has none.
func TestExchangeTakesTheHoldsOffer(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("x8", "A1", "A2", "A3")
	hold := func(seat, offer string) Hold {
		h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "x8", SeatIDs: []string{seat}, TTL: time.Minute, HolderID: "alice", Offer: offer})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	b, err := v.e.Confirm(t.Context(), hold("A1", "early-bird"), ConfirmOptions{})
	if err != nil || b.Offer != "early-bird" {
		t.Fatalf("Confirm: %+v, %v", b, err)
	}
	after, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, nil, hold("A2", "upgrade-v2"), ConfirmOptions{})
	if err != nil || after.Offer != "upgrade-v2" {
		t.Fatalf("an exchange for a hold with an offer: %+v, %v; want the hold's offer", after, err)
	}
	after, err = v.e.Exchange(t.Context(), b.ID, nil, nil, hold("A3", ""), ConfirmOptions{})
	if err != nil || after.Offer != "upgrade-v2" || len(after.SeatIDs) != 2 {
		t.Fatalf("an exchange for a hold without one: %+v, %v; want the booking's kept", after, err)
	}
}

// TestExchangeRefusedPastTheAreaInDatabase: Redis forgets an area's sales and grants a
// hold of places the area no longer has; an exchange into it is refused by the
// database's capacity (ErrSeatsUnavailable) and changes nothing: the booking keeps
// what it had, and the hold is its holder's still.
func TestExchangeRefusedPastTheAreaInDatabase(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("x9", 4)
	b := v.bookPlaces("x9", "alice", 3, "A1")
	v.bookPlaces("x9", "bob", 1)
	if err := v.rdb.HSet(t.Context(), newKeys(v.cfg.KeyPrefix, "x9").base+"ar:FLOOR", "s", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h, err := v.holdPlaces("x9", time.Minute, "alice", 2, "A2")
	if err != nil {
		t.Fatalf("a hold Redis grants from a count it lost: %v", err)
	}
	db0 := v.swapSnapshot()
	if _, err := v.e.Exchange(t.Context(), b.ID, []string{"A1"}, []Places{{AreaID: "FLOOR", Count: 1}}, h, ConfirmOptions{}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("an exchange past the area's capacity: %v, want ErrSeatsUnavailable", err)
	}
	if db1 := v.swapSnapshot(); withoutRefusals(db1) != withoutRefusals(db0) {
		t.Fatalf("the refused exchange changed PostgreSQL:\n%s\nwas\n%s", db1, db0)
	}
	if got, err := v.e.Booking(t.Context(), b.ID); err != nil || !slices.Equal(got.SeatIDs, []string{"A1"}) || placesTotal(got.Places) != 3 {
		t.Fatalf("the booking after the refusal: %+v, %v", got, err)
	}
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatalf("the hold after the refusal: %v", err)
	}
}
