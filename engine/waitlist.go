package engine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
)

// Waitlists. A holder joins a show's waitlist for a category (of seats and areas) and a
// count. When seats or places of the category come free — a release, a shrink, a
// cancellation, the rest of a partial confirmation, an expiry — the first entry (in the
// order of joining) whose count fits is offered a hold of them, for the entry's
// OfferTTL and counted against the holder's limits like any hold of theirs. The offer
// is made inside the Redis script that frees them (internal/lua/common.lua: wl_lib),
// atomic with it: no offer is made twice, no freed seat goes to two holders, and a seat
// offered never shows free on a map nor goes to another buyer meanwhile (a script makes
// at most 32 offers; the sweep makes the rest). A seat freed
// by its hold's expiry is offered by the first script that finds it expired: a hold
// or best-available hold that asks for it (which then finds it offered), or the
// engine's waitlist loop (waitlistLoop), which sweeps every show with a waitlist
// several times a second. An offer not confirmed in time goes to the next entry, and a
// confirmation of its hold is ErrOfferExpired.
//
// The waitlists live in Redis with the holds: a Redis that loses its data loses them,
// as it loses the holds and the waiting room.

// ErrOfferExpired reports a confirmation (or extension) of a waitlist offer's hold after
// its OfferTTL: the offer went to the next in line. It matches ErrHoldLost too.
var ErrOfferExpired = errors.New("engine: waitlist offer expired")

// WaitRequest asks for a place on a show's waitlist.
type WaitRequest struct {
	ShowID, HolderID string
	// Category is the seats' and areas' category the holder waits for ("": those
	// without one).
	Category string
	// Count is how many seats, or places of one area, the offer holds: 1 to
	// Config.MaxSeatsPerHold.
	Count int
	// OfferTTL is how long an offer's hold lives (0: Config.DefaultHoldTTL; at most
	// Config.MaxHoldTTL).
	OfferTTL time.Duration
}

// WaitEntry is a holder's place on a waitlist.
type WaitEntry struct {
	ShowID, HolderID, Category string
	Count                      int
	// Position is 1 for the first entry waiting; 0 once offered.
	Position int64
	// Offer is the hold offered, once made: confirm it as any hold (Confirm, with the
	// Token). Its seats are the category's best free ones, or its places of one area.
	Offer *Hold
}

// waitlistSweep is how often the waitlist loop sweeps a show with a waitlist entry
// waiting or offered.
const waitlistSweep = 200 * time.Millisecond

// maxSweepRounds bounds the sweep calls one tick makes of a show while each stops at its
// bound of offers (wl.lua: 32 a call).
const maxSweepRounds = 32

// JoinWaitlist puts a holder on a show's waitlist for a category, once per (show,
// holder, category): a holder already waiting, or offered a hold, gets their entry as
// it is; one whose offer expired joins again at the end of the line. When the category
// has enough free now, the offer is made at once. A join is a way to seats, so it is
// refused as a hold would be: on a show with a waiting room, a holder not admitted now
// is ErrNotAdmitted; a count the holder's bookings leave no room for under the sale's
// holder limit is ErrHolderLimit. A count past the holder's caps or past what the
// category has (its seats, or the places of its largest area) is ErrInvalidArgument; a
// category with neither seats nor areas in the show, ErrNotFound. Each changes nothing.
func (e *Engine) JoinWaitlist(ctx context.Context, r WaitRequest) (WaitEntry, error) {
	ctx, o := e.begin(ctx, "join_waitlist", r.ShowID, r.Count)
	w, err := e.joinWaitlist(ctx, r)
	o.end(err, "")
	return w, err
}

func (e *Engine) joinWaitlist(ctx context.Context, r WaitRequest) (WaitEntry, error) {
	if err := validateWaiter(r.ShowID, r.HolderID, r.Category); err != nil {
		return WaitEntry{}, err
	}
	if r.Count < 1 || r.Count > e.cfg.MaxSeatsPerHold {
		return WaitEntry{}, invalid("WaitRequest.Count", "%d is out of range [1, %d]", r.Count, e.cfg.MaxSeatsPerHold)
	}
	if e.cfg.MaxSeatsPerHolder > 0 && r.Count > e.cfg.MaxSeatsPerHolder {
		return WaitEntry{}, invalid("WaitRequest.Count", "%d is past the %d seats a holder may hold (Config.MaxSeatsPerHolder)", r.Count, e.cfg.MaxSeatsPerHolder)
	}
	ttl, err := e.holdTTL("WaitRequest.OfferTTL", r.OfferTTL)
	if err != nil {
		return WaitEntry{}, err
	}
	return withShow(ctx, e, r.ShowID, func(sh *show) (WaitEntry, error) {
		rules, err := e.rulesOf(ctx, sh)
		if err != nil {
			return WaitEntry{}, err
		}
		if lim := rules.r.HolderLimit; lim > 0 && r.Count > lim {
			return WaitEntry{}, invalid("WaitRequest.Count", "%d is past the show's holder limit of %d", r.Count, lim)
		}
		secs, areas, err := e.waitCategory(ctx, sh, r.Category, r.Count)
		if err != nil {
			return WaitEntry{}, err
		}
		token := newToken()
		args := []any{"join", rules.arg, holderTag(r.HolderID), r.Category, r.Count, ttl.Milliseconds(), token,
			placeHoldID(token), e.cfg.MaxSeatsPerHolder, secs, areas}
		w, err := e.waitCall(ctx, sh, r.HolderID, r.Category, args)
		if err == nil {
			e.waitlisted(ctx, sh.id)
		}
		return w, err
	})
}

// WaitEntry returns a holder's entry on a show's waitlist for a category: waiting (its
// position), or offered (the hold). One whose offer expired is ErrOfferExpired (for a
// day, or until the holder joins again); none — never joined, or its offer was booked,
// released or moved to another holder — is ErrNotFound.
func (e *Engine) WaitEntry(ctx context.Context, showID, holderID, category string) (WaitEntry, error) {
	ctx, o := e.begin(ctx, "wait_entry", showID, 0)
	w, err := e.waitEntry(ctx, showID, holderID, category)
	o.end(err, "")
	return w, err
}

func (e *Engine) waitEntry(ctx context.Context, showID, holderID, category string) (WaitEntry, error) {
	if err := validateWaiter(showID, holderID, category); err != nil {
		return WaitEntry{}, err
	}
	return withShow(ctx, e, showID, func(sh *show) (WaitEntry, error) {
		rules, err := e.rulesOf(ctx, sh)
		if err != nil {
			return WaitEntry{}, err
		}
		return e.waitCall(ctx, sh, holderID, category, []any{"get", rules.arg, holderTag(holderID), category})
	})
}

// validateWaiter checks a waitlist call's show, holder (required: an entry is a
// holder's) and category.
func validateWaiter(showID, holderID, category string) error {
	if err := validateID("showID", showID); err != nil {
		return err
	}
	if err := requireHolderID(holderID, "a waitlist entry is a holder's"); err != nil {
		return err
	}
	if !validLabel(category) {
		return invalid("Category", "%q must be empty or match ^[A-Za-z0-9][A-Za-z0-9 ._-]{0,31}$", category)
	}
	return nil
}

// waitCategory is the category's seats and areas as wl.lua takes them: the section
// numbers of the best-available index (which wl.lua asks to be built when it is not:
// NOINDEX) and
// "<area>@<marker bucket>" of its areas, each space-separated. A category the show has
// neither of is ErrNotFound; a count it could never offer (more than its seats and than
// the places of its largest area), ErrInvalidArgument.
func (e *Engine) waitCategory(ctx context.Context, sh *show, category string, count int) (secs, areas string, err error) {
	var ns, as []string
	for n, bs := range sh.sections {
		if bs.category == category {
			ns = append(ns, strconv.Itoa(n))
		}
	}
	most := 0 // what one offer of the category can hold
	for _, s := range sh.layout {
		if s.Category == category {
			most++
		}
	}
	for i, a := range sh.areas {
		if a.Category == category {
			as = append(as, a.ID+"@"+strconv.Itoa(areaBucketBase+i))
			most = max(most, a.Capacity)
		}
	}
	if len(ns) == 0 && len(as) == 0 {
		return "", "", e.unknownSeat(ctx, sh, notFound("seats or areas of category %q in show %q", category, sh.id))
	}
	if count > most {
		return "", "", invalid("WaitRequest.Count", "%d is more than category %q of show %q could ever offer (%d)", count, category, sh.id, most)
	}
	return strings.Join(ns, " "), strings.Join(as, " "), nil
}

// waitCall runs wl.lua's join or get for holderID and answers with the entry, rebuilding
// the show's state once when Redis lost it.
func (e *Engine) waitCall(ctx context.Context, sh *show, holderID, category string, args []any) (WaitEntry, error) {
	for attempt := 0; ; attempt++ {
		res, err := lua.Wait.Run(ctx, e.scripts, []string{sh.k.gen()}, args...).Slice()
		if err != nil {
			return WaitEntry{}, e.redisErr(err)
		}
		switch status, _ := res[0].(string); status {
		case "OK":
			return waitEntryOf(sh.id, holderID, category, res)
		case "NOTADMITTED", "LIMIT":
			count, _ := args[4].(int)
			return WaitEntry{}, e.saleRefusal(sh, res, count)
		case "NONE":
			return WaitEntry{}, notFound("waitlist entry of this holder for category %q in show %q", category, sh.id)
		case "STALE", "CLOSED":
			return WaitEntry{}, e.metChange(ctx, sh, status)
		case "NOSTATE":
			if err := e.rebuildShow(ctx, sh, attempt, e.resync); err != nil {
				return WaitEntry{}, err
			}
		case "NOINDEX":
			if err := e.rebuildShow(ctx, sh, attempt, e.buildIndex); err != nil {
				return WaitEntry{}, err
			}
		default:
			return WaitEntry{}, fmt.Errorf("%w: unexpected waitlist script reply %v", ErrUnavailable, res)
		}
	}
}

// waitEntryOf reads wl.lua's {"OK", state, count, position, ttl, token, generation,
// expiry, units...}.
func waitEntryOf(showID, holderID, category string, res []any) (WaitEntry, error) {
	if len(res) < 8 {
		return WaitEntry{}, fmt.Errorf("%w: unexpected waitlist script reply %v", ErrUnavailable, res)
	}
	i := func(k int) int64 { v, _ := res[k].(int64); return v }
	state, _ := res[1].(string)
	w := WaitEntry{ShowID: showID, HolderID: holderID, Category: category, Count: int(i(2)), Position: i(3)}
	switch state {
	case "expired":
		return WaitEntry{}, fmt.Errorf("%w: the offer to this holder for category %q in show %q was not confirmed in time; it went to the next in line (join again to wait again)", ErrOfferExpired, category, showID)
	case "offered":
		token, _ := res[5].(string)
		units := replyStrings(res[8:])
		w.Offer = &Hold{ShowID: showID, SeatIDs: fencedSeats(units), Places: placesOf(units), Token: token,
			Generation: i(6), ExpiresAt: time.UnixMilli(i(7)), HolderID: holderID}
	}
	return w, nil
}

// waitOffer reports whether token is a waitlist offer's hold's (wl.lua keeps that a day
// past the offer). A failed read is no: it only names a refusal already certain.
func (e *Engine) waitOffer(ctx context.Context, sh *show, token string) bool {
	sum := sha1.Sum([]byte(token))
	n, err := e.rdb.Exists(ctx, sh.k.base+"wl:t:"+hex.EncodeToString(sum[:])).Result()
	return err == nil && n == 1
}

// waitlistsKey is the set of shows that have had a waitlist, which the waitlist loop
// sweeps (outside any show's hash tag: it names shows).
func (e *Engine) waitlistsKey() string { return e.cfg.KeyPrefix + ":waitlists" }

// waitlisted has the waitlist loops sweep show from now on. A failed write is logged:
// the entry stands, and its offers are made by the scripts that free seats all the same.
func (e *Engine) waitlisted(ctx context.Context, showID string) {
	if err := e.rdb.SAdd(ctx, e.waitlistsKey(), showID).Err(); err != nil {
		e.log.WarnContext(ctx, "waitlist: could not list the show for sweeping", "show_id", showID, "err", err)
	}
}

// waitlistLoop sweeps, every waitlistSweep until ctx ends, each show that has had a
// waitlist and has an entry waiting or offered now (wl.lua's sweep): the holds of its
// categories that expired are given back and offered to their waitlists, and the
// offers that expired go to the next in line. Every engine runs one; a sweep is one
// script, so two engines sweeping a show at once make each offer once.
func (e *Engine) waitlistLoop(ctx context.Context) {
	defer close(e.waitlistDone)
	t := time.NewTicker(waitlistSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range e.waitlistShows(ctx) {
			if err := e.sweepWaitlists(ctx, id); err != nil && ctx.Err() == nil {
				e.log.WarnContext(ctx, "waitlist sweep", "show_id", id, "error", err)
			}
		}
	}
}

// waitlistShows is the shows with a waitlist entry waiting or offered now, by one
// pipeline; none when Redis does not answer (the next tick asks again). The others
// leave the set (idle).
func (e *Engine) waitlistShows(ctx context.Context) []string {
	ids, err := e.rdb.SMembers(ctx, e.waitlistsKey()).Result()
	if err != nil || len(ids) == 0 {
		return nil
	}
	on := e.waitlistsOn(ctx, ids)
	if on == nil {
		return nil
	}
	var live, idle []string
	for i, id := range ids {
		if on[i] {
			live = append(live, id)
		} else {
			idle = append(idle, id)
		}
	}
	e.idleWaitlists(ctx, idle)
	return live
}

// waitlistsOn says, by one pipeline, which of the shows have a waitlist entry waiting or
// offered, or a waitlist horizon that a sweep has yet to end; nil when Redis does not
// answer.
func (e *Engine) waitlistsOn(ctx context.Context, ids []string) []bool {
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		k := newKeys(e.cfg.KeyPrefix, id)
		cmds[i] = pipe.Exists(ctx, k.base+"wl:on", k.horizon())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil
	}
	on := make([]bool, len(ids))
	for i, c := range cmds {
		on[i] = c.Val() > 0
	}
	return on
}

// idleWaitlists takes shows without an entry out of the set the loops sweep, and puts
// back any that a join gave an entry meanwhile (a join adds its show after its script:
// a removal between the two is undone by the join, one before the script by this
// second look).
func (e *Engine) idleWaitlists(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	if err := e.rdb.SRem(ctx, e.waitlistsKey(), anySlice(ids)...).Err(); err != nil {
		return
	}
	on := e.waitlistsOn(ctx, ids)
	for i, id := range ids {
		if on == nil || on[i] { // when Redis cannot say, all go back
			e.waitlisted(ctx, id)
		}
	}
}

// sweepWaitlists runs wl.lua's sweep on a show. A show deleted since leaves the set.
func (e *Engine) sweepWaitlists(ctx context.Context, showID string) error {
	_, err := withShow(ctx, e, showID, func(sh *show) (struct{}, error) {
		rules, err := e.rulesOf(ctx, sh)
		if err != nil {
			return struct{}{}, err
		}
		for range maxSweepRounds {
			res, err := lua.Wait.Run(ctx, e.scripts, []string{sh.k.gen()}, "sweep", rules.arg, "", "").Slice()
			if err != nil {
				return struct{}{}, e.redisErr(err)
			}
			if status, _ := res[0].(string); status == "STALE" || status == "CLOSED" {
				return struct{}{}, e.metChange(ctx, sh, status)
			}
			if more, _ := res[len(res)-1].(int64); len(res) < 3 || more == 0 {
				break
			}
		}
		return struct{}{}, nil
	})
	if errors.Is(err, ErrNotFound) {
		return e.rdb.SRem(ctx, e.waitlistsKey(), showID).Err()
	}
	return err
}
