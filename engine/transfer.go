package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

// Transfer moves a hold to another holder: the hold returned has the same seats,
// places and expiry, toHolderID as its holder, a new token and a new generation. The
// presented hold stops working at once (ErrHoldLost), and its generation is below the
// new one, which is larger than any the database has fenced: a confirmation with the
// old hold is refused by PostgreSQL's fence even where Redis lost the transfer. The new
// holder is counted as a hold of the seats would count them: a waiting room that has
// not admitted them now is ErrNotAdmitted, a hold past Config.MaxSeatsPerHolder or the
// sale's holder limit (seats held and booked) is ErrHolderLimit, and either way nothing
// changed. It is one Redis script, atomic with every other operation on the show; while
// a confirmation of the hold is being committed, Transfer waits for its outcome, as
// Release does. Only the owner can transfer (a hold that is not theirs any more is
// ErrHoldLost); the caller vouches that h.HolderID is the caller's (the HTTP API takes
// it from the signed identity). toHolderID must name a holder other than h's.
func (e *Engine) Transfer(ctx context.Context, h Hold, toHolderID string) (Hold, error) {
	ctx, o := e.begin(ctx, "transfer", h.ShowID, len(h.SeatIDs))
	h, err := e.transfer(ctx, h, toHolderID)
	o.end(err, "")
	return h, err
}

func (e *Engine) transfer(ctx context.Context, h Hold, to string) (Hold, error) {
	if err := validateNewHolder(h.HolderID, to); err != nil {
		return Hold{}, err
	}
	sh, seats, ks, tag, err := e.ownedHold(ctx, h)
	if err != nil {
		return Hold{}, err
	}
	rules, done, err := e.admitHold(ctx, sh, to)
	if err != nil {
		return Hold{}, err
	}
	defer done()
	if err := e.checkRedis(ctx); err != nil {
		return Hold{}, err
	}
	token := newToken()
	fixed := []any{h.Token, h.Generation, holderTag(to), token, placeHoldID(token), e.cfg.MaxSeatsPerHolder, rules.arg}
	for attempt := 0; ; attempt++ {
		res, err := e.runDecided(ctx, sh, h.Token, lua.Transfer, ks, tag, fixed, seats)
		if err != nil {
			return Hold{}, err
		}
		switch status, _ := res[0].(string); status {
		case "OK":
			gen, _ := res[1].(int64)
			exp, _ := res[2].(int64)
			e.wrote(sh, res[3])
			return Hold{ShowID: sh.id, SeatIDs: fencedSeats(seats), Places: placesOf(seats), Token: token, Generation: gen,
				ExpiresAt: time.UnixMilli(exp), HolderID: to}, nil
		case "LOST":
			return Hold{}, e.lostOwned(ctx, "transfer", sh, h, ks, tag, seats, len(res) == 2)
		case "LIMIT", "NOTADMITTED":
			_, places, _ := validPlaces("", placesOf(seats))
			n := len(fencedSeats(seats)) + places
			if err := e.saleRefusal(sh, res, n); err != nil {
				return Hold{}, err
			}
			return Hold{}, e.holderLimit(sh, res[1], n)
		case "STALE", "CLOSED":
			return Hold{}, e.metChange(ctx, sh, status)
		case "NOSTATE":
			if err := e.rebuildShow(ctx, sh, attempt, e.resync); err != nil {
				return Hold{}, err
			}
		default:
			return Hold{}, fmt.Errorf("%w: unexpected transfer script reply %v", ErrUnavailable, res)
		}
	}
}

// validateNewHolder checks the holder a hold or a booking moves to, from the holder
// from: named, valid, and another.
func validateNewHolder(from, to string) error {
	if to == "" {
		return invalid("toHolderID", "must name the holder")
	}
	if err := validateHolderID(to); err != nil {
		return err
	}
	if to == from {
		return invalid("toHolderID", "is the holder already")
	}
	return nil
}
