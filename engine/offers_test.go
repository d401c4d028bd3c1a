package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOfferKeptByTheBooking: a hold's offer (HoldRequest.Offer, BestRequest.Offer) is
// on the Hold and on the booking it makes, as Confirm returns it and as Booking reads it
// back; the booking has the hold's offer whatever the presented Hold says (a buyer
// cannot swap the tier the hold was given, nor drop it); a hold without one books none.
func TestOfferKeptByTheBooking(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("of1", "A1", "A2", "A3", "A4")
	ctx := t.Context()
	const tier = "tier-B pricelist-2026-12 ünï"
	h, err := v.e.Hold(ctx, HoldRequest{ShowID: "of1", SeatIDs: []string{"A1"}, HolderID: "alice", Offer: tier})
	if err != nil {
		t.Fatal(err)
	}
	if h.Offer != tier {
		t.Fatalf("Hold.Offer = %q, want %q", h.Offer, tier)
	}
	best, err := v.e.HoldBest(ctx, BestRequest{ShowID: "of1", Count: 1, HolderID: "bob", Offer: "best-tier"})
	if err != nil {
		t.Fatal(err)
	}
	if best.Offer != "best-tier" {
		t.Fatalf("HoldBest's Offer = %q, want best-tier", best.Offer)
	}
	plain := v.hold("of1", time.Minute, "carol", "A4")

	swapped := h
	swapped.Offer = "tier-A" // the buyer presents another tier
	dropped := best
	dropped.Offer = ""
	for _, c := range []struct {
		presented Hold
		want      string
	}{{swapped, tier}, {dropped, "best-tier"}, {plain, ""}} {
		b, err := v.e.Confirm(ctx, c.presented, ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.Offer != c.want {
			t.Errorf("Confirm's booking of %v has offer %q, want the hold's %q", c.presented.SeatIDs, b.Offer, c.want)
		}
		read, err := v.e.Booking(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if read.Offer != c.want {
			t.Errorf("Booking(%s).Offer = %q, want %q", b.ID, read.Offer, c.want)
		}
	}
}

// TestOfferRefusedAndNothingHeld: an offer past 256 bytes, not UTF-8, or with a control
// character is ErrInvalidArgument, and holds nothing: the seat is free for the next.
func TestOfferRefusedAndNothingHeld(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("of2", "A1")
	ctx := t.Context()
	for _, bad := range []string{strings.Repeat("x", 257), "tier\xff", "tier\nB", "tier\x00", "tier\u0085B", "tier\u009b2J"} {
		if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "of2", SeatIDs: []string{"A1"}, HolderID: "alice", Offer: bad}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Hold with offer %q: %v, want ErrInvalidArgument", bad, err)
		}
		if _, err := v.e.HoldBest(ctx, BestRequest{ShowID: "of2", Count: 1, HolderID: "alice", Offer: bad}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("HoldBest with offer %q: %v, want ErrInvalidArgument", bad, err)
		}
	}
	h, err := v.e.Hold(ctx, HoldRequest{ShowID: "of2", SeatIDs: []string{"A1"}, HolderID: "bob", Offer: strings.Repeat("x", 256)})
	if err != nil {
		t.Fatalf("a 256-byte offer on a seat the refused calls left free: %v", err)
	}
	if len(h.Offer) != 256 {
		t.Fatalf("offer of %d bytes, want 256", len(h.Offer))
	}
}

// TestOfferUnderAnIdempotencyKey: a retry with the same offer gets the same hold; the
// same key with another offer is another request (ErrIdempotencyKeyReused).
func TestOfferUnderAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("of3", "A1", "A2")
	ctx := t.Context()
	req := HoldRequest{ShowID: "of3", SeatIDs: []string{"A1"}, HolderID: "alice", Offer: "tier-B", IdempotencyKey: "k1"}
	first, err := v.e.Hold(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.e.Hold(ctx, req)
	if err != nil || again.Token != first.Token || again.Offer != "tier-B" {
		t.Fatalf("retry: %+v, %v; want the first hold with its offer", again, err)
	}
	req.Offer = "tier-A"
	if _, err := v.e.Hold(ctx, req); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("the key with another offer: %v, want ErrIdempotencyKeyReused", err)
	}
	best := BestRequest{ShowID: "of3", Count: 1, HolderID: "alice", Offer: "tier-B", IdempotencyKey: "k2"}
	if _, err := v.e.HoldBest(ctx, best); err != nil {
		t.Fatal(err)
	}
	best.Offer = ""
	if _, err := v.e.HoldBest(ctx, best); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("a best-available key without its offer: %v, want ErrIdempotencyKeyReused", err)
	}
}

// TestOfferFollowsReclaimAndTransfer: a reclaimed hold and a transferred one keep their
// offer (on the Hold, and on the booking the new token makes); places carry it too.
func TestOfferFollowsReclaimAndTransfer(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.areaVenue("of4", 10)
	ctx := t.Context()
	h, err := v.e.Hold(ctx, HoldRequest{ShowID: "of4", SeatIDs: []string{"A1"}, HolderID: "alice", Offer: "tier-B"})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := v.e.Reclaim(ctx, "of4", "alice")
	if err != nil || len(hs) != 1 {
		t.Fatalf("Reclaim: %v, %v", hs, err)
	}
	if hs[0].Offer != "tier-B" || hs[0].Token == h.Token {
		t.Fatalf("reclaimed hold: offer %q (want tier-B), token new: %v", hs[0].Offer, hs[0].Token != h.Token)
	}
	moved, err := v.e.Transfer(ctx, hs[0], "bob")
	if err != nil {
		t.Fatal(err)
	}
	if moved.Offer != "tier-B" {
		t.Fatalf("transferred hold's offer %q, want tier-B", moved.Offer)
	}
	b, err := v.e.Confirm(ctx, moved, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Offer != "tier-B" || b.HolderID != "bob" {
		t.Fatalf("booking: offer %q holder %q, want tier-B and bob", b.Offer, b.HolderID)
	}

	p, err := v.e.Hold(ctx, HoldRequest{ShowID: "of4", Places: []Places{{AreaID: "FLOOR", Count: 3}}, HolderID: "carol", Offer: "floor-early"})
	if err != nil {
		t.Fatal(err)
	}
	moved, err = v.e.Transfer(ctx, p, "dave")
	if err != nil {
		t.Fatal(err)
	}
	b, err = v.e.Confirm(ctx, moved, ConfirmOptions{Places: []Places{{AreaID: "FLOOR", Count: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Offer != "floor-early" {
		t.Fatalf("a partial confirmation of a transferred place hold: offer %q, want floor-early", b.Offer)
	}
}

// TestOffersOfOneBatch: concurrent confirmations, committed together by group commit,
// each store their own hold's offer.
func TestOffersOfOneBatch(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	const n = 60
	v.show("of5", seatNames(n)...)
	ctx := t.Context()
	holds := make([]Hold, n)
	for i := range holds {
		h, err := v.e.Hold(ctx, HoldRequest{ShowID: "of5", SeatIDs: []string{fmt.Sprintf("S%03d", i)},
			HolderID: fmt.Sprintf("h%d", i), Offer: fmt.Sprintf("offer-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		holds[i] = h
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, h := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
			if err == nil && b.Offer != fmt.Sprintf("offer-%d", i) {
				err = fmt.Errorf("booking of %v has offer %q, want offer-%d", h.SeatIDs, b.Offer, i)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := v.count("SELECT count(*) FROM bookings WHERE show_id = 'of5' AND offer = 'offer-' || (substr((SELECT min(seat_id) FROM booking_seats s WHERE s.booking_id = bookings.booking_id), 2)::int)"); got != n {
		t.Fatalf("%d of %d bookings store their hold's offer in PostgreSQL", got, n)
	}
}

// TestOfferOfExtendAndShrink: Extend and Shrink answer the hold with its own offer, not
// the one presented (another tier, or none).
func TestOfferOfExtendAndShrink(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("of6", "A1", "A2")
	ctx := t.Context()
	h, err := v.e.Hold(ctx, HoldRequest{ShowID: "of6", SeatIDs: []string{"A1", "A2"}, HolderID: "alice", Offer: "tier-B"})
	if err != nil {
		t.Fatal(err)
	}
	spoof := h
	spoof.Offer = "tier-A"
	ext, err := v.e.Extend(ctx, spoof, time.Minute)
	if err != nil || ext.Offer != "tier-B" {
		t.Fatalf("Extend of a tier-B hold presented as tier-A: %q, %v", ext.Offer, err)
	}
	none := h
	none.Offer = ""
	kept, err := v.e.Shrink(ctx, none, []string{"A1"}, nil)
	if err != nil || kept.Offer != "tier-B" {
		t.Fatalf("Shrink of a tier-B hold presented without its offer: %q, %v", kept.Offer, err)
	}
	plain := v.hold("of6", time.Minute, "bob", "A2")
	plain.Offer = "tier-A"
	if ext, err := v.e.Extend(ctx, plain, time.Minute); err != nil || ext.Offer != "" {
		t.Fatalf("Extend of a hold without an offer presented with one: %q, %v", ext.Offer, err)
	}
}

// TestOfferOutlivesEveryCommitOfItsHold: an offer's key lives past the last moment its
// hold can be committed: the hold's longest life (MaxHoldAge), then a settler's commit
// again of a confirmation whose COMMIT was lost (up to MaxHoldTTL later), with a
// reservation's life.
func TestOfferOutlivesEveryCommitOfItsHold(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	v.show("of7", "A1")
	ctx := t.Context()
	before := time.Now()
	h, err := v.e.Hold(ctx, HoldRequest{ShowID: "of7", SeatIDs: []string{"A1"}, HolderID: "alice", Offer: "tier-B"})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := v.e.show(ctx, "of7")
	if err != nil {
		t.Fatal(err)
	}
	end, err := v.rdb.PExpireTime(ctx, sh.k.offer(h.Token)).Result()
	if err != nil {
		t.Fatal(err)
	}
	last := before.Add(v.e.cfg.MaxHoldAge + v.e.cfg.MaxHoldTTL + v.e.reserveLife())
	if got := time.UnixMilli(end.Milliseconds()); got.Before(last) {
		t.Fatalf("the offer's key ends %v before the hold's last possible commit", last.Sub(got))
	}
}
