package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitVenue creates show id: seats A1..A4 of category "A" (A1 best), seats B1, B2 of
// no category, and the area FLOOR of category "GA" with capacity places.
func (v *env) waitVenue(id string, capacity int) {
	v.t.Helper()
	var seats []Seat
	for i, s := range []string{"A1", "A2", "A3", "A4"} {
		seats = append(seats, Seat{ID: s, Section: "A", Row: "1", Position: i + 1, Rank: i + 1, Category: "A"})
	}
	for i, s := range []string{"B1", "B2"} {
		seats = append(seats, Seat{ID: s, Section: "B", Row: "1", Position: i + 1, Rank: 10 + i})
	}
	err := v.e.CreateShowVenue(v.t.Context(), id, Venue{Seats: seats, Areas: []Area{{ID: "FLOOR", Capacity: capacity, Category: "GA"}}})
	if err != nil {
		v.t.Fatal(err)
	}
}

// join puts holder on show's waitlist for category and count, offers living ttl.
func (v *env) join(show, holder, category string, count int, ttl time.Duration) WaitEntry {
	v.t.Helper()
	w, err := v.e.JoinWaitlist(v.t.Context(), WaitRequest{ShowID: show, HolderID: holder, Category: category, Count: count, OfferTTL: ttl})
	if err != nil {
		v.t.Fatalf("%s joins %s's waitlist for %d of %q: %v", holder, show, count, category, err)
	}
	return w
}

// offered waits until holder's entry has its offer, and returns it.
func (v *env) offered(show, holder, category string) Hold {
	v.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, err := v.e.WaitEntry(v.t.Context(), show, holder, category)
		if err != nil {
			v.t.Fatalf("%s's entry for %q: %v", holder, category, err)
		}
		if w.Offer != nil {
			return *w.Offer
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("%s's entry for %q has no offer after 10 s: %+v", holder, category, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// offerTTL is the offers' life in the tests that read maps until the offers are made
// and then wait for them to expire: long enough that a look at the map on a busy
// machine is not after the offer has already expired (and its seats are free again).
const offerTTL = 2 * time.Second

// offerMade reports whether holder's entry for category has been offered its seats:
// the offer is there, or it was made and has expired already (a short offer on a busy
// machine can expire between two looks).
func (v *env) offerMade(show, holder, category string) bool {
	w, err := v.e.WaitEntry(v.t.Context(), show, holder, category)
	return errors.Is(err, ErrOfferExpired) || (err == nil && w.Offer != nil)
}

// offerGone waits until holder's offer for category has expired, and fails the test
// past 10 s.
func (v *env) offerGone(show, holder, category string) {
	v.t.Helper()
	waitFor(v.t, fmt.Sprintf("%s's offer for %q expired", holder, category), 10*time.Second, func() bool {
		_, err := v.e.WaitEntry(v.t.Context(), show, holder, category)
		return errors.Is(err, ErrOfferExpired)
	})
}

// TestWaitlistOffersWhatARelease frees: a sold-out category's waitlist is offered the
// seats a release gives back, in the order of joining, each entry as many as it asked
// for; an entry whose count does not fit is passed over for one behind it that fits;
// the offer is a hold of the holder's that confirms as any, and the entry then ends.
func TestWaitlistOffersWhatAReleaseFrees(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wl", 10)
	all := v.hold("wl", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	ann := v.join("wl", "ann", "A", 2, time.Minute)
	bob := v.join("wl", "bob", "A", 3, time.Minute)
	cat := v.join("wl", "cat", "A", 1, time.Minute)
	if ann.Position != 1 || bob.Position != 2 || cat.Position != 3 || ann.Offer != nil {
		t.Fatalf("positions %d, %d, %d (offer %v); want 1, 2, 3 and none", ann.Position, bob.Position, cat.Position, ann.Offer)
	}
	if again := v.join("wl", "ann", "A", 2, time.Minute); again.Position != 1 {
		t.Fatalf("ann joins again: position %d, want her entry as it was (1)", again.Position)
	}
	if err := v.e.Release(t.Context(), all); err != nil {
		t.Fatal(err)
	}
	// 4 free: ann (2) first, then bob (3) does not fit the 2 left, cat (1) does.
	a := v.offered("wl", "ann", "A")
	c := v.offered("wl", "cat", "A")
	if !slices.Equal(a.SeatIDs, []string{"A1", "A2"}) || !slices.Equal(c.SeatIDs, []string{"A3"}) {
		t.Fatalf("offers: ann %v, cat %v; want the best seats in order of joining: [A1 A2], [A3]", a.SeatIDs, c.SeatIDs)
	}
	if w, err := v.e.WaitEntry(t.Context(), "wl", "bob", "A"); err != nil || w.Offer != nil || w.Position != 1 {
		t.Fatalf("bob: %+v, %v; want still waiting, first in line", w, err)
	}
	// What is offered is not anyone else's to take.
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "wl", SeatIDs: []string{"A1"}, HolderID: "dan"}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("dan holds A1, offered to ann: %v, want ErrSeatsUnavailable", err)
	}
	b, err := v.e.Confirm(t.Context(), a, ConfirmOptions{})
	if err != nil {
		t.Fatalf("ann confirms her offer: %v", err)
	}
	if b.HolderID != "ann" || !slices.Equal(b.SeatIDs, []string{"A1", "A2"}) {
		t.Fatalf("ann's booking: %+v", b)
	}
	if _, err := v.e.WaitEntry(t.Context(), "wl", "ann", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ann's entry after her booking: %v, want ErrNotFound (it ended)", err)
	}
	// A4 is free (no one fits it but cat, who has an offer): anyone may hold it.
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "wl", SeatIDs: []string{"A4"}, HolderID: "dan"}); err != nil {
		t.Fatalf("dan holds A4, which no entry fits: %v", err)
	}
}

// TestWaitlistOfferExpiresToTheNext: an offer not confirmed in time goes to the next
// entry that fits — the expiry's seats are offered by the engine's sweep, with no call
// on the show — and its hold's confirmation is ErrOfferExpired (an ErrHoldLost too),
// as its entry is.
func TestWaitlistOfferExpiresToTheNext(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wx", 10)
	all := v.hold("wx", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("wx", "ann", "A", 4, time.Second)
	v.join("wx", "bob", "A", 4, time.Minute)
	if err := v.e.Release(t.Context(), all); err != nil {
		t.Fatal(err)
	}
	a := v.offered("wx", "ann", "A")
	b := v.offered("wx", "bob", "A") // after ann's expired, by the sweep
	if !slices.Equal(b.SeatIDs, []string{"A1", "A2", "A3", "A4"}) || b.Generation <= a.Generation {
		t.Fatalf("bob's offer %+v after ann's %+v", b, a)
	}
	_, err := v.e.Confirm(t.Context(), a, ConfirmOptions{})
	if !errors.Is(err, ErrOfferExpired) || !errors.Is(err, ErrHoldLost) {
		t.Fatalf("ann confirms her expired offer: %v, want ErrOfferExpired and ErrHoldLost", err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "wx", "ann", "A"); !errors.Is(err, ErrOfferExpired) {
		t.Fatalf("ann's entry: %v, want ErrOfferExpired", err)
	}
	if _, err := v.e.Confirm(t.Context(), b, ConfirmOptions{}); err != nil {
		t.Fatalf("bob confirms: %v", err)
	}
}

// TestWaitlistOffersPlaces: a category of a standing area is offered places of it when a
// hold of them is released, and the offer's places confirm.
func TestWaitlistOffersPlaces(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wp", 6)
	h, err := v.holdPlaces("wp", time.Minute, "xavier", 6)
	if err != nil {
		t.Fatal(err)
	}
	v.join("wp", "ann", "GA", 3, time.Minute)
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	o := v.offered("wp", "ann", "GA")
	if len(o.SeatIDs) != 0 || !slices.Equal(o.Places, []Places{{AreaID: "FLOOR", Count: 3}}) {
		t.Fatalf("ann's offer: %+v, want 3 places of FLOOR", o)
	}
	b, err := v.e.Confirm(t.Context(), o, ConfirmOptions{})
	if err != nil || !slices.Equal(b.Places, []Places{{AreaID: "FLOOR", Count: 3}}) {
		t.Fatalf("ann confirms: %+v, %v", b, err)
	}
}

// TestWaitlistUnderContention: 30 holders wait for one seat each of a category whose 40
// seats are all held; the holds end every way a hold ends — released, expired, booked
// and cancelled — while 8 goroutines snatch seats of the category by name and by best
// available. Each waiting holder confirms their offer the moment they see it. Every
// offer confirms (no offered seat went to anyone else, and none to two holders), every
// entry is offered a seat, the offers go in the order of joining, and no seat is booked
// twice.
func TestWaitlistUnderContention(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 8 })
	var seats []Seat
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("A%02d", i+1)
		seats = append(seats, Seat{ID: ids[i], Section: "A", Row: "1", Position: i + 1, Rank: i + 1, Category: "A"})
	}
	if err := v.e.CreateShowVenue(t.Context(), "wc", Venue{Seats: seats}); err != nil {
		t.Fatal(err)
	}
	holds := make([]Hold, 10)
	for i := range holds {
		ttl := time.Minute
		if i%4 == 1 {
			ttl = time.Duration(300+100*i) * time.Millisecond // these expire
		}
		holds[i] = v.hold("wc", ttl, fmt.Sprintf("owner%d", i), ids[4*i:4*i+4]...)
	}
	waiters := make([]string, 30)
	for i := range waiters {
		waiters[i] = fmt.Sprintf("w%02d", i)
		if w := v.join("wc", waiters[i], "A", 1, time.Minute); w.Position != int64(i+1) {
			t.Fatalf("%s joins at %d, want %d", waiters[i], w.Position, i+1)
		}
	}
	stop := make(chan struct{})
	var snipers sync.WaitGroup
	for g := range 8 {
		snipers.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				var h Hold
				var err error
				if k%2 == 0 {
					h, err = v.e.Hold(t.Context(), HoldRequest{ShowID: "wc", SeatIDs: []string{ids[(g*7+k)%40]}, HolderID: fmt.Sprintf("sniper%d", g), TTL: 50 * time.Millisecond})
				} else {
					h, err = v.e.HoldBest(t.Context(), BestRequest{ShowID: "wc", Category: "A", Count: 1, HolderID: fmt.Sprintf("sniper%d", g), TTL: 50 * time.Millisecond})
				}
				if err == nil && k%3 == 0 {
					_ = v.e.Release(t.Context(), h)
				}
			}
		})
	}
	type got struct {
		offer Hold
		err   error
	}
	results := make([]got, len(waiters))
	var wg sync.WaitGroup
	for i, w := range waiters {
		wg.Go(func() {
			o := v.offered("wc", w, "A")
			_, err := v.e.Confirm(t.Context(), o, ConfirmOptions{})
			results[i] = got{o, err}
		})
	}
	for i, h := range holds {
		switch i % 4 {
		case 0:
			if err := v.e.Release(t.Context(), h); err != nil {
				t.Error(err)
			}
		case 2, 3:
			b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := v.e.Cancel(t.Context(), b.ID); err != nil {
				t.Error(err)
			}
		}
	}
	wg.Wait()
	close(stop)
	snipers.Wait()
	for i, r := range results {
		if r.err != nil {
			t.Errorf("%s's offer %v: %v", waiters[i], r.offer.SeatIDs, r.err)
		}
		if i > 0 && r.offer.Generation <= results[i-1].offer.Generation {
			t.Errorf("%s (joined %d) was offered at generation %d, not after %s's %d", waiters[i], i+1, r.offer.Generation, waiters[i-1], results[i-1].offer.Generation)
		}
	}
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d seats booked twice", n)
	}
}

// TestWaitlistOfferNeverShowsFree: a seat a release or a cancellation frees and the
// waitlist is offered at once never shows free on the seat map: a watcher sees it go
// from the old hold (or sold) straight to the offer's hold.
func TestWaitlistOfferNeverShowsFree(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wm", 10)
	events, err := v.e.WatchSeatMap(t.Context(), "wm", 0)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-events; first.Snapshot == nil { // the map before any hold
		t.Fatalf("first event %+v, want a snapshot", first)
	}
	var mu sync.Mutex
	var log []SeatChange // every change of an A seat, in order
	go func() {
		for ev := range events {
			changes := ev.Changes
			if m := ev.Snapshot; m != nil { // the watcher fell behind: the map as it is
				changes = nil
				for i, st := range m.States {
					changes = append(changes, SeatChange{SeatID: m.Layout[i].ID, Status: st, ExpiresAt: m.Expires[i]})
				}
			}
			mu.Lock()
			for _, c := range changes {
				if strings.HasPrefix(c.SeatID, "A") {
					log = append(log, c)
				}
			}
			mu.Unlock()
		}
	}()
	h := v.hold("wm", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("wm", "ann", "A", 4, 10*time.Minute)
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	b, err := v.e.Confirm(t.Context(), v.offered("wm", "ann", "A"), ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v.join("wm", "bob", "A", 4, 10*time.Minute)
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	bob := v.offered("wm", "bob", "A")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		seen := slices.ContainsFunc(log, func(c SeatChange) bool { return c.SeatID == "A4" && c.ExpiresAt.Equal(bob.ExpiresAt) })
		var states []string
		for _, c := range log {
			states = append(states, c.SeatID+":"+string(c.Status))
		}
		mu.Unlock()
		if seen {
			if slices.ContainsFunc(states, func(s string) bool { return strings.HasSuffix(s, ":"+string(SeatFree)) }) {
				t.Fatalf("an offered seat showed free: %s", strings.Join(states, " "))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the map did not show bob's offer: %s", strings.Join(states, " "))
		}
	}
}

// TestWaitlistOfNoCategory: the seats and areas without a category have a waitlist of
// their own, named "".
func TestWaitlistOfNoCategory(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wn", 10)
	h := v.hold("wn", time.Minute, "xavier", "B1", "B2")
	if w := v.join("wn", "ann", "", 2, time.Minute); w.Position != 1 {
		t.Fatalf("ann's entry: %+v", w)
	}
	if err := v.e.Release(t.Context(), h); err != nil {
		t.Fatal(err)
	}
	if o := v.offered("wn", "ann", ""); !slices.Equal(o.SeatIDs, []string{"B1", "B2"}) {
		t.Fatalf("ann's offer: %v, want B1 and B2", o.SeatIDs)
	}
}

// TestWaitlistRefusals: each malformed or impossible join is refused with its typed
// error, and changes nothing in Redis; WaitEntry of no entry is ErrNotFound.
func TestWaitlistRefusals(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold, c.MaxSeatsPerHolder = 6, 4 })
	v.waitVenue("wr", 10)
	v.setRules("wr", SaleRules{HolderLimit: 3})
	v.join("wr", "ann", "A", 1, time.Minute) // the index and the waitlist's keys exist
	before := v.redisSnapshot()
	ok := WaitRequest{ShowID: "wr", HolderID: "bob", Category: "A", Count: 1, OfferTTL: time.Minute}
	for _, c := range []struct {
		name string
		r    func(*WaitRequest)
		want error
	}{
		{"no show", func(r *WaitRequest) { r.ShowID = "" }, ErrInvalidArgument},
		{"unknown show", func(r *WaitRequest) { r.ShowID = "nope" }, ErrNotFound},
		{"no holder", func(r *WaitRequest) { r.HolderID = "" }, ErrInvalidArgument},
		{"malformed category", func(r *WaitRequest) { r.Category = "-A" }, ErrInvalidArgument},
		{"unknown category", func(r *WaitRequest) { r.Category = "Z" }, ErrNotFound},
		{"count 0", func(r *WaitRequest) { r.Count = 0 }, ErrInvalidArgument},
		{"count past MaxSeatsPerHold", func(r *WaitRequest) { r.Count = 7 }, ErrInvalidArgument},
		{"count past MaxSeatsPerHolder", func(r *WaitRequest) { r.Count = 5 }, ErrInvalidArgument},
		{"count past the holder limit", func(r *WaitRequest) { r.Count = 4 }, ErrInvalidArgument},
		{"negative TTL", func(r *WaitRequest) { r.OfferTTL = -time.Second }, ErrInvalidArgument},
		{"TTL past MaxHoldTTL", func(r *WaitRequest) { r.OfferTTL = 24 * time.Hour }, ErrInvalidArgument},
	} {
		r := ok
		c.r(&r)
		if _, err := v.e.JoinWaitlist(t.Context(), r); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if after := v.redisSnapshot(); after != before {
		t.Fatalf("refused joins changed Redis:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := v.e.WaitEntry(t.Context(), "wr", "bob", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's entry: %v, want ErrNotFound", err)
	}
}

// TestWaitlistOffersWithinTheHolderLimit: an entry whose holder could not hold its count
// more now (the sale's holder limit, seats held and booked) is passed over, keeping its
// place, and is offered once they could; the offer counts against the limit as a hold.
func TestWaitlistOffersWithinTheHolderLimit(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wh", 10)
	x := v.hold("wh", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	annB := v.hold("wh", time.Minute, "ann", "B1", "B2")
	v.setRules("wh", SaleRules{HolderLimit: 2}) // ann is at her limit
	v.join("wh", "ann", "A", 2, time.Minute)
	v.join("wh", "bob", "A", 2, time.Minute)
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	if o := v.offered("wh", "bob", "A"); !slices.Equal(o.SeatIDs, []string{"A1", "A2"}) {
		t.Fatalf("bob's offer %v, want A1 A2 (ann, first, is at her limit)", o.SeatIDs)
	}
	if w, err := v.e.WaitEntry(t.Context(), "wh", "ann", "A"); err != nil || w.Offer != nil || w.Position != 1 {
		t.Fatalf("ann: %+v, %v; want waiting, first in line", w, err)
	}
	if err := v.e.Release(t.Context(), annB); err != nil {
		t.Fatal(err)
	}
	// A3 and A4 are free and ann may hold 2 now: the next script that frees or the sweep
	// offers them.
	if o := v.offered("wh", "ann", "A"); !slices.Equal(o.SeatIDs, []string{"A3", "A4"}) {
		t.Fatalf("ann's offer %v, want A3 A4", o.SeatIDs)
	}
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "wh", SeatIDs: []string{"B1"}, HolderID: "ann"}); !errors.Is(err, ErrHolderLimit) {
		t.Fatalf("ann holds one more beside her offer: %v, want ErrHolderLimit", err)
	}
}

// TestWaitlistOfferMoves: an offer's hold shrunk keeps the entry offered and frees the
// rest to the next entry; one transferred to another holder ends the entry (the hold
// lives on as the other holder's); one confirmed in part ends it, and what the
// confirmation did not take goes to the next entry.
func TestWaitlistOfferMoves(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wo", 10)
	x := v.hold("wo", time.Minute, "xavier", "A1", "A2", "A3", "A4")
	v.join("wo", "ann", "A", 4, time.Minute)
	v.join("wo", "bob", "A", 1, time.Minute)
	v.join("wo", "cat", "A", 1, time.Minute)
	if err := v.e.Release(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	a := v.offered("wo", "ann", "A")
	a, err := v.e.Shrink(t.Context(), a, []string{"A1", "A2", "A3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := v.e.WaitEntry(t.Context(), "wo", "ann", "A"); err != nil || w.Offer == nil {
		t.Fatalf("ann's entry after her shrink: %+v, %v; want still offered", w, err)
	}
	if o := v.offered("wo", "bob", "A"); !slices.Equal(o.SeatIDs, []string{"A4"}) {
		t.Fatalf("bob's offer %v, want A4, which ann's shrink gave back", o.SeatIDs)
	}
	if _, err := v.e.Confirm(t.Context(), a, ConfirmOptions{SeatIDs: []string{"A1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "wo", "ann", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ann's entry after her booking: %v, want ErrNotFound", err)
	}
	if o := v.offered("wo", "cat", "A"); !slices.Equal(o.SeatIDs, []string{"A2"}) {
		t.Fatalf("cat's offer %v, want A2, which ann's partial booking gave back", o.SeatIDs)
	}
	b := v.offered("wo", "bob", "A")
	if _, err := v.e.Transfer(t.Context(), b, "dan"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.WaitEntry(t.Context(), "wo", "bob", "A"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob's entry after he transferred his offer: %v, want ErrNotFound", err)
	}
}

// TestWaitlistExpiredSeatGoesToTheWaitlistFirst: a seat whose hold expired, of a
// category with a waitlist, is never granted to another buyer before the waitlist is
// offered it: a hold that asks for it by name finds it offered, and so does a
// best-available hold.
func TestWaitlistExpiredSeatGoesToTheWaitlistFirst(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wf", 10)
	h := v.hold("wf", time.Second, "xavier", "A1", "A2", "A3", "A4") // outlives ann's join on a loaded machine
	v.join("wf", "ann", "A", 4, time.Minute)
	for {
		// Each try may find the seats before their expiry (taken: xavier's), or after
		// it (taken: ann's offer): never free.
		if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "wf", SeatIDs: []string{"A1"}, HolderID: "dan"}); !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("dan holds A1 around its expiry: %v, want ErrSeatsUnavailable", err)
		}
		if _, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "wf", Category: "A", Count: 1, HolderID: "eve"}); !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("eve holds the best seat of A around the expiry: %v, want ErrSeatsUnavailable", err)
		}
		w, err := v.e.WaitEntry(t.Context(), "wf", "ann", "A")
		if err != nil {
			t.Fatal(err)
		}
		if w.Offer != nil {
			if w.Offer.Generation <= h.Generation || len(w.Offer.SeatIDs) != 4 {
				t.Fatalf("ann's offer %+v", w.Offer)
			}
			return
		}
	}
}

// TestWaitlistExpiryNeverShowsFree: seats and places that an expiry frees, of a
// category with a waitlist, are offered before any map shows them free — though no
// script runs at an expiry, and the waitlist loop finds it up to a sweep later. Reads
// of the seat map every millisecond, from the holds' expiry until the offers, never see
// an A seat free nor a FLOOR place free. Once the waitlist has no entry, the map
// applies expiries as they come again (the horizon ends).
func TestWaitlistExpiryNeverShowsFree(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.waitVenue("wx", 6)
	for round := range 3 {
		ttl := 300 * time.Millisecond
		x := v.hold("wx", ttl, "xavier", "A1", "A2", "A3", "A4")
		if _, err := v.holdPlaces("wx", ttl, "yvonne", 6); err != nil {
			t.Fatal(err)
		}
		ann, bob := fmt.Sprint("ann", round), fmt.Sprint("bob", round)
		v.join("wx", ann, "A", 4, offerTTL)
		v.join("wx", bob, "GA", 6, offerTTL)
		if _, err := v.e.SeatMap(t.Context(), "wx"); err != nil { // the view follows the feed from here
			t.Fatal(err)
		}
		var shown []string
		for deadline := x.ExpiresAt.Add(5 * time.Second); !v.offerMade("wx", ann, "A") || !v.offerMade("wx", bob, "GA"); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no offers 5 s after the holds expired", round)
			}
			m, err := v.e.SeatMap(t.Context(), "wx")
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range m.States {
				if m.Layout[i].Category == "A" && st == SeatFree {
					shown = append(shown, fmt.Sprintf("%s free at v%d", m.Layout[i].ID, m.Version))
				}
			}
			for _, a := range m.Areas {
				if a.Free != 0 {
					shown = append(shown, fmt.Sprintf("%s %d free at v%d", a.AreaID, a.Free, m.Version))
				}
			}
		}
		if len(shown) > 0 {
			t.Fatalf("round %d: an expiry's seats shown free before the waitlist's offer: %v", round, shown[:min(len(shown), 8)])
		}
		v.offerGone("wx", ann, "A") // the offer's entry ends with it
		v.offerGone("wx", bob, "GA")
	}
	// No entry is left once the offers expired: a sweep ends the horizon, and an expiry
	// shows as it comes.
	k := newKeys(v.cfg.KeyPrefix, "wx")
	waitFor(t, "the horizon's end", 10*time.Second, func() bool {
		return v.rdb.Exists(t.Context(), k.horizon()).Val() == 0
	})
	// The map applies the next expiry with no horizon.
	v.hold("wx", 200*time.Millisecond, "zoe", "A1")
	waitFor(t, "A1 free after zoe's hold expired", 5*time.Second, func() bool {
		m, err := v.e.SeatMap(t.Context(), "wx")
		return err == nil && m.States[0] == SeatFree
	})
}

// TestCallStateStaysInItsCall: the scripts' function library keeps its top level from
// one call to the next (common.lua: begin starts each call anew). A release on a show
// with a waitlist offers what it frees (its call's state: the seats it offered, left
// out of its feed entry's gone holds); the calls on a show without one that follow,
// with seats of the same ids, see none of it: their releases are in their feed. Rounds
// alternate between the shows.
func TestCallStateStaysInItsCall(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.waitVenue("cw", 10)
	v.show("cp", "A1", "A2", "A3", "A4")
	plain, err := v.e.show(ctx, "cp")
	if err != nil {
		t.Fatal(err)
	}
	for round, holder := range []string{"ann", "bob"} {
		seats := []string{"A1", "A2", "A3", "A4"}
		all := v.hold("cw", time.Minute, "xavier", seats...)
		v.join("cw", holder, "A", 1, time.Minute)
		if err := v.e.Release(ctx, all); err != nil {
			t.Fatal(err)
		}
		offer := v.offered("cw", holder, "A")
		if !slices.Equal(offer.SeatIDs, seats[:1]) {
			t.Fatalf("round %d: %s offered %v, want %v", round, holder, offer.SeatIDs, seats[:1])
		}
		h := v.hold("cp", time.Minute, "", offer.SeatIDs...)
		if err := v.e.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		entries, err := v.rdb.XRevRangeN(ctx, plain.k.feed(), "+", "-", 1).Result()
		if err != nil || len(entries) != 1 {
			t.Fatalf("round %d: the plain show's feed: %v, %v", round, entries, err)
		}
		if d, _ := entries[0].Values["d"].(string); d != offer.SeatIDs[0] {
			t.Fatalf("round %d: the plain show's release wrote %v, want d=%s (the other show's offer left out of it)", round, entries[0].Values, offer.SeatIDs[0])
		}
		// And the waitlist show's offer stands, its seat not anyone else's.
		if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "cw", SeatIDs: offer.SeatIDs, HolderID: "dan"}); !errors.Is(err, ErrSeatsUnavailable) {
			t.Fatalf("round %d: dan holds %v, offered to %s: %v", round, offer.SeatIDs, holder, err)
		}
		if err := v.e.Release(ctx, offer); err != nil {
			t.Fatal(err)
		}
	}
}
