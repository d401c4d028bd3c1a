package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

// After the batch: the holds it reserved and did not commit, given back as they were
// (unreserve.lua), now or in the background when Redis does not answer.

// A giveBack is a reservation to give back: r's hold's, made by the check of nonce (or
// an earlier one of r's), fixed when the give-back is decided: r may be checked again
// meanwhile (a confirmation deferred to a later batch), under a later nonce.
type giveBack struct {
	r     *confirmReq
	nonce string
	// until is when a check of nonce can no longer reserve (its late-check bound, and
	// lateCheckSkew), for one whose reply was lost: it may run in Redis after an earlier
	// give-back did (its connection delayed), so the give-back is made again after
	// then. Zero for a check that answered.
	until time.Time
}

// lateCheckSkew is how far behind the engine's clock Redis's may be for a check's last
// give-back still to come after the check can no longer reserve: reserve.lua compares
// the check's bound with Redis's clock, and the give-back follows the engine's.
const lateCheckSkew = time.Second

// unreserveBatch gives back, as they were, the holds the batch reserved and did not
// commit (refused, rolled back), in one pipeline, so that their owners may release,
// extend or confirm them again. Those whose reservation's reply was lost are given back
// in the background (giveBackLater: Redis was not answering), as are those whose give-back
// got no answer. Holds whose COMMIT's outcome is unknown stay reserved: their bookings
// may exist; their reservations lapse after reserveLife, and the marker repair writes
// the sold markers of a booking that does.
func (e *Engine) unreserveBatch(batch []*confirmReq, committedOK bool) {
	var now, later []giveBack
	for _, r := range batch {
		switch {
		case !r.reserved && !r.unanswered, errors.Is(r.err, errCommitUnknown), committedOK && r.err == nil:
		case r.unanswered:
			later = append(later, giveBack{r, r.nonce, r.checkBy.Add(lateCheckSkew)})
		default:
			now = append(now, giveBack{r, r.nonce, time.Time{}})
		}
	}
	failed := e.unreserve(now)
	if len(failed) > 0 {
		e.log.Warn("give back holds their batch did not commit: Redis did not answer; trying again in the background", "holds", len(failed))
	}
	e.giveBackLater(append(later, failed...))
}

// unreserve gives back the reservations owners name, in one pipeline, and returns those
// Redis did not answer for. Each frees only a reservation its check (or an earlier one
// of its confirmation) made: the settler may have reserved the hold again since under
// the same commit id, with a later nonce (nonce.go).
func (e *Engine) unreserve(owners []giveBack) []giveBack {
	if len(owners) == 0 {
		return nil
	}
	calls := make([]scriptCall, len(owners))
	for i, o := range owners {
		r := o.r
		calls[i] = scriptCall{lua.Unreserve, r.c.ks, scriptArgs(r.c.tag, []any{commitID(r.id), o.nonce}, r.c.seats)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), markSoldTimeout)
	defer cancel()
	var failed []giveBack
	for i, cmd := range e.runScripts(ctx, calls) {
		res, err := cmd.Slice()
		if err == nil && len(res) == 2 {
			e.wrote(owners[i].r.c.sh, res[1])
			continue
		}
		failed = append(failed, owners[i])
	}
	return failed
}

// giveBackLater gives back, in the background, the holds of owners that Redis did not
// answer for: again every Config.MarkerRepairInterval until it answers, and once more
// after their check can no longer reserve (giveBack.until: that last give-back undoes a
// check Redis ran late), until their reservations have lapsed by themselves
// (reserveLife), or until the engine closes. Meanwhile Release and Extend of them wait
// (ErrUnavailable when their context ends first).
func (e *Engine) giveBackLater(owners []giveBack) {
	if len(owners) == 0 {
		return
	}
	lapsed := time.Now().Add(e.reserveLife())
	go func() {
		wait := e.cfg.MarkerRepairInterval
		for len(owners) > 0 {
			t := time.NewTimer(wait)
			select {
			case <-e.viewCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if time.Now().After(lapsed) {
				e.log.Warn("holds their batch did not commit were not given back; their reservations lapsed", "holds", len(owners))
				return
			}
			sent := time.Now()
			failed := e.unreserve(owners)
			owners = slices.DeleteFunc(owners, func(o giveBack) bool {
				return !slices.Contains(failed, o) && sent.After(o.until)
			})
			wait = e.nextGiveBack(owners, failed)
		}
	}()
}

// nextGiveBack is how long giveBackLater waits before its next round: the repair
// interval while Redis leaves some unanswered, else until the first remaining check
// can no longer reserve (their give-backs were answered; one more after that bound is
// all they need).
func (e *Engine) nextGiveBack(owners, failed []giveBack) time.Duration {
	if len(failed) > 0 || len(owners) == 0 {
		return e.cfg.MarkerRepairInterval
	}
	first := slices.MinFunc(owners, func(a, b giveBack) int { return a.until.Compare(b.until) }).until
	return max(e.cfg.MarkerRepairInterval, time.Until(first)+time.Millisecond)
}
