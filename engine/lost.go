package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/internal/lua"
)

// holdLost is the refusal of hold h (of show sh and holder tag) that Redis does not
// have as presented, in op (confirm, extend, release), naming the cause its caller may
// know (a [*HoldLostError]): released (the release's tombstone, keyed by the holder's
// tag and the token), confirmed (sold: Redis's or the database's word that the hold's
// seats are sold by a booking of its generation; only then is the database asked which,
// and the booking is named to its own holder only), expired (expiredAt, the expiry a
// batch found it gone at, or the caller's Hold.ExpiresAt once it has passed), or not
// current. Each cause needs what only the hold's own holder has — its token under its
// holder id (the tombstone, the booking) — or is the caller's own word (its expiry), so
// another holder's hold is never described.
func (e *Engine) holdLost(ctx context.Context, op string, sh *show, h Hold, tag string, sold bool, expiredAt time.Time) error {
	lost := &HoldLostError{ShowID: sh.id, Cause: HoldNotCurrent, op: op}
	if at, ok := e.releasedAt(ctx, sh, tag, h.Token); ok {
		lost.Cause, lost.At = HoldReleased, at
		return lost
	}
	if sold {
		var se *HoldSpentError
		switch err := e.spentBy(ctx, sh, h.Token, h.HolderID, ErrHoldLost); {
		case errors.As(err, &se):
			if se.BookingID != uuid.Nil { // the caller's own booking
				lost.Cause, lost.BookingID, lost.err = HoldConfirmed, se.BookingID, se
				return lost
			}
		case err != nil:
			return err
		}
	}
	if expiredAt.IsZero() && !h.ExpiresAt.IsZero() && !time.Now().Before(h.ExpiresAt) {
		expiredAt = h.ExpiresAt
	}
	// A hold gone well before its expiry did not expire (Redis lost it, say); a second
	// is room for the two clocks.
	if !expiredAt.IsZero() && time.Until(expiredAt) < time.Second {
		lost.Cause, lost.At, lost.offer = HoldExpired, expiredAt, e.waitOffer(ctx, sh, h.Token)
	}
	return lost
}

// releasedAt reads the tombstone a release of the hold left (release.lua): when it was
// released. A failed read is no tombstone: it only explains a refusal already certain.
func (e *Engine) releasedAt(ctx context.Context, sh *show, tag, token string) (time.Time, bool) {
	v, err := e.rdb.Get(ctx, sh.k.released(tag, token)).Result()
	if err != nil {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// lostOwned is holdLost for a hold that extend.lua or release.lua answered LOST (booked:
// the engine found its booking while a batch had it reserved): verify.lua says whether
// its seats are sold by a booking of its generation.
func (e *Engine) lostOwned(ctx context.Context, op string, sh *show, h Hold, ks []string, tag string, seats []string, booked bool) error {
	sold := booked
	if !sold {
		// A failed read is not known sold: the refusal stands, its cause unknown.
		g, _, err := e.verifyReply(lua.Verify.Run(ctx, e.scripts, ks, scriptArgs(tag, []any{h.Token, h.Generation}, seats)...))
		sold = err == nil && g == -1
	}
	return e.holdLost(ctx, op, sh, h, tag, sold, time.Time{})
}
