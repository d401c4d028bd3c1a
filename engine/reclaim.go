package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

// Reclaim gives holderID's live holds of a show fresh tokens and generations, for the
// same buyer on another device: each hold keeps its seats and its expiry, its old token
// stops working at once (ErrHoldLost, HoldNotCurrent), and its new generation is larger
// than any the database has fenced, so a late confirmation from the old device is
// refused by PostgreSQL's fence even where Redis lost the reclaim. It is one Redis
// script, atomic with every other operation on the show. A hold a batch is committing
// is waited for: booked, it is not returned (it is a booking now). Holds with places
// are left as they are, and not returned. Each hold reclaimed leaves an
// EventHoldReclaimed in the feed, written before Reclaim returns (moves.go); when they
// cannot be written, Reclaim is ErrUnavailable with the holds moved (a retry gives them
// fresh tokens again). holderID must not be empty; the caller vouches that it is the
// holder's (the HTTP API takes it from the signed identity).
func (e *Engine) Reclaim(ctx context.Context, showID, holderID string) ([]Hold, error) {
	ctx, o := e.begin(ctx, "reclaim", showID, 0)
	hs, err := e.reclaim(ctx, showID, holderID)
	o.end(err, "")
	return hs, err
}

func (e *Engine) reclaim(ctx context.Context, showID, holderID string) ([]Hold, error) {
	if err := validateID("showID", showID); err != nil {
		return nil, err
	}
	if holderID == "" {
		return nil, invalid("holderID", "must name the holder")
	}
	if err := validateHolderID(holderID); err != nil {
		return nil, err
	}
	return withShow(ctx, e, showID, func(sh *show) ([]Hold, error) {
		if err := e.checkRedis(ctx); err != nil {
			return nil, err
		}
		return e.reclaimOn(ctx, sh, holderID)
	})
}

// reclaimOn runs reclaim.lua until it answers: while a batch is committing one of the
// holder's holds it waits for that batch (awaitDecided); a hold whose batch's reservation
// lapsed is given back as Release gives it back (reclaimLapsed); a hold a batch booked
// is left out of the next run. Every run of one call derives its tokens from one seed.
func (e *Engine) reclaimOn(ctx context.Context, sh *show, holderID string) ([]Hold, error) {
	tag, seed := holderTag(holderID), newToken()
	if err := e.mayMove(ctx, sh); err != nil {
		return nil, err
	}
	var booked []string
	run := func() ([]any, error) {
		args := append([]any{tag, seed, holderID}, anySlice(booked)...)
		res, err := lua.Reclaim.Run(ctx, e.scripts, []string{sh.k.gen(), sh.k.holder(tag)}, args...).Slice()
		return res, e.redisErr(err)
	}
	res, err := run()
	for attempt := 0; ; {
		if err != nil {
			return nil, err
		}
		var token string
		if len(res) > 1 {
			token, _ = res[1].(string)
		}
		switch status, _ := res[0].(string); status {
		case "OK":
			hs, err := reclaimed(sh.id, holderID, res[1:])
			if err == nil && len(hs) > 0 {
				err = e.movedAnswer(ctx, sh)
			}
			if err != nil {
				return nil, err
			}
			return hs, nil
		case "NOSTATE":
			if err := e.rebuildShow(ctx, sh, attempt, e.resync); err != nil {
				return nil, err
			}
			attempt++
			res, err = run()
			continue
		case "BUSY":
			err = e.awaitDecided(ctx, sh, token, func() (bool, error) {
				var rerr error
				res, rerr = run()
				return rerr == nil && busyOn(res, token), rerr
			})
		case "LAPSED":
			if err = e.reclaimLapsed(ctx, sh, tag, res); err == nil {
				res, err = run()
			}
		default:
			return nil, fmt.Errorf("%w: unexpected reclaim script reply %v", ErrUnavailable, res)
		}
		if errors.Is(err, errHoldBooked) {
			booked = append(booked, token)
			res, err = run()
		}
	}
}

// reclaimLapsed gives back the hold of reclaim.lua's reply res, {"LAPSED", token, commit
// id, seats}, whose batch's reservation lapsed, as Release does: errHoldBooked when that
// batch booked it.
func (e *Engine) reclaimLapsed(ctx context.Context, sh *show, tag string, res []any) error {
	if len(res) != 4 {
		return fmt.Errorf("%w: unexpected reclaim script reply %v", ErrUnavailable, res)
	}
	token, _ := res[1].(string)
	list, _ := res[3].(string)
	seats := strings.Fields(list)
	ks, err := sh.scriptKeys(tag, seats)
	if err != nil {
		return fmt.Errorf("%w: reclaim: %v", ErrUnavailable, err)
	}
	return e.giveBackLapsed(ctx, sh, token, ks, tag, seats, []any{"LAPSED", res[2]})
}

// busyOn reports whether reclaim.lua's reply res says token's hold is being committed.
func busyOn(res []any, token string) bool {
	if len(res) != 2 || res[0] != "BUSY" {
		return false
	}
	t, _ := res[1].(string)
	return t == token
}

// reclaimed reads reclaim.lua's groups of token, generation, expiry, seats and offer.
func reclaimed(showID, holderID string, groups []any) ([]Hold, error) {
	if len(groups)%5 != 0 {
		return nil, fmt.Errorf("%w: unexpected reclaim script reply %v", ErrUnavailable, groups)
	}
	hs := make([]Hold, 0, len(groups)/5)
	for i := 0; i < len(groups); i += 5 {
		token, _ := groups[i].(string)
		gen, _ := groups[i+1].(int64)
		exp, _ := groups[i+2].(int64)
		list, _ := groups[i+3].(string)
		offer, _ := groups[i+4].(string)
		seats := strings.Fields(list)
		slices.Sort(seats)
		hs = append(hs, Hold{ShowID: showID, SeatIDs: seats, Token: token, Generation: gen,
			ExpiresAt: time.UnixMilli(exp), HolderID: holderID, Offer: offer})
	}
	slices.SortFunc(hs, func(a, b Hold) int { return strings.Compare(a.SeatIDs[0], b.SeatIDs[0]) })
	return hs, nil
}

// anySlice is ss as script arguments.
func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
