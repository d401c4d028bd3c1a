package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
)

// The sequential model of one standing area of placesCap places: holds take a count of
// its free places, all or nothing; a confirmation sells the whole hold or part of it and
// gives the rest back; a release gives a hold back; a cancellation gives a booking's
// places back; an exchange gives back some of a booking's places and books a hold's into
// it (the booking then has what it kept and the hold's). Only a hold's owner (its token)
// may confirm, release or exchange it, and an area never sells or holds more than it
// has. The area has a waitlist: an entry joins it for a count, and whenever places are
// free — at the join, or as any step gives places back — the first entry in the order of
// joining whose count fits is offered a hold of them ("w:<entry>"), in that same step.

const placesCap = 12

type placeOp int

const (
	placeHoldOp placeOp = iota
	placeReleaseOp
	placeConfirmOp
	placeCancelOp
	placeExchangeOp
	placeJoinOp // an entry joins the waitlist for count places
	placeReadOp // an entry waiting is read: offered or not
)

type placeIn struct {
	kind    placeOp
	count   int    // a hold's count; a confirmation's part (0: the whole hold); the places an exchange gives back; a join's
	token   string // the hold released, confirmed or exchanged; a hold's idempotency key; the entry joined or read
	booking string // the booking cancelled or exchanged
}

type placeOut struct {
	ok, unknown bool
	shed        bool   // refused before it was tried (ErrOverloaded): changed nothing, whatever the state
	token       string // a granted hold's
	booking     string // a confirmation's
	offered     bool   // a join or a read: the entry has its offer
	why         string // a refusal's error, for the description
}

// placeState is the area: its holds (token -> count), bookings (id -> count) and
// waitlist (entries waiting, in the order of joining); an unknown outcome's hold or
// booking is kept under a name of its own, "?<n>". It is a string so that porcupine can
// compare states.
type placeState string

// waiting is an entry of the waitlist and its count.
type waiting struct {
	entry string
	count int
}

func (s placeState) parse() (holds, booked map[string]int, line []waiting) {
	holds, booked = map[string]int{}, map[string]int{}
	parts := strings.SplitN(string(s), "|", 3)
	for m, part := range map[*map[string]int]string{&holds: parts[0], &booked: parts[1]} {
		for _, kv := range strings.Fields(part) {
			k, n, _ := strings.Cut(kv, "=")
			var c int
			fmt.Sscan(n, &c)
			(*m)[k] = c
		}
	}
	for _, kv := range strings.Fields(parts[2]) {
		k, n, _ := strings.Cut(kv, "=")
		var c int
		fmt.Sscan(n, &c)
		line = append(line, waiting{k, c})
	}
	return holds, booked, line
}

// placeStateOf is the state of holds, booked and the line after the offers it owes
// (offer).
func placeStateOf(holds, booked map[string]int, line []waiting) placeState {
	line = offer(holds, booked, line)
	var h, b, l []string
	for _, k := range slices.Sorted(maps.Keys(holds)) {
		h = append(h, k+"="+fmt.Sprint(holds[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(booked)) {
		b = append(b, k+"="+fmt.Sprint(booked[k]))
	}
	for _, w := range line {
		l = append(l, w.entry+"="+fmt.Sprint(w.count))
	}
	return placeState(strings.Join(h, " ") + "|" + strings.Join(b, " ") + "|" + strings.Join(l, " "))
}

// offer makes the offers the free places owe the line: while an entry's count fits, the
// first that fits is held its places ("w:<entry>", in holds). It returns the line left.
func offer(holds, booked map[string]int, line []waiting) []waiting {
	line = slices.Clone(line)
	for {
		free := placesCap - sum(holds) - sum(booked)
		i := slices.IndexFunc(line, func(w waiting) bool { return w.count <= free })
		if i < 0 {
			return line
		}
		holds["w:"+line[i].entry] = line[i].count
		line = slices.Delete(line, i, i+1)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// placeStep is the model's step from state. The rest of a hold confirmed in part is
// given back after the booking commits and its sold markers are written (rest.lua), and
// left to expire when Redis fails then (restReply): until then the hold's place key
// counts its whole count beside the part sold ("~<token>"), which may end at any later
// step. So does an exchange's hold beside the booking's new count, and the booking's old
// count until its tombstone ("~<booking>" among the bookings): each step is tried from
// each subset of those given back.
func placeStep(state, input, output any) []any {
	var out []any
	for _, s := range restsGivenBack(state.(placeState)) {
		out = append(out, placeStepFrom(s, input.(placeIn), output.(placeOut))...)
	}
	return out
}

// restsGivenBack is s with every subset of its rests still counted given back.
func restsGivenBack(s placeState) []placeState {
	holds, booked, line := s.parse()
	type rest struct {
		held bool // among the holds, else among the bookings
		key  string
	}
	var rests []rest
	for k := range holds {
		if strings.HasPrefix(k, "~") {
			rests = append(rests, rest{true, k})
		}
	}
	for k := range booked {
		if strings.HasPrefix(k, "~") {
			rests = append(rests, rest{false, k})
		}
	}
	var out []placeState
	for mask := 0; mask < 1<<len(rests); mask++ {
		h, b := maps.Clone(holds), maps.Clone(booked)
		for i, r := range rests {
			switch {
			case mask&(1<<i) == 0:
			case r.held:
				delete(h, r.key)
			default:
				delete(b, r.key)
			}
		}
		out = append(out, placeStateOf(h, b, line))
	}
	return out
}

func placeStepFrom(s placeState, in placeIn, out placeOut) []any {
	holds, booked, line := s.parse()
	free := placesCap - sum(holds) - sum(booked)
	with := func(f func(h, b map[string]int)) placeState {
		h, b := maps.Clone(holds), maps.Clone(booked)
		f(h, b)
		return placeStateOf(h, b, line)
	}
	definite := func(ok, possible bool, next placeState) []any {
		switch {
		case out.unknown && possible:
			return []any{s, next}
		case out.unknown:
			return []any{s}
		case ok != possible:
			return nil // granted what it could not, or refused what it could
		case ok:
			return []any{next}
		}
		return []any{s}
	}
	owned := holds[in.token]
	if out.shed {
		return []any{s}
	}
	switch in.kind {
	case placeJoinOp:
		h, b := maps.Clone(holds), maps.Clone(booked)
		next := placeStateOf(h, b, append(slices.Clone(line), waiting{in.token, in.count}))
		offered := h["w:"+in.token] > 0
		switch {
		case out.unknown:
			return []any{s, next}
		case !out.ok || out.offered != offered:
			return nil // a join is never refused here; offered at once only when it fits
		}
		return []any{next}
	case placeReadOp:
		offered := holds["w:"+in.token] > 0
		inLine := slices.ContainsFunc(line, func(w waiting) bool { return w.entry == in.token })
		if out.unknown || out.ok && (offered && out.offered || inLine && !out.offered) {
			return []any{s}
		}
		return nil
	case placeHoldOp:
		name := out.token
		if out.unknown {
			name = "?" + in.token // the call's own name
		}
		return definite(out.ok, free >= in.count, with(func(h, _ map[string]int) { h[name] = in.count }))
	case placeReleaseOp:
		return definite(out.ok, owned > 0, with(func(h, _ map[string]int) { delete(h, in.token) }))
	case placeConfirmOp:
		part := cmp0(in.count, owned)
		name := out.booking
		if out.unknown {
			name = "?" + in.token
		}
		next := definite(out.ok, owned > 0, with(func(h, b map[string]int) { delete(h, in.token); b[name] = part }))
		if owned > part && len(next) > 0 {
			// Until rest.lua gives the rest back the hold's place key still counts whole
			// beside the part sold (placeStep).
			next = append(next, with(func(h, b map[string]int) { delete(h, in.token); b[name] = part; h["~"+in.token] = owned }))
		}
		return next
	case placeCancelOp:
		return definite(out.ok, booked[in.booking] > 0, with(func(_, b map[string]int) { delete(b, in.booking) }))
	case placeExchangeOp:
		had := booked[in.booking]
		after := func(h, b map[string]int) { delete(h, in.token); b[in.booking] = had - in.count + owned }
		next := definite(out.ok, owned > 0 && had > 0 && in.count <= had, with(after))
		if len(next) > 1 || (len(next) == 1 && next[0] != s) {
			// Until the tombstone of its old count and rest.lua for the hold's own key,
			// the area counts them beside the booking's new count (placeStep).
			next = append(next, with(func(h, b map[string]int) { after(h, b); h["~"+in.token] = owned; b["~"+in.booking] = had }))
		}
		return next
	}
	return nil
}

// cmp0 is part, or whole when part is 0.
func cmp0(part, whole int) int {
	if part == 0 {
		return whole
	}
	return part
}

var placeLinModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{placeStateOf(map[string]int{}, map[string]int{}, nil)} },
	Step: placeStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(placeIn), output.(placeOut)
		res := "refused (" + out.why + ")"
		switch {
		case out.unknown:
			res = "unknown"
		case out.ok:
			res = "ok " + short(out.token+out.booking)
			if out.offered {
				res += " offered"
			}
		}
		return fmt.Sprintf("%s(%d %s) -> %s", [...]string{"hold", "release", "confirm", "cancel", "exchange", "join", "read"}[in.kind], in.count, short(in.token)+"/"+short(in.booking), res)
	},
	DescribeState: func(state any) string { return string(state.(placeState)) },
}).ToModel()

// TestLinearizablePlaces records concurrent holds of places of one standing area,
// releases, confirmations of a whole hold or of part of it, and cancellations while
// Redis loses its script cache and freezes now and then, and checks the history with
// porcupine against the area's sequential model: no hold or sale past the capacity, no
// confirmation or release by another than the hold's owner, a part confirmed gives the
// rest back. Then the database's count of the area equals its claimed places.
func TestLinearizablePlaces(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, testLinearizablePlaces)
}

func testLinearizablePlaces(t *testing.T, savepoints bool) {
	calls := newScriptCalls()
	v, srv := privateEnv(t, func(c *Config) {
		c.ConfirmSavepoints = savepoints
		c.scriptsSeen = calls.track
	})
	if err := v.e.CreateShowVenue(t.Context(), "linp", Venue{Areas: []Area{{ID: "FLOOR", Capacity: placesCap}}}); err != nil {
		t.Fatal(err)
	}
	workers, perWorker := 6, 150
	if d := os.Getenv("HOLDFAST_CHAOS_SCALE"); d != "" {
		var k int
		fmt.Sscan(d, &k)
		perWorker *= max(1, k)
	}
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		t0      = time.Now()
	)
	call := func(client int, in placeIn, fn func(ctx context.Context) (placeOut, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer cancel()
		start := time.Now()
		out, err := fn(ctx)
		if err != nil {
			out.why = err.Error()
		}
		switch {
		case err == nil:
			out.ok = true
		case errors.Is(err, ErrUnavailable):
			out.unknown = true
		case errors.Is(err, ErrOverloaded):
			out.shed = true
		case errors.Is(err, ErrSeatsUnavailable), errors.Is(err, ErrHoldLost), errors.Is(err, ErrStaleGeneration), errors.Is(err, ErrNotFound):
		case in.kind == placeExchangeOp && errors.Is(err, ErrInvalidArgument): // its booking cancelled, or changed
		default:
			t.Errorf("unexpected error: %v", err)
			out.unknown = true
		}
		ret := time.Since(t0).Nanoseconds()
		if out.unknown {
			ret = settledBy(map[placeOp]opKind{placeHoldOp: opHold, placeReleaseOp: opRelease, placeConfirmOp: opConfirm, placeCancelOp: opCancel,
				placeExchangeOp: opConfirm, placeJoinOp: opHold, placeReadOp: opHold}[in.kind], v, calls, t0)
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: start.Sub(t0).Nanoseconds(), Return: ret})
		mu.Unlock()
	}

	stopFaults := redisFaults(v, srv, 50*time.Millisecond)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			var mine []Hold
			var booked []Booking
			var wl waitlister
			for op := range perWorker {
				r := rng.IntN(100)
				if r < 5 {
					wl.step(call, w, op, v.e, rng)
					continue
				}
				switch {
				case len(booked) > 0 && r < 20:
					i := rng.IntN(len(booked))
					b := booked[i]
					booked = slices.Delete(booked, i, i+1)
					call(w, placeIn{kind: placeCancelOp, booking: b.ID.String()}, func(ctx context.Context) (placeOut, error) {
						return placeOut{}, untilDefinite(v.e.Cancel(ctx, b.ID), func(ctx context.Context) error { return v.e.Cancel(ctx, b.ID) })
					})
				case len(mine) == 0 || r < 50:
					// Under an idempotency key, retried to a definite answer: a hold
					// whose outcome stayed unknown would take its places for the rest of
					// the run (its TTL), unknown to the client.
					n, key := 1+rng.IntN(3), uuid.NewString()
					call(w, placeIn{kind: placeHoldOp, count: n, token: key}, func(ctx context.Context) (placeOut, error) {
						req := HoldRequest{ShowID: "linp", TTL: time.Minute, HolderID: fmt.Sprint("w", w), IdempotencyKey: key,
							Places: []Places{{AreaID: "FLOOR", Count: n}}}
						h, err := v.e.Hold(ctx, req)
						err = untilDefinite(err, func(ctx context.Context) error {
							h, err = v.e.Hold(ctx, req)
							return err
						})
						if err == nil {
							mine = append(mine, h)
						}
						return placeOut{token: h.Token}, err
					})
				default:
					i := rng.IntN(len(mine))
					h := mine[i]
					if rng.IntN(5) != 0 { // else kept: a later call with it, confirmed or released, is refused
						mine = slices.Delete(mine, i, i+1)
					}
					if r < 70 {
						call(w, placeIn{kind: placeReleaseOp, token: h.Token}, func(ctx context.Context) (placeOut, error) {
							return placeOut{}, v.e.Release(ctx, h)
						})
						continue
					}
					// Exchanges in the first 150 operations of each worker only: each adds
					// two counts that Redis may hold on to (its tombstone and the hold's own
					// key), and a longer run of them outgrows the checker's two minutes.
					if len(booked) > 0 && r < 80 && op < 150 {
						j := rng.IntN(len(booked))
						exchangePlaces(call, w, v.e, h, &booked[j], rng)
						continue
					}
					part := 0
					if have := h.Places[0].Count; have > 1 && rng.IntN(2) == 0 {
						part = 1 + rng.IntN(have-1)
					}
					call(w, placeIn{kind: placeConfirmOp, token: h.Token, count: part}, func(ctx context.Context) (placeOut, error) {
						opts := ConfirmOptions{IdempotencyKey: uuid.NewString()}
						if part > 0 {
							opts.Places = []Places{{AreaID: "FLOOR", Count: part}}
						}
						b, err := v.e.Confirm(ctx, h, opts)
						err = untilDefinite(err, func(ctx context.Context) error {
							b, err = v.e.Confirm(ctx, h, opts)
							return err
						})
						if err == nil {
							booked = append(booked, b)
						}
						return placeOut{booking: b.ID.String()}, err
					})
				}
			}
		})
	}
	wg.Wait()
	stopFaults()

	counts := map[string]int{}
	for _, op := range history {
		out := op.Output.(placeOut)
		counts[fmt.Sprintf("%d/%v/%v", op.Input.(placeIn).kind, out.ok, out.unknown)]++
	}
	t.Logf("%d operations (kind/ok/unknown: %v), at most %d open at once", len(history), counts, widest(history))
	checking := time.Now()
	res, info := porcupine.CheckOperationsVerbose(placeLinModel, history, 2*time.Minute)
	t.Logf("checked in %v", time.Since(checking).Round(time.Millisecond))
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), "porcupine-places-"+uuid.NewString()[:8]+".html")
		if err := porcupine.VisualizePath(placeLinModel, info, path); err != nil {
			t.Logf("write visualization: %v", err)
		}
		t.Fatalf("history is not linearizable (%s); visualization: %s", res, path)
	}
	if sold := v.areaSold("linp", "FLOOR"); sold > placesCap {
		t.Fatalf("FLOOR sold %d of %d", sold, placesCap)
	}
}

// exchangePlaces exchanges some of booking b's places (0 to all of them) for hold h,
// under an idempotency key retried to a definite answer, as call's operation, and sets b
// to the booking it answers.
func exchangePlaces(call func(int, placeIn, func(context.Context) (placeOut, error)), w int, e *Engine, h Hold, b *Booking, rng *rand.Rand) {
	had := placesTotal(b.Places)
	give := rng.IntN(had + 1)
	id := b.ID
	call(w, placeIn{kind: placeExchangeOp, token: h.Token, booking: id.String(), count: give}, func(ctx context.Context) (placeOut, error) {
		var gp []Places
		if give > 0 {
			gp = []Places{{AreaID: "FLOOR", Count: give}}
		}
		opts := ConfirmOptions{IdempotencyKey: uuid.NewString()}
		after, err := e.Exchange(ctx, id, nil, gp, h, opts)
		err = untilDefinite(err, func(ctx context.Context) error {
			after, err = e.Exchange(ctx, id, nil, gp, h, opts)
			return err
		})
		if err == nil {
			*b = after
		}
		return placeOut{booking: id.String()}, err
	})
}

// waitlister is a worker's place on the area's waitlist: the entry it joined (a holder
// of its own, so that the holder's cap never passes an offer over) and its offer once
// read.
type waitlister struct {
	entry  string
	offer  *Hold
	booked []Booking // its offers' bookings, which it cancels in turn
}

// step takes the waitlister's next steps, each as call's operation: it cancels the
// booking of its last offer, if any; then, without an entry it joins for 1 to 3 places,
// else it reads its entry; and once offered it confirms the offer at once, or one time
// in three releases it (either way the entry ends).
func (q *waitlister) step(call func(int, placeIn, func(context.Context) (placeOut, error)), w, op int, e *Engine, rng *rand.Rand) {
	for _, b := range q.booked {
		call(w, placeIn{kind: placeCancelOp, booking: b.ID.String()}, func(ctx context.Context) (placeOut, error) {
			return placeOut{}, untilDefinite(e.Cancel(ctx, b.ID), func(ctx context.Context) error { return e.Cancel(ctx, b.ID) })
		})
	}
	q.booked = nil
	if q.entry == "" {
		q.entry = fmt.Sprintf("q%d-%d", w, op)
		req := WaitRequest{ShowID: "linp", HolderID: q.entry, Count: 1 + rng.IntN(3), OfferTTL: time.Minute}
		call(w, placeIn{kind: placeJoinOp, token: q.entry, count: req.Count}, func(ctx context.Context) (placeOut, error) {
			entry, err := e.JoinWaitlist(ctx, req)
			err = untilDefinite(err, func(ctx context.Context) error { // a join is idempotent
				entry, err = e.JoinWaitlist(ctx, req)
				return err
			})
			q.offer = entry.Offer
			return placeOut{offered: entry.Offer != nil}, err
		})
	} else {
		call(w, placeIn{kind: placeReadOp, token: q.entry}, func(ctx context.Context) (placeOut, error) {
			entry, err := e.WaitEntry(ctx, "linp", q.entry, "")
			q.offer = entry.Offer
			return placeOut{offered: entry.Offer != nil}, err
		})
	}
	if q.offer == nil {
		return
	}
	h := *q.offer
	q.entry, q.offer = "", nil
	if rng.IntN(3) == 0 {
		call(w, placeIn{kind: placeReleaseOp, token: "w:" + h.HolderID}, func(ctx context.Context) (placeOut, error) {
			return placeOut{}, e.Release(ctx, h)
		})
		return
	}
	call(w, placeIn{kind: placeConfirmOp, token: "w:" + h.HolderID}, func(ctx context.Context) (placeOut, error) {
		opts := ConfirmOptions{IdempotencyKey: uuid.NewString()}
		b, err := e.Confirm(ctx, h, opts)
		err = untilDefinite(err, func(ctx context.Context) error {
			b, err = e.Confirm(ctx, h, opts)
			return err
		})
		if err == nil {
			q.booked = append(q.booked, b)
		}
		return placeOut{booking: b.ID.String()}, err
	})
}
