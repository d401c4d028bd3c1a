package engine

// Adversarial review of the waitlists (issue 41 item 5): each test reproduces a fault.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"
)

// TestWaitlistReclaimedOfferEndsTheEntry: an offer reclaimed on another device
// (Reclaim) and booked there ends its entry (ErrNotFound), well before its time is up:
// it is not an offer that expired (ErrOfferExpired).
func TestWaitlistReclaimedOfferEndsTheEntry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rr", 10)
	x := v.hold("rr", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("rr", "ann", "A", 2, 10*time.Minute)
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	v.offered("rr", "ann", "A")
	hs, err := v.e.Reclaim(t.Context(), "rr", "ann")
	if err != nil || len(hs) != 1 {
		t.Fatalf("ann reclaims: %v, %v", hs, err)
	}
	if _, err := v.e.Confirm(t.Context(), hs[0], ConfirmOptions{}); err != nil {
		t.Fatalf("ann confirms her reclaimed offer: %v", err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "rr", "ann", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ann booked her offer (reclaimed, 10 min TTL): WaitEntry = %v, want ErrNotFound", err)
	}
}

// TestWaitlistTransferredOfferEndsTheEntry: an offer handed to another holder
// (Transfer), who books it, ends its entry (ErrNotFound), not ErrOfferExpired.
func TestWaitlistTransferredOfferEndsTheEntry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rt", 10)
	x := v.hold("rt", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("rt", "bob", "A", 2, 10*time.Minute)
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	d, err := v.e.Transfer(t.Context(), v.offered("rt", "bob", "A"), "dan")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Confirm(t.Context(), d, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "rt", "bob", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's offer went to dan, who booked it: WaitEntry = %v, want ErrNotFound", err)
	}
}

// TestWaitlistTransferredPlacesOfferEndsTheEntry: an offer of places handed to another
// holder (Transfer renames its place key) ends its entry as a seat offer's transfer does,
// not ErrOfferExpired.
func TestWaitlistTransferredPlacesOfferEndsTheEntry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rp", 6)
	h, err := v.holdPlaces("rp", time.Minute, "xavier", 6)
	if err != nil {
		t.Fatal(err)
	}
	v.join("rp", "bob", "GA", 3, 10*time.Minute)
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Transfer(t.Context(), v.offered("rp", "bob", "GA"), "dan"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "rp", "bob", "GA"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob transferred his offer of places: WaitEntry = %v, want ErrNotFound", err)
	}
}

// TestWaitlistBestAvailableReapingOffersFirst: 2000 expired holds of a waitlisted
// category that a best-available hold gives back over more than one call (best.lua
// answers AGAIN past REAP_MAX) go to the waitlist first: ann (count 1) is offered the
// best seat, not eve, who has no entry. The show is taken off the waitlist loop's set so
// that no sweep makes the offer instead.
func TestWaitlistBestAvailableReapingOffersFirst(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold, c.MaxSeatsPerHolder = 1000, 1000 })
	var seats []Seat
	var ids []string
	for r := range 20 {
		for p := range 100 {
			id := fmt.Sprintf("A%02d-%03d", r, p)
			ids = append(ids, id)
			seats = append(seats, Seat{ID: id, Section: "A", Row: fmt.Sprint(r), Position: p + 1, Rank: r*100 + p + 1, Category: "A"})
		}
	}
	if err := v.e.CreateShowVenue(t.Context(), "ra", Venue{Seats: seats}); err != nil {
		t.Fatal(err)
	}
	h1 := v.hold("ra", 2*time.Second, "xavier", ids[:1000]...)
	v.hold("ra", 2*time.Second, "yves", ids[1000:]...)
	v.join("ra", "ann", "A", 1, time.Minute)
	// Before the sweep: the loop does not see the show.
	if err := v.rdb.SRem(t.Context(), v.e.waitlistsKey(), "ra").Err(); err != nil {
		t.Fatal(err)
	}
	v.waitExpired(h1)
	time.Sleep(50 * time.Millisecond)
	eve, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "ra", Category: "A", Count: 1, HolderID: "eve"})
	if err != nil {
		t.Fatalf("eve: %v", err)
	}
	w, err := v.e.WaitEntry(t.Context(), "ra", "ann", "A")
	if err != nil {
		t.Fatal(err)
	}
	if w.Offer == nil || slices.Contains(eve.SeatIDs, ids[0]) {
		t.Fatalf("expired seats went back to a waitlisted category; eve (no entry) got %v, ann (first in line, count 1) has offer %v, want ann offered first (the best seat %s)", eve.SeatIDs, w.Offer, ids[0])
	}
}

// TestWaitlistPassesOverEntriesThatCannotHoldNow: 16 entries whose holders are at their
// cap stand ahead of ann for count 1; a seat that comes free is offered to ann, not
// taken by a buyer with no entry.
func TestWaitlistPassesOverEntriesThatCannotHoldNow(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHolder = 1 })
	var seats []Seat
	for i := range 4 {
		seats = append(seats, Seat{ID: fmt.Sprintf("A%d", i+1), Section: "A", Row: "1", Position: i + 1, Rank: i + 1, Category: "A"})
	}
	for i := range 16 {
		seats = append(seats, Seat{ID: fmt.Sprintf("B%02d", i), Section: "B", Row: "1", Position: i + 1, Rank: 100 + i})
	}
	if err := v.e.CreateShowVenue(t.Context(), "rs", Venue{Seats: seats}); err != nil {
		t.Fatal(err)
	}
	x := v.hold("rs", time.Minute, "xavier", "A1")
	for i := range 16 { // each at their cap of 1, and on the waitlist for 1
		v.hold("rs", time.Minute, fmt.Sprintf("h%02d", i), fmt.Sprintf("B%02d", i))
		v.join("rs", fmt.Sprintf("h%02d", i), "A", 1, time.Minute)
	}
	for _, s := range []string{"A2", "A3", "A4"} {
		v.hold("rs", time.Minute, "own"+s, s)
	}
	if w := v.join("rs", "ann", "A", 1, time.Minute); w.Position != 17 {
		t.Fatalf("ann: %+v", w)
	}
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // five sweeps
	w, err := v.e.WaitEntry(t.Context(), "rs", "ann", "A")
	if err != nil {
		t.Fatal(err)
	}
	_, herr := v.e.Hold(t.Context(), HoldRequest{ShowID: "rs", SeatIDs: []string{"A1"}, HolderID: "dan"})
	if w.Offer == nil || herr == nil {
		t.Fatalf("A1 came free; ann (count 1, may hold it) has offer %v after 1 s of sweeps; dan (no entry) holds A1: err %v", w.Offer, herr)
	}
}

// TestWaitlistRefusesEntriesThatCanNeverBeServed: a holder who has booked up to the
// sale's holder limit cannot join for more (ErrHolderLimit), nor anyone for more than
// the category has (ErrInvalidArgument): such an entry could never be offered and would
// keep the show swept for ever. Neither changes anything.
func TestWaitlistRefusesEntriesThatCanNeverBeServed(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rl", 10)
	v.setRules("rl", SaleRules{HolderLimit: 2})
	h := v.hold("rl", time.Minute, "ann", "B1", "B2")
	if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	before := v.redisSnapshot()
	if _, err := v.e.JoinWaitlist(t.Context(), WaitRequest{ShowID: "rl", HolderID: "ann", Category: "A", Count: 1}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("ann, who booked her limit of 2, joins A's waitlist for 1: %v, want ErrHolderLimit", err)
	}
	if _, err := v.e.JoinWaitlist(t.Context(), WaitRequest{ShowID: "rl", HolderID: "bob", Category: "A", Count: 5}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bob joins A's waitlist (4 seats) for 5: %v, want ErrInvalidArgument", err)
	}
	if after := v.redisSnapshot(); after != before {
		t.Fatalf("refused joins changed Redis:\nbefore %s\nafter  %s", before, after)
	}
}

// TestWaitlistSweptShowsLeaveTheSet: a show whose waitlists are over (here: deleted)
// leaves the set of shows the waitlist loops poll.
func TestWaitlistSweptShowsLeaveTheSet(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rd", 10)
	v.join("rd", "ann", "A", 1, time.Minute) // offered at once: A1 is free
	o := v.offered("rd", "ann", "A")
	if err := v.e.Release(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "rd", "ann", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := v.e.DeleteShow(t.Context(), "rd"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, err := v.rdb.SIsMember(context.Background(), v.e.waitlistsKey(), "rd").Result()
		if err == nil && !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("show rd, deleted, with no waitlist entry, is still in %s after 10 s of sweeps", v.e.waitlistsKey())
		}
	}
}

// TestWaitlistShrinkOfPlacesOffersThem: the places a Shrink gives back of a waitlisted
// area are offered in the shrink's own script: ann, waiting for 3, has her offer, and
// the map never shows them free. The show is taken off the loop's set so that no sweep
// makes the offer instead.
func TestWaitlistShrinkOfPlacesOffersThem(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rk", 6)
	h, err := v.holdPlaces("rk", time.Minute, "xavier", 6)
	if err != nil {
		t.Fatal(err)
	}
	v.join("rk", "ann", "GA", 3, time.Minute)
	if err := v.rdb.SRem(t.Context(), v.e.waitlistsKey(), "rk").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Shrink(t.Context(), h, nil, []Places{{AreaID: "FLOOR", Count: 3}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	w, err := v.e.WaitEntry(t.Context(), "rk", "ann", "GA")
	if err != nil {
		t.Fatal(err)
	}
	m, err := v.e.SeatMap(t.Context(), "rk")
	if err != nil {
		t.Fatal(err)
	}
	free := -1
	for _, a := range m.Areas {
		if a.AreaID == "FLOOR" {
			free = a.Free
		}
	}
	if w.Offer == nil || free != 0 {
		t.Fatalf("xavier's shrink freed 3 places of FLOOR: ann (waiting for 3) has offer %v 500 ms later; the map shows FLOOR with %d free", w.Offer, free)
	}
}

// TestWaitlistShrunkOfferExpires: ann's offer of 4, shrunk to 3 (the 4th goes to bob,
// next in line) and not confirmed in time, reads ErrOfferExpired — as the Confirm of her
// hold does — though a seat of it is held under bob's token.
func TestWaitlistShrunkOfferExpires(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("re", 10)
	x := v.hold("re", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("re", "ann", "A", 4, 2*time.Second)
	v.join("re", "bob", "A", 1, time.Minute)
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	a, err := v.e.Shrink(t.Context(), v.offered("re", "ann", "A"), []string{"A1", "A2", "A3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := v.offered("re", "bob", "A"); !slices.Equal(o.SeatIDs, []string{"A4"}) {
		t.Fatalf("bob: %v", o.SeatIDs)
	}
	v.waitExpired(a)
	time.Sleep(500 * time.Millisecond) // sweeps
	_, cerr := v.e.Confirm(t.Context(), a, ConfirmOptions{})
	_, werr := v.e.WaitEntry(t.Context(), "re", "ann", "A")
	if !errors.Is(werr, ErrOfferExpired) {
		t.Fatalf("ann's shrunk offer expired unconfirmed: Confirm = %v; WaitEntry = %v, want ErrOfferExpired", cerr, werr)
	}
}

// TestWaitlistPartlyBookedPlacesOfferEndsTheEntry: ann books 2 of the 3 places she was
// offered: her entry ends (ErrNotFound), not ErrOfferExpired.
func TestWaitlistPartlyBookedPlacesOfferEndsTheEntry(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rq", 6)
	h, err := v.holdPlaces("rq", time.Minute, "xavier", 6)
	if err != nil {
		t.Fatal(err)
	}
	v.join("rq", "ann", "GA", 3, 10*time.Minute)
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), v.offered("rq", "ann", "GA"), ConfirmOptions{Places: []Places{{AreaID: "FLOOR", Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "rq", "ann", "GA"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ann booked 2 of her 3 offered places (%v): WaitEntry = %v, want ErrNotFound", b.Places, err)
	}
}

// TestWaitlistJoinTakesTheWaitingRoom: with a waiting room (not even open yet), a holder
// not admitted cannot join a waitlist (ErrNotAdmitted) any more than hold: a join of a
// category with free seats would be a hold of them. Nothing changes.
func TestWaitlistJoinTakesTheWaitingRoom(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rw", 10)
	v.setRules("rw", SaleRules{Queue: &WaitingRoom{OpensAt: time.Now().Add(time.Hour)}})
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "rw", SeatIDs: []string{"A1"}, HolderID: "bot"}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("bot holds before the opening: %v, want ErrNotAdmitted", err)
	}
	// The room's ticker writes its state (its counts, its pacing) at its first round,
	// and stamps each round (q:st's at): wait for the first, and leave the stamps out,
	// so that what the snapshots compare is the join's.
	k := newKeys(v.cfg.KeyPrefix, "rw")
	waitFor(t, "the waiting room's ticker's first state", 10*time.Second, func() bool {
		return v.rdb.Exists(t.Context(), k.base+"q:st", k.base+"nsold").Val() == 2
	})
	stamp := regexp.MustCompile(`(q:st=map\[at):\d+`)
	snapshot := func() string { return stamp.ReplaceAllString(v.redisSnapshot(), "$1:_") }
	before := snapshot()
	if w, err := v.e.JoinWaitlist(t.Context(), WaitRequest{ShowID: "rw", HolderID: "bot", Category: "A", Count: 4}); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("bot, never admitted, joins A's waitlist an hour before the opening: %+v, %v; want ErrNotAdmitted", w, err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("a refused join changed Redis:\nbefore %s\nafter  %s", before, after)
	}
}

// TestWaitlistOffersABoundedNumberPerScript: a cancellation that frees 1,000 seats of a
// category spread over 100 sections, with 1,000 holders waiting for one each, makes 32
// offers in its own script (one script never blocks Redis for long), and the waitlist
// loop's sweeps make the rest: every entry is offered a seat.
func TestWaitlistOffersABoundedNumberPerScript(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold, c.MaxSeatsPerHolder = 1000, 1000 })
	var seats []Seat
	var ids []string
	for s := range 100 {
		for p := range 10 {
			id := fmt.Sprintf("S%03d-%02d", s, p)
			ids = append(ids, id)
			seats = append(seats, Seat{ID: id, Section: fmt.Sprintf("Block%03d", s), Row: "1", Position: p + 1, Rank: s*10 + p + 1, Category: "A"})
		}
	}
	if err := v.e.CreateShowVenue(t.Context(), "rb", Venue{Seats: seats}); err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), v.hold("rb", time.Minute, "xavier", ids...), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		v.join("rb", fmt.Sprintf("w%04d", i), "A", 1, time.Minute)
	}
	offers := func() int64 { return v.rdb.ZCard(t.Context(), newKeys(v.cfg.KeyPrefix, "rb").base+"wl:ox").Val() }
	if err := v.rdb.SRem(t.Context(), v.e.waitlistsKey(), "rb").Err(); err != nil { // no sweep meanwhile
		t.Fatal(err)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if n := offers(); n != 32 {
		t.Fatalf("the cancellation's own scripts made %d offers, want 32 (its bound)", n)
	}
	v.e.waitlisted(t.Context(), "rb")
	for deadline := time.Now().Add(20 * time.Second); offers() < 1000; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 1000 entries offered a seat after 20 s of sweeps", offers())
		}
	}
}

// TestWaitlistEntryShowsTheHoldAsItIs: WaitEntry's Offer is the offer's hold as it is
// now: after ann shrinks it to A1..A3 (A4 goes to bob) and extends it, it lists A1..A3
// with the new expiry, and it confirms.
func TestWaitlistEntryShowsTheHoldAsItIs(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("rv", 10)
	x := v.hold("rv", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("rv", "ann", "A", 4, time.Minute)
	v.join("rv", "bob", "A", 1, time.Minute)
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	a, err := v.e.Shrink(t.Context(), v.offered("rv", "ann", "A"), []string{"A1", "A2", "A3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err = v.e.Extend(t.Context(), a, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w, err := v.e.WaitEntry(t.Context(), "rv", "ann", "A")
	if err != nil || w.Offer == nil {
		t.Fatalf("%+v, %v", w, err)
	}
	_, cerr := v.e.Confirm(t.Context(), *w.Offer, ConfirmOptions{})
	if !slices.Equal(w.Offer.SeatIDs, a.SeatIDs) || !w.Offer.ExpiresAt.Equal(a.ExpiresAt) || cerr != nil {
		t.Fatalf("ann's hold is %v until %v; WaitEntry's Offer says %v until %v, and confirming it: %v",
			a.SeatIDs, a.ExpiresAt.Format(time.StampMilli), w.Offer.SeatIDs, w.Offer.ExpiresAt.Format(time.StampMilli), cerr)
	}
}
