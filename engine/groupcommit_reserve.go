package engine

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
)

// The Redis reservation (step 2 of groupcommit.go): each hold of the batch checked and
// reserved for it in one pipeline (reserve.lua), and kept reserved while a COMMIT still
// running on the server is settled.

// reserveBatch asks Redis, in one pipeline, whether each confirmation's hold is still
// current, and reserves the current ones for the batch (reserve.lua): until the batch
// has decided, they cannot be released, extended, reserved by another batch or expire.
// One that is not current gets errLostBeforeCommit, one another batch has reserved
// errCommitting, one Redis could not answer its error.
func (e *Engine) reserveBatch(ctx context.Context, batch []*confirmReq) {
	batch = slices.DeleteFunc(slices.Clone(batch), func(r *confirmReq) bool { return r.err != nil })
	if len(batch) == 0 {
		return
	}
	// A check Redis runs after the step's bound (stallGuard), or after the last of the
	// callers would wait when each has a deadline, reserves nothing (reserve.lua). The
	// batch waits for the checks no longer than a script call on a caller's path
	// (redisCallTimeout) within that: a check that answers later, having reserved its
	// hold, is given back (unreserveBatch) or lapses. The two bounds differ so that the
	// late-check rule, which compares Redis's clock with the engine's, tolerates the
	// step's bound of clock skew, not 1.5 s.
	by := time.Now().Add(e.cfg.StatementTimeout + stallGrace)
	if d, ok := ctx.Deadline(); ok && d.Before(by) {
		by = d
	}
	if !slices.ContainsFunc(batch, func(r *confirmReq) bool { return r.leaves.IsZero() }) {
		if latest := slices.MaxFunc(batch, func(a, b *confirmReq) int { return a.leaves.Compare(b.leaves) }).leaves; latest.Before(by) {
			by = latest
		}
	}
	wait := time.Now().Add(redisCallTimeout)
	if by.Before(wait) {
		wait = by
	}
	ctx, cancel := context.WithDeadline(ctx, wait)
	defer cancel()
	spans := e.steps(batch, "holdfast.confirm.verify")
	for _, r := range batch {
		r.nonce, r.checkBy = newNonce(), by
	}
	for i, cmd := range e.runScripts(ctx, e.reserveCalls(batch, by)) {
		r := batch[i]
		cur, offer, err := e.reserveReply(cmd)
		switch {
		case err != nil:
			// Unless Redis answered (an error reply: the script did not run), it may have
			// run the check and reserved the hold: given back once Redis answers
			// (unreserveBatch), it lapses by itself otherwise.
			var answered redis.Error
			r.err, r.unanswered = err, !errors.As(err, &answered)
		case cur == holdLate:
			r.err = unavailable("redis", errors.New("Redis ran the hold's check past its late-check bound"))
		case cur == holdCommitting:
			r.err = errCommitting
		case cur <= 0:
			r.err = errLostBeforeCommit
		case cur != r.gen:
			// Reserved, but under another generation than the batch's (re-issued by
			// regen.lua): given back (unreserveBatch), and refused.
			r.reserved, r.err = true, errLostBeforeCommit
		default:
			r.reserved = true
			if offer != "" { // a settler's check again may find the key gone: keep the first read
				r.offer = offer
			}
		}
		endStep(spans[i], r.err)
	}
	if e.hooks.afterReserve != nil {
		e.hooks.afterReserve(ctx)
	}
}

// reserveReply reads reserve.lua's reply: the hold's current generation (or why it is
// not reserved, as verifyReply) and, once reserved, its offer.
func (e *Engine) reserveReply(cmd *redis.Cmd) (int64, string, error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, "", e.redisErr(err)
	}
	if len(res) < 2 || len(res) > 3 {
		return 0, "", fmt.Errorf("%w: unexpected reserve script reply %v", ErrUnavailable, res)
	}
	cur, ok := res[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("%w: unexpected reserve script reply %v", ErrUnavailable, res)
	}
	var offer string
	if len(res) == 3 {
		offer, _ = res[2].(string)
	}
	return cur, offer, nil
}

// reserveCalls are the reserve.lua calls of batch's holds, each under its confirmation's
// nonce: a first reservation, or, for a hold reserved by the same confirmation already,
// one that renews it. by is the calls' late-check bound: a call Redis runs later
// reserves nothing.
func (e *Engine) reserveCalls(batch []*confirmReq, by time.Time) []scriptCall {
	life := e.reserveLife().Milliseconds()
	calls := make([]scriptCall, len(batch))
	for i, r := range batch {
		calls[i] = scriptCall{lua.Reserve, r.c.ks, scriptArgs(r.c.tag, []any{r.c.h.Token, r.gen, commitID(r.id), r.nonce, life, by.UnixMilli()}, r.c.seats)}
	}
	return calls
}

// keepReserved keeps the holds of batch — whose COMMIT is still pending on the server
// (commitUncancelled left it there, waiting for a synchronous standby, say) — reserved
// while the batch settles its outcome, until stop: were the reservations to end first,
// a retry would find the hold gone and no booking yet, and be refused for good while
// its booking may still commit. An outcome the batch cannot settle is the settler's,
// which keeps them reserved from then on.
func (e *Engine) keepReserved(batch []*confirmReq, stop <-chan struct{}) {
	t := time.NewTicker(e.reserveLife() / 3)
	defer t.Stop()
	lengthen := func() {
		by := time.Now().Add(markSoldTimeout)
		ctx, cancel := context.WithDeadline(context.Background(), by)
		e.runScripts(ctx, e.reserveCalls(batch, by))
		cancel()
	}
	lengthen()
	for {
		select {
		case <-stop:
			return
		case <-e.viewCtx.Done():
			return
		case <-t.C:
			lengthen()
		}
	}
}

// reserveLife is how long a reservation lasts (reserve.lua), from the batch's check or
// its last renewal, and how long a reserved hold lives at least: the batch's bound, then
// the batch's marker write, then — should the process die after COMMIT — the marker
// repair of another engine (markerRepairAge and two of its rounds). The sold markers
// replace the hold's keys before they can expire, so no hold is granted on a seat whose
// booking committed; and past it the reservation lapses by itself, so none outlives its
// batch by more, whatever the hold's TTL and whatever reply was lost.
func (e *Engine) reserveLife() time.Duration {
	return e.batchTimeout() + markSoldTimeout + markerRepairAge + 2*e.cfg.MarkerRepairInterval
}

// commitID is a confirmation's id in its hold's reservation: its booking id's 32 hex digits.
func commitID(id uuid.UUID) string { return hex.EncodeToString(id[:]) }
