package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/lua"
)

// Shrink gives back part of a hold and keeps the rest: keepSeats of its seats and keep
// of its places, under the same token, generation and expiry. What is given back is
// sellable at once. It is all or nothing, in one script under the show's hash tag: a
// seat or place the hold does not have, or nothing to keep, is ErrInvalidArgument; a
// hold that is not the owner's any more (expired, released, confirmed, another token or
// generation) is ErrHoldLost (a [*HoldLostError] says which); either way nothing
// changed. While a confirmation of the hold is being committed, Shrink waits for its
// outcome, as Release does. The returned Hold is the one to present from now on: the
// hold as it was is no longer the owner's.
func (e *Engine) Shrink(ctx context.Context, h Hold, keepSeats []string, keep []Places) (Hold, error) {
	ctx, o := e.begin(ctx, "shrink", h.ShowID, len(h.SeatIDs))
	h, err := e.shrink(ctx, h, keepSeats, keep)
	o.end(err, "")
	return h, err
}

func (e *Engine) shrink(ctx context.Context, h Hold, keepSeats []string, keep []Places) (Hold, error) {
	sh, seats, ks, tag, err := e.ownedHold(ctx, h)
	if err != nil {
		return Hold{}, err
	}
	counts, err := keepCounts(seats, keepSeats, keep)
	if err != nil {
		return Hold{}, err
	}
	key, err := onHoldIdem(ctx, sh, h, "shrink", counts)
	if err != nil {
		return Hold{}, err
	}
	res, err := e.runDecided(ctx, sh, h.Token, lua.Shrink, ks, tag, []any{h.Token, h.Generation, counts}, seats, key)
	if err != nil {
		return Hold{}, err
	}
	res, _, _ = replayed(res)
	switch status, _ := res[0].(string); {
	case status == "KEYREUSED":
		return Hold{}, keyReused("IdempotencyKey")
	case status == "LOST":
		return Hold{}, e.lostOwned(ctx, "shrink", sh, h, ks, tag, seats, len(res) == 2)
	case status != "OK" || len(res) != 2:
		return Hold{}, fmt.Errorf("%w: unexpected shrink script reply %v", ErrUnavailable, res)
	}
	e.wrote(sh, res[1])
	kept, places, _ := holdInventory("keep", keepSeats, keep, e.cfg.MaxSeatsPerHold)
	h.ShowID, h.SeatIDs, h.Places = sh.id, kept, places
	h.Offer = e.offerOf(ctx, sh, h)
	return h, nil
}

// keepCounts checks a part of a hold to keep (keepSeats, keep) against the hold's script
// seat arguments (all: its seats, then its place keys) and returns what to keep of each
// argument, in their order, as the scripts take it ("1 0 3": a seat kept, a seat given
// back, 3 places of an area kept). Nothing kept is ErrInvalidArgument, as is what
// partCounts refuses.
func keepCounts(all []string, keepSeats []string, keep []Places) (string, error) {
	if len(keepSeats) == 0 && len(keep) == 0 {
		return "", invalid("keep", "nothing kept: release the hold instead")
	}
	counts, err := partCounts("keep", "hold", all, keepSeats, keep)
	if err != nil {
		return "", err
	}
	out := make([]string, len(counts))
	for i, k := range counts {
		out[i] = strconv.Itoa(k)
	}
	return strings.Join(out, " "), nil
}

// partCounts checks a part (seats, places) of a hold or a booking (of: which) against
// its script seat arguments (all) and returns how much of each argument the part has,
// in their order: 0 or 1 for a seat, 0 up to its count for a place key. A seat or area
// not in it, more places than it has or a seat named twice is ErrInvalidArgument, its
// field named after field.
func partCounts(field, of string, all []string, seats []string, places []Places) ([]int, error) {
	ps, _, err := validPlaces(field+".Places", places)
	if err != nil {
		return nil, err
	}
	want := make(map[string]int, len(seats)+len(ps))
	for _, s := range seats {
		if !validID(s) {
			return nil, invalid(field+".SeatIDs", "seat %q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", s)
		}
		if want[s] > 0 {
			return nil, invalid(field+".SeatIDs", "seat %q appears twice", s)
		}
		want[s] = 1
	}
	for _, p := range ps {
		want[p.AreaID+"~"] = p.Count
	}
	counts := make([]int, len(all))
	for i, s := range all {
		name, most := s, 1
		if a, n, _, ok := parsePlaceKey(s); ok {
			name, most = a+"~", n
		}
		k := want[name]
		if k > most {
			return nil, invalid(field+".Places", "area %q: %d places, the hold has %d", strings.TrimSuffix(name, "~"), k, most)
		}
		delete(want, name)
		counts[i] = k
	}
	if len(want) > 0 {
		return nil, invalid(field, "not in the %s: %s", of, strings.Join(notHeld(want), ", "))
	}
	return counts, nil
}

// notHeld names what a part asks for that its hold does not have, sorted.
func notHeld(want map[string]int) []string {
	out := make([]string, 0, len(want))
	for name := range want {
		if a, ok := strings.CutSuffix(name, "~"); ok {
			out = append(out, "area "+strconv.Quote(a))
		} else {
			out = append(out, "seat "+strconv.Quote(name))
		}
	}
	slices.Sort(out)
	return out
}

// A partial confirmation (ConfirmOptions.SeatIDs / Places) books part of a hold and
// releases the rest in the same step. It goes to a batch as every confirmation does: the
// batch checks and reserves the whole hold (reserve.lua), so nothing of it can be
// released, extended, shrunk or expire meanwhile; the transaction fences and claims the
// part alone, seat by seat and area by area (a place key of the count confirmed, under
// the hold's id); after the COMMIT the part's sold markers are written (mark.lua) and
// then the rest of the hold is given back (rest.lua), sellable at once. A confirmation
// refused or rolled back gives the whole hold back as it was (unreserve.lua): nothing
// changed. Should the process die between the COMMIT and the give-back, the marker repair
// writes the part's markers and the rest comes back when its hold keys expire.

// part makes c a confirmation of the part (seats, places) of its hold: c.sold the script
// seat arguments its booking sells, c.rest the hold keys given back after the commit. A
// part that is the whole hold is a whole confirmation; none at all leaves c as it is.
func (c *confirmation) part(seats []string, places []Places) error {
	if len(seats) == 0 && len(places) == 0 {
		return nil
	}
	counts, err := partCounts("ConfirmOptions", "hold", c.seats, seats, places)
	if err != nil {
		return err
	}
	var sold, rest []string
	for i, s := range c.seats {
		a, n, _, isPlace := parsePlaceKey(s)
		switch k := counts[i]; {
		case k == 0:
			rest = append(rest, s)
		case !isPlace || k == n:
			sold = append(sold, s)
		default: // part of an area's places: booked under the key of their count
			sold, rest = append(sold, placeKey(a, k, c.h.Token)), append(rest, s)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	c.sold, c.rest, c.fenced, c.places = sold, rest, fencedSeats(sold), placesOf(sold)
	// The same key with another part of the hold is another request.
	c.fp = fingerprint(c.sh.id, append(append(slices.Clone(c.seats), "|"), sold...), c.h.Token, c.h.Generation)
	return nil
}

// giveRests gives back, after its batch's COMMIT, the rest of each partial confirmation
// of batch that booked and whose sold markers are written, in one pipeline (rest.lua).
// One whose markers are not written yet gives its rest back once they are (giveRest).
func (e *Engine) giveRests(ctx context.Context, batch []*confirmReq) {
	var calls []scriptCall
	var shows []*show
	for _, r := range batch {
		if r.err != nil || !r.marked || len(r.c.rest) == 0 {
			continue
		}
		if call, ok := restCall(r.c, r.id); ok {
			calls, shows = append(calls, call), append(shows, r.c.sh)
		}
	}
	if len(calls) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, markSoldTimeout)
	defer cancel()
	for i, cmd := range e.runScripts(rctx, calls) {
		e.restReply(shows[i], cmd)
	}
}

// giveRest gives back the rest of partial confirmation c, booked as id, after its sold
// markers are written; a whole confirmation has none.
func (e *Engine) giveRest(ctx context.Context, c *confirmation, id uuid.UUID) {
	if len(c.rest) == 0 {
		return
	}
	call, ok := restCall(c, id)
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markSoldTimeout)
	defer cancel()
	e.restReply(c.sh, e.runScripts(rctx, []scriptCall{call})[0])
}

// restCall is the rest.lua call that gives back c's rest, reserved for commit id.
func restCall(c *confirmation, id uuid.UUID) (scriptCall, bool) {
	ks, err := c.sh.scriptKeys(c.tag, c.rest)
	if err != nil {
		return scriptCall{}, false
	}
	return scriptCall{lua.Rest, ks, scriptArgs(c.tag, []any{commitID(id)}, c.rest)}, true
}

// restReply reads rest.lua's reply for show sh: the seat maps follow its feed entry; a
// give-back that failed is logged, and its hold keys come back when they expire.
func (e *Engine) restReply(sh *show, cmd *redis.Cmd) {
	res, err := cmd.Slice()
	if err != nil || len(res) != 2 {
		e.log.Warn("the rest of a partial confirmation left to expire", "show_id", sh.id, "error", err)
		return
	}
	e.wrote(sh, res[1])
}
