package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	res, err := e.runDecided(ctx, sh, h.Token, lua.Shrink, ks, tag, []any{h.Token, h.Generation, counts}, seats)
	if err != nil {
		return Hold{}, err
	}
	switch status, _ := res[0].(string); {
	case status == "LOST":
		return Hold{}, e.lostOwned(ctx, "shrink", sh, h, ks, tag, seats, len(res) == 2)
	case status != "OK" || len(res) != 2:
		return Hold{}, fmt.Errorf("%w: unexpected shrink script reply %v", ErrUnavailable, res)
	}
	e.wrote(sh, res[1])
	kept, places, _ := holdInventory("keep", keepSeats, keep, e.cfg.MaxSeatsPerHold)
	h.ShowID, h.SeatIDs, h.Places = sh.id, kept, places
	return h, nil
}

// keepCounts checks a part of a hold (keepSeats, keep) against the hold's script seat
// arguments (all: its seats, then its place keys) and returns what to keep of each
// argument, in their order, as the scripts take it ("1 0 3": a seat kept, a seat given
// back, 3 places of an area kept). A seat or area not in the hold, more places than it
// holds, a seat named twice or nothing kept is ErrInvalidArgument.
func keepCounts(all []string, keepSeats []string, keep []Places) (string, error) {
	if len(keepSeats) == 0 && len(keep) == 0 {
		return "", invalid("keep", "nothing kept: release the hold instead")
	}
	places, _, err := validPlaces("keep.Places", keep)
	if err != nil {
		return "", err
	}
	want := make(map[string]int, len(keepSeats)+len(places))
	for _, s := range keepSeats {
		if !validID(s) {
			return "", invalid("keep.SeatIDs", "seat %q must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", s)
		}
		if want[s] > 0 {
			return "", invalid("keep.SeatIDs", "seat %q appears twice", s)
		}
		want[s] = 1
	}
	for _, p := range places {
		want[p.AreaID+"~"] = p.Count
	}
	counts := make([]string, len(all))
	for i, s := range all {
		name, most := s, 1
		if a, n, _, ok := parsePlaceKey(s); ok {
			name, most = a+"~", n
		}
		k := want[name]
		if k > most {
			return "", invalid("keep.Places", "area %q: %d places, the hold has %d", strings.TrimSuffix(name, "~"), k, most)
		}
		delete(want, name)
		counts[i] = strconv.Itoa(k)
	}
	if len(want) > 0 {
		return "", invalid("keep", "not in the hold: %s", strings.Join(notHeld(want), ", "))
	}
	return strings.Join(counts, " "), nil
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
