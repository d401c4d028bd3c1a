package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

// Hold holds every requested seat under one new token, or none: when any seat is held by
// someone else or sold, it returns a [*SeatsUnavailableError] naming those seats and
// changes nothing. The hold expires by itself after req.TTL (Redis owns the clock).
func (e *Engine) Hold(ctx context.Context, req HoldRequest) (Hold, error) {
	ctx, o := e.begin(ctx, "hold", req.ShowID, len(req.SeatIDs))
	h, err := e.hold(ctx, req)
	o.end(err, "")
	return h, err
}

// holdAdmissionWait is how long a hold waits for one of its show's slots
// (Config.MaxHoldsInFlight) before it is shed: a moment's peak is queued, a sustained
// overload answered at once.
const holdAdmissionWait = 250 * time.Millisecond

// admitHold admits a hold of holderID to its show: a holder the show's waiting room has
// not admitted at all is refused at once (outsideRoom), then the hold takes one of the
// show's hold slots, waiting up to holdAdmissionWait; past that it is refused with
// ErrOverloaded (nothing changed). It returns the show's rules as the engine has them
// (for the script), and done, which gives the slot back.
func (e *Engine) admitHold(ctx context.Context, sh *show, holderID string) (rules *rulesState, done func(), err error) {
	rules, err = e.rulesOf(ctx, sh)
	if err != nil {
		return nil, nil, err
	}
	if err := e.staleCopy(sh); err != nil {
		return nil, nil, err
	}
	if err := e.outsideRoom(ctx, sh, rules, holderID); err != nil {
		return nil, nil, err
	}
	slots := sh.holdSlots(e.cfg.MaxHoldsInFlight)
	release := func() { <-slots }
	select {
	case slots <- struct{}{}:
		return rules, release, nil
	default:
	}
	t := time.NewTimer(holdAdmissionWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return rules, release, nil
	case <-t.C:
		return nil, nil, fmt.Errorf("%w: %d holds of show %q in flight (Config.MaxHoldsInFlight)", ErrOverloaded, e.cfg.MaxHoldsInFlight, sh.id)
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("%w: waiting for a hold slot: %v", ErrOverloaded, ctx.Err())
	}
}

func (e *Engine) hold(ctx context.Context, req HoldRequest) (Hold, error) {
	if err := validateID("HoldRequest.ShowID", req.ShowID); err != nil {
		return Hold{}, err
	}
	seats, places, err := holdInventory("HoldRequest", req.SeatIDs, req.Places, e.cfg.MaxSeatsPerHold)
	if err != nil {
		return Hold{}, err
	}
	ttl, err := e.holdTTL("HoldRequest.TTL", req.TTL)
	if err != nil {
		return Hold{}, err
	}
	if err := validateHolderID(req.HolderID); err != nil {
		return Hold{}, err
	}
	if err := validateOffer("HoldRequest.Offer", req.Offer); err != nil {
		return Hold{}, err
	}
	return withShow(ctx, e, req.ShowID, func(sh *show) (Hold, error) { return e.holdOn(ctx, sh, req, seats, places, ttl) })
}

// holdOn is a hold of seats (sorted) and places (by area) on the engine's copy of the
// show.
func (e *Engine) holdOn(ctx context.Context, sh *show, req HoldRequest, seats []string, places []Places, ttl time.Duration) (Hold, error) {
	rules, done, err := e.admitHold(ctx, sh, req.HolderID)
	if err != nil {
		return Hold{}, err
	}
	defer done()
	tag := holderTag(req.HolderID)
	token := newToken()
	ks, err := sh.scriptKeys(tag, withPlaces(seats, places, token))
	if err != nil {
		return Hold{}, e.unknownSeat(ctx, sh, err)
	}
	if err := e.checkRedis(ctx); err != nil {
		return Hold{}, err
	}
	args := scriptArgs(tag, []any{token, ttl.Milliseconds(), e.cfg.MaxSeatsPerHolder, rules.arg}, withPlaces(seats, places, token))
	key, err := holdIdem(ctx, sh, "HoldRequest.IdempotencyKey", req.IdempotencyKey, req.HolderID, tag, func() []string {
		return append([]string{"hold", strings.Join(seats, " "), placesPrint(places), strconv.FormatInt(ttl.Milliseconds(), 10)},
			offerPrint(req.Offer)...)
	})
	if err != nil {
		return Hold{}, err
	}
	if err := e.keepOffer(ctx, sh, token, req.Offer); err != nil {
		return Hold{}, err
	}
	ks, args = key.apply(e, ks, args)
	for attempt := 0; ; attempt++ {
		res, err := e.runGrouped(ctx, e.holdCalls(sh), ks, args)
		if err != nil {
			return Hold{}, e.redisErr(err)
		}
		res, first, again := replayed(res)
		if again {
			token = first
		}
		switch status, _ := res[0].(string); status {
		case "KEYREUSED":
			return Hold{}, keyReused("HoldRequest.IdempotencyKey")
		case "OK":
			gen, _ := res[1].(int64)
			exp, _ := res[2].(int64)
			if len(res) > 4 {
				e.wrote(sh, res[4])
			}
			if again { // the key's hold as it is now: a Shrink may have given part back
				now := slices.Sorted(slices.Values(replyStrings(res[5:])))
				seats = fencedSeats(now)
				places, _, _ = validPlaces("", placesOf(now)) // in area order, as the first answer
			}
			return Hold{ShowID: sh.id, SeatIDs: seats, Places: places, Token: token, Generation: gen,
				ExpiresAt: time.UnixMilli(exp), HolderID: req.HolderID, Offer: req.Offer}, nil
		case "LOST":
			return Hold{}, fmt.Errorf("%w: the hold this key made lives under other tokens (Reclaim)", ErrHoldLost)
		case "TAKEN":
			return Hold{}, unavailableIn(sh.id, res[1:])
		case "LIMIT", "NOTADMITTED":
			_, n, _ := validPlaces("", places)
			if err := e.saleRefusal(sh, res, len(seats)+n); err != nil {
				return Hold{}, err
			}
			return Hold{}, e.holderLimit(sh, res[1], len(seats)+n)
		case "STALE", "CLOSED":
			return Hold{}, e.metChange(ctx, sh, status)
		case "NOSTATE":
			// Redis has no counter for the show: it lost its data (restart without
			// persistence, failover) or never had it. Rebuild the show's markers and
			// counter from the database before granting anything, then try once more.
			if err := e.rebuildShow(ctx, sh, attempt, e.resync); err != nil {
				return Hold{}, err
			}
		default:
			return Hold{}, fmt.Errorf("%w: unexpected hold script reply %v", ErrUnavailable, res)
		}
	}
}

// holdIdem is the idem of a new hold's request under its key (own, or the one ctx
// carries), scoped to its holder (tag): a key needs one. request, the request's
// fingerprint parts, is only built for a key: a hold without one pays for nothing.
func holdIdem(ctx context.Context, sh *show, field, own, holderID, tag string, request func() []string) (idem, error) {
	key := idempotencyKeyOf(ctx, own)
	switch {
	case key == "":
		return idem{}, nil
	case holderID == "":
		return idem{}, invalid(field, "needs a HolderID: a hold's key is scoped to its holder")
	}
	return redisIdem(sh, field, key, []string{"hold", tag}, request()...)
}

// holdTTL is a requested hold TTL, or the default for zero, within the allowed range.
func (e *Engine) holdTTL(field string, ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return e.cfg.DefaultHoldTTL, nil
	}
	if ttl < minHoldTTL || ttl > e.cfg.MaxHoldTTL {
		return 0, invalid(field, "%v is out of range [%v, %v]", ttl, minHoldTTL, e.cfg.MaxHoldTTL)
	}
	return ttl, nil
}

// holderLimit is the refusal of a hold of n more seats by a holder that holds held
// (a script's reply) in the show already.
func (e *Engine) holderLimit(sh *show, held any, n int) error {
	h, _ := held.(int64)
	return fmt.Errorf("%w: holder holds %d seats in show %s, %d more would pass the cap of %d",
		ErrHolderLimit, h, sh.id, n, e.cfg.MaxSeatsPerHolder)
}

// rebuildShow runs rebuild (Resync, or the best-available index) once per show at a
// time, after a script found Redis without the show's state: bounded by rebuildTimeout,
// waited for by each caller until its ctx ends (shared). The show is one show of its id
// (its epoch): a caller with the copy of a show created again under the id does not
// wait for a rebuild from an older copy, nor take its outcome for its own. A second
// loss in one call (attempt > 0) is ErrUnavailable.
func (e *Engine) rebuildShow(ctx context.Context, sh *show, attempt int, rebuild func(context.Context, *show) error) error {
	if attempt > 0 {
		return fmt.Errorf("%w: redis keeps losing the state of show %s", ErrUnavailable, sh.id)
	}
	key := sh.id + "\x00" + strconv.FormatInt(sh.epoch, 10)
	_, wasShared, err := shared(ctx, &e.resyncs, key, "redis", rebuildTimeout,
		func(ctx context.Context) (struct{}, error) { return struct{}{}, rebuild(ctx, sh) })
	if err == nil && !wasShared {
		e.log.WarnContext(ctx, "redis had no state for the show; rebuilt it from the database", "show_id", sh.id)
	}
	return err
}

// ownedHold validates a presented hold and returns its show, its script seat arguments
// (sorted seats, then its place keys), script keys and holder tag.
func (e *Engine) ownedHold(ctx context.Context, h Hold) (*show, []string, []string, string, error) {
	if err := validateID("Hold.ShowID", h.ShowID); err != nil {
		return nil, nil, nil, "", err
	}
	seats, places, err := holdInventory("Hold", h.SeatIDs, h.Places, e.cfg.MaxSeatsPerHold)
	if err != nil {
		return nil, nil, nil, "", err
	}
	if !validToken(h.Token) {
		return nil, nil, nil, "", invalid("Hold.Token", "must be 32 lowercase hex digits")
	}
	seats = withPlaces(seats, places, h.Token)
	if h.Generation <= 0 || h.Generation > MaxGeneration {
		return nil, nil, nil, "", invalid("Hold.Generation", "%d, must be from 1 to %d", h.Generation, MaxGeneration)
	}
	if err := validateHolderID(h.HolderID); err != nil {
		return nil, nil, nil, "", err
	}
	tag := holderTag(h.HolderID)
	type owned struct {
		sh *show
		ks []string
	}
	o, err := withShow(ctx, e, h.ShowID, func(sh *show) (owned, error) {
		ks, err := sh.scriptKeys(tag, seats)
		if err != nil {
			return owned{}, e.unknownSeat(ctx, sh, err)
		}
		return owned{sh, ks}, nil
	})
	if err != nil {
		return nil, nil, nil, "", err
	}
	return o.sh, seats, o.ks, tag, nil
}

// runDecided runs a script on a hold (release.lua, extend.lua: args are scriptArgs(tag,
// fixed, seats), then key's), again while it answers BUSY — a batch is committing the hold — until
// that batch has decided (awaitDecided). A hold whose booking committed answers as a
// hold that is gone: {"LOST", "BOOKED"}. One whose reservation lapsed (LAPSED: its batch ended
// without giving it back) is given back once the database says it made no booking.
func (e *Engine) runDecided(ctx context.Context, sh *show, token string, script *lua.Function, ks []string, tag string, fixed []any, seats []string, key idem) ([]any, error) {
	var res []any
	keyed, args := key.apply(e, ks, scriptArgs(tag, fixed, seats))
	err := e.awaitDecided(ctx, sh, token, func() (bool, error) {
		var err error
		if res, err = script.Run(ctx, e.scripts, keyed, args...).Slice(); err != nil {
			return false, e.redisErr(err)
		}
		switch status, _ := res[0].(string); status {
		case "BUSY":
			return true, nil
		case "LAPSED":
			return true, e.giveBackLapsed(ctx, sh, token, ks, tag, seats, res)
		}
		return false, nil
	})
	if errors.Is(err, errHoldBooked) {
		return []any{"LOST", "BOOKED"}, nil
	}
	return res, err
}

// giveBackLapsed gives back (unreserve.lua) the hold whose reservation lapsed, as its
// batch would have, once the database says that batch made no booking of it
// (errHoldBooked when it did). reply is the script's {"LAPSED", commit id}.
func (e *Engine) giveBackLapsed(ctx context.Context, sh *show, token string, ks []string, tag string, seats []string, reply []any) error {
	var id string
	if len(reply) == 2 {
		id, _ = reply[1].(string)
	}
	if id == "" {
		return fmt.Errorf("%w: unexpected script reply %v", ErrUnavailable, reply)
	}
	if err := e.holdBooked(ctx, sh, token); err != nil {
		return err
	}
	// Only a reservation still lapsed: the settler may have renewed it meanwhile, to
	// commit the same confirmation again.
	res, err := lua.Unreserve.Run(ctx, e.scripts, ks, scriptArgs(tag, []any{id, -1}, seats)...).Slice()
	if err == nil && len(res) == 2 {
		e.wrote(sh, res[1])
	}
	return e.redisErr(err)
}

// Extend gives a hold a new TTL from now. Only the owner can: a hold that expired, was
// released or confirmed, or a token or generation that is not the owner's, is
// ErrHoldLost (a [*HoldLostError] says which) and changes nothing. While a
// confirmation of the hold is being committed, Extend waits for its outcome, as Release
// does. An expiry past the hold's maximum total age (Config.MaxHoldAge from when it was
// taken, by Redis's clock) is ErrExtendLimit.
func (e *Engine) Extend(ctx context.Context, h Hold, ttl time.Duration) (Hold, error) {
	ctx, o := e.begin(ctx, "extend", h.ShowID, len(h.SeatIDs))
	h, err := e.extend(ctx, h, ttl)
	o.end(err, "")
	return h, err
}

func (e *Engine) extend(ctx context.Context, h Hold, ttl time.Duration) (Hold, error) {
	if ttl < minHoldTTL || ttl > e.cfg.MaxHoldTTL {
		return Hold{}, invalid("ttl", "%v is out of range [%v, %v]", ttl, minHoldTTL, e.cfg.MaxHoldTTL)
	}
	sh, seats, ks, tag, err := e.ownedHold(ctx, h)
	if err != nil {
		return Hold{}, err
	}
	key, err := onHoldIdem(ctx, sh, h, "extend", strconv.FormatInt(ttl.Milliseconds(), 10))
	if err != nil {
		return Hold{}, err
	}
	fixed := []any{h.Token, h.Generation, ttl.Milliseconds(), e.cfg.MaxHoldAge.Milliseconds()}
	res, err := e.runDecided(ctx, sh, h.Token, lua.Extend, ks, tag, fixed, seats, key)
	if err != nil {
		return Hold{}, err
	}
	res, _, _ = replayed(res)
	switch status, _ := res[0].(string); status {
	case "KEYREUSED":
		return Hold{}, keyReused("IdempotencyKey")
	case "OK":
		exp, _ := res[1].(int64)
		e.wrote(sh, res[2])
		h.ShowID, h.SeatIDs, h.Places, h.ExpiresAt = sh.id, fencedSeats(seats), placesOf(seats), time.UnixMilli(exp)
		h.Offer = e.offerOf(ctx, sh, h)
		return h, nil
	case "LOST":
		return Hold{}, e.lostOwned(ctx, "extend", sh, h, ks, tag, seats, len(res) == 2)
	case "LIMIT":
		deadline, _ := res[1].(int64)
		return Hold{}, fmt.Errorf("%w: the hold may live until %s (max age %v)", ErrExtendLimit,
			time.UnixMilli(deadline).UTC().Format(time.RFC3339Nano), e.cfg.MaxHoldAge)
	default:
		return Hold{}, fmt.Errorf("%w: unexpected extend script reply %v", ErrUnavailable, res)
	}
}

// Release drops a hold at once, and Redis remembers the release for a while (see
// [HoldReleased]). Only the owner can: otherwise ErrHoldLost (a [*HoldLostError] says
// why), and nothing changes. A Release and a Confirm of one hold never both succeed: while a confirmation
// of the hold is being committed, Release waits for its outcome (the hold made a
// booking: ErrHoldLost; it did not: the hold is released), and answers ErrUnavailable
// if ctx ends first.
func (e *Engine) Release(ctx context.Context, h Hold) error {
	ctx, o := e.begin(ctx, "release", h.ShowID, len(h.SeatIDs))
	err := e.release(ctx, h)
	o.end(err, "")
	return err
}

func (e *Engine) release(ctx context.Context, h Hold) error {
	sh, seats, ks, tag, err := e.ownedHold(ctx, h)
	if err != nil {
		return err
	}
	key, err := onHoldIdem(ctx, sh, h, "release")
	if err != nil {
		return err
	}
	res, err := e.runDecided(ctx, sh, h.Token, lua.Release, ks, tag, []any{h.Token, h.Generation, releaseMemory.Milliseconds()}, seats, key)
	if err != nil {
		return err
	}
	res, _, _ = replayed(res)
	switch status, _ := res[0].(string); {
	case status == "KEYREUSED":
		return keyReused("IdempotencyKey")
	case status == "LOST":
		return e.lostOwned(ctx, "release", sh, h, ks, tag, seats, len(res) == 2)
	case status != "OK" || len(res) != 2:
		return fmt.Errorf("%w: unexpected release script reply %v", ErrUnavailable, res)
	}
	e.wrote(sh, res[1])
	return nil
}
