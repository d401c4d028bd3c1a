package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// The sequential model of one seat that every history must be explainable by:
// free -> held(token, generation) -> sold(booking) -> free on cancel, where a grant needs
// a generation larger than every earlier one and only the owner may release or confirm.

type opKind int

const (
	opHold opKind = iota
	opRelease
	opConfirm
	opCancel
)

type linInput struct {
	kind    opKind
	seat    string
	token   string
	gen     int64
	booking string
}

type linOutput struct {
	ok      bool
	unknown bool // the call failed with ErrUnavailable: it may or may not have happened
	token   string
	gen     int64
	booking string
}

type seatModel struct {
	status  byte // 'f' free, 'h' held, 's' sold
	token   string
	gen     int64
	booking string
	lastGen int64 // largest generation granted or confirmed on this seat
	fence   int64
}

const unknownID = "?"

func linStep(state, input, output any) []any {
	s, in, out := state.(seatModel), input.(linInput), output.(linOutput)
	owned := s.status == 'h' && (s.token == in.token && s.gen == in.gen)
	switch in.kind {
	case opHold:
		switch {
		case out.unknown:
			if s.status != 'f' {
				return []any{s}
			}
			n := s
			n.status, n.token, n.gen = 'h', unknownID, 0
			return []any{s, n}
		case out.ok:
			if s.status != 'f' || out.gen <= s.lastGen {
				return nil
			}
			n := s
			n.status, n.token, n.gen, n.lastGen = 'h', out.token, out.gen, out.gen
			return []any{n}
		default:
			if s.status == 'f' {
				return nil
			}
			return []any{s}
		}
	case opRelease:
		freed := s
		freed.status, freed.token, freed.gen = 'f', "", 0
		switch {
		case out.unknown:
			if owned {
				return []any{s, freed}
			}
			return []any{s}
		case out.ok:
			if !owned {
				return nil
			}
			return []any{freed}
		default:
			if owned {
				return nil
			}
			return []any{s}
		}
	case opConfirm:
		sold := func(booking string, gen int64) seatModel {
			n := s
			n.status, n.token, n.booking, n.fence = 's', "", booking, gen
			n.lastGen = max(n.lastGen, gen)
			return n
		}
		switch {
		case out.unknown:
			if owned {
				return []any{s, sold(unknownID, in.gen)}
			}
			return []any{s}
		case out.ok:
			if !owned || out.gen < in.gen || out.gen <= s.fence {
				return nil
			}
			return []any{sold(out.booking, out.gen)}
		default:
			if owned {
				return nil
			}
			return []any{s}
		}
	case opCancel:
		mine := s.status == 's' && (s.booking == in.booking || s.booking == unknownID)
		freed := s
		freed.status, freed.booking = 'f', ""
		switch {
		case out.unknown:
			if mine {
				return []any{s, freed}
			}
			return []any{s}
		case out.ok:
			if !mine {
				return nil
			}
			return []any{freed}
		default:
			return []any{s}
		}
	}
	return nil
}

var seatLinModel = (&porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			seat := op.Input.(linInput).seat
			by[seat] = append(by[seat], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []any { return []any{seatModel{status: 'f'}} },
	Step: linStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		name := [...]string{"hold", "release", "confirm", "cancel"}[in.kind]
		res := "refused"
		switch {
		case out.unknown:
			res = "unknown"
		case out.ok:
			res = fmt.Sprintf("ok gen=%d %s", out.gen, short(out.booking))
		}
		return fmt.Sprintf("%s(%s %s g%d) -> %s", name, in.seat, short(in.token+in.booking), in.gen, res)
	},
	DescribeState: func(state any) string {
		s := state.(seatModel)
		return fmt.Sprintf("%c %s g%d fence=%d last=%d", s.status, short(s.token+s.booking), s.gen, s.fence, s.lastGen)
	},
}).ToModel()

func short(s string) string {
	if len(s) > 6 {
		return s[:6]
	}
	return s
}

// TestLinearizableUnderFaults records a history of concurrent holds, releases,
// confirmations and cancellations on a few seats while Redis loses its script cache and
// freezes now and then (calls time out: outcomes unknown), and checks it with porcupine;
// with batches deciding their confirmations and with savepoints. Now and then a worker
// confirms and releases one hold at the same moment while someone else tries to hold
// its seat: release-during-confirm and hold-during-confirm. A call that answers
// ErrUnavailable is retried to a definite answer where the API makes that safe (a
// confirmation under its idempotency key, a cancellation); otherwise its outcome stays
// unknown, bounded by the latest time it can take effect (settledBy).
func TestLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	forEachIsolation(t, testLinearizableUnderFaults)
}

func testLinearizableUnderFaults(t *testing.T, savepoints bool) {
	calls := newScriptCalls()
	v, srv := privateEnv(t, func(c *Config) {
		c.ConfirmSavepoints = savepoints
		c.scriptsSeen = calls.track
	})
	seats := []string{"L1", "L2", "L3", "L4"}
	v.show("lin", seats...)
	workers, perWorker := 8, 300
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
	record := func(client int, in linInput, out linOutput, call time.Time) {
		ret := time.Since(t0).Nanoseconds()
		if out.unknown {
			ret = settledBy(in.kind, v, calls, t0)
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call.Sub(t0).Nanoseconds(), Return: ret})
		mu.Unlock()
	}
	classify := func(err error) (ok, unknown bool) {
		switch {
		case err == nil:
			return true, false
		case errors.Is(err, ErrUnavailable):
			return false, true
		case errors.Is(err, ErrSeatsUnavailable), errors.Is(err, ErrHoldLost), errors.Is(err, ErrStaleGeneration), errors.Is(err, ErrNotFound),
			errors.Is(err, ErrOverloaded): // refused before anything was written
			return false, false
		default:
			t.Errorf("unexpected error: %v", err)
			return false, true
		}
	}

	stopFaults := redisFaults(v, srv, 40*time.Millisecond)

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []Hold      // holds this worker believes it has
			var booked []Booking // bookings this worker made
			// callAs records one call as client (each concurrent call of a worker
			// has a client of its own).
			callAs := func(client int, in linInput, fn func(ctx context.Context) (linOutput, error)) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
				defer cancel()
				start := time.Now()
				out, err := fn(ctx)
				out.ok, out.unknown = classify(err)
				record(client, in, out, start)
			}
			call := func(in linInput, fn func(ctx context.Context) (linOutput, error)) { callAs(w, in, fn) }
			live := -1 // index in mine of the hold this worker still has, if any
			for range perWorker {
				seat := seats[rng.IntN(len(seats))]
				r := rng.IntN(100)
				switch {
				case len(booked) > 0 && r < 25:
					i := rng.IntN(len(booked))
					b := booked[i]
					booked = append(booked[:i], booked[i+1:]...)
					// A client retries a cancellation that answered ErrUnavailable (the
					// booking may be cancelled, its seat still marked sold): one logical
					// operation from the first call to a definite answer. Without the
					// retry the background marker repair frees the seat at some later
					// time, which the checker would have to place among thousands of
					// operations.
					call(linInput{kind: opCancel, seat: b.SeatIDs[0], booking: b.ID.String()}, func(ctx context.Context) (linOutput, error) {
						return linOutput{}, untilDefinite(v.e.Cancel(ctx, b.ID), func(ctx context.Context) error { return v.e.Cancel(ctx, b.ID) })
					})
				case live < 0 && r < 90 || len(mine) == 0:
					call(linInput{kind: opHold, seat: seat}, func(ctx context.Context) (linOutput, error) {
						h, err := v.e.Hold(ctx, HoldRequest{ShowID: "lin", SeatIDs: []string{seat}, TTL: time.Minute})
						if err == nil {
							mine = append(mine, h)
							live = len(mine) - 1
						}
						return linOutput{token: h.Token, gen: h.Generation}, err
					})
				case live >= 0 && r >= 80 && r < 86:
					// Confirm and release the live hold at once, while another
					// client tries to hold its seat.
					h := mine[live]
					live = -1
					var b Booking
					var other Hold
					var otherErr error
					var race sync.WaitGroup
					race.Go(func() {
						callAs(workers+3*w, linInput{kind: opConfirm, seat: h.SeatIDs[0], token: h.Token, gen: h.Generation}, func(ctx context.Context) (linOutput, error) {
							var err error
							b, err = confirmUntilDefinite(ctx, v.e, h)
							return linOutput{booking: b.ID.String(), gen: b.Generation}, err
						})
					})
					race.Go(func() {
						callAs(workers+3*w+1, linInput{kind: opRelease, seat: h.SeatIDs[0], token: h.Token, gen: h.Generation}, func(ctx context.Context) (linOutput, error) {
							return linOutput{}, v.e.Release(ctx, h)
						})
					})
					race.Go(func() {
						callAs(workers+3*w+2, linInput{kind: opHold, seat: h.SeatIDs[0]}, func(ctx context.Context) (linOutput, error) {
							other, otherErr = v.e.Hold(ctx, HoldRequest{ShowID: "lin", SeatIDs: h.SeatIDs, TTL: time.Minute})
							return linOutput{token: other.Token, gen: other.Generation}, otherErr
						})
					})
					race.Wait()
					if b.ID != uuid.Nil {
						booked = append(booked, b)
					}
					if otherErr == nil {
						mine = append(mine, other)
					}
				default:
					i := live
					if i < 0 || r >= 90 {
						i = rng.IntN(len(mine)) // now and then an old hold: it must be refused
					}
					h := mine[i]
					if i == live {
						live = -1
					}
					if rng.IntN(3) == 0 {
						call(linInput{kind: opRelease, seat: h.SeatIDs[0], token: h.Token, gen: h.Generation}, func(ctx context.Context) (linOutput, error) {
							return linOutput{}, v.e.Release(ctx, h)
						})
					} else {
						call(linInput{kind: opConfirm, seat: h.SeatIDs[0], token: h.Token, gen: h.Generation}, func(ctx context.Context) (linOutput, error) {
							b, err := confirmUntilDefinite(ctx, v.e, h)
							if err == nil {
								booked = append(booked, b)
							}
							return linOutput{booking: b.ID.String(), gen: b.Generation}, err
						})
					}
				}
			}
		})
	}
	wg.Wait()
	stopFaults()

	counts := map[string]int{}
	for _, op := range history {
		out := op.Output.(linOutput)
		counts[fmt.Sprintf("%d/%v/%v", op.Input.(linInput).kind, out.ok, out.unknown)]++
	}
	t.Logf("%d operations (kind/ok/unknown: %v), at most %d open at once", len(history), counts, widest(history))
	if len(history) < 1000 {
		t.Fatalf("only %d operations recorded", len(history))
	}
	checking := time.Now()
	res, info := porcupine.CheckOperationsVerbose(seatLinModel, history, 2*time.Minute)
	t.Logf("checked in %v", time.Since(checking).Round(time.Millisecond))
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), "porcupine-"+uuid.NewString()[:8]+".html")
		if err := porcupine.VisualizePath(seatLinModel, info, path); err != nil {
			t.Logf("write visualization: %v", err)
		}
		t.Fatalf("history is not linearizable (%s); visualization: %s", res, path)
	}
	if v.doubleBookings() != 0 {
		t.Fatal("double booking")
	}
}

// redisFaults injects the checks' faults into srv until the function it returns is
// called: every gap, a loss of the scripts' function library (FUNCTION FLUSH), and
// every third time instead a 120 ms freeze (calls time out: outcomes unknown). Once
// stopped, srv runs.
func redisFaults(v *env, srv *testsvc.RedisServer, gap time.Duration) (stop func()) {
	done := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(gap):
			}
			if i%3 == 0 {
				srv.Pause()
				time.Sleep(120 * time.Millisecond)
				srv.Resume()
			} else {
				v.rdb.FunctionFlush(context.Background())
			}
		}
	})
	return func() {
		close(done)
		faults.Wait()
		srv.Resume()
	}
}

// untilDefinite retries a call that answered ErrUnavailable (its outcome unknown) until
// it answers something else, at most 20 times with a longer deadline each time (60 ms
// up to 500 ms): a client's retry of an idempotent write, one logical operation from
// the first call to its definite answer. It returns the last answer, ErrUnavailable if
// every retry was unavailable too.
func untilDefinite(err error, retry func(ctx context.Context) error) error {
	for attempt := range 20 {
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(time.Duration(attempt+1)*60*time.Millisecond, 500*time.Millisecond))
		err = retry(ctx)
		cancel()
	}
	return err
}

// confirmUntilDefinite confirms h under an idempotency key and retries an unknown
// outcome with the same key (untilDefinite): a retry of a confirmation that committed
// returns its booking, so the answer is definite unless Redis or PostgreSQL stayed
// unreachable through every retry.
func confirmUntilDefinite(ctx context.Context, e *Engine, h Hold) (Booking, error) {
	opts := ConfirmOptions{IdempotencyKey: uuid.NewString()}
	b, err := e.Confirm(ctx, h, opts)
	err = untilDefinite(err, func(ctx context.Context) error {
		b, err = e.Confirm(ctx, h, opts)
		return err
	})
	return b, err
}

// settledBy is when (nanoseconds since t0) an operation of this kind whose outcome is
// unknown has taken effect if it ever will, as far as the history can tell. A hold or a
// release changes a seat only by the engine's script calls it started before it
// returned; the engine answers its caller at the caller's deadline while such a call
// may go on (boundedScripter), and the autopipeliner may even send it later. So the
// bound waits until every script call started so far has ended (calls), then for the
// first answer of a PING sent after that: Redis runs every command it has read before it
// writes any reply of that event-loop pass, so by then a script sent by a call that
// ended has run or never will. A confirmation or a cancellation that stayed unknown
// through its retries also involves PostgreSQL and the engine's background settlement:
// it may take effect at any later time.
func settledBy(kind opKind, v *env, calls *scriptCalls, t0 time.Time) int64 {
	if kind == opConfirm || kind == opCancel {
		return math.MaxInt64
	}
	afterScripts(calls, func(ctx context.Context) error { return v.rdb.Ping(ctx).Err() })
	return time.Since(t0).Nanoseconds()
}

// afterScripts returns once every script call started so far has ended and then a
// barrier command sent after that has answered (tried again until it does).
func afterScripts(calls *scriptCalls, barrier func(ctx context.Context) error) {
	calls.waitEnded()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := barrier(ctx)
		cancel()
		if err == nil {
			return
		}
	}
}

// scriptCalls is the engine's script calls (Config.scriptsSeen), seen from below their
// bound: which have started and not yet ended. Calls are numbered in the order they
// start.
type scriptCalls struct {
	mu      sync.Mutex
	ended   sync.Cond // signalled whenever a call ends
	next    int64
	pending map[int64]bool
}

func newScriptCalls() *scriptCalls {
	c := &scriptCalls{pending: map[int64]bool{}}
	c.ended.L = &c.mu
	return c
}

// track records a call's start; the function it returns records its end, once its
// reply has been read.
func (c *scriptCalls) track() func(*redis.Cmd) {
	c.mu.Lock()
	id := c.next
	c.next++
	c.pending[id] = true
	c.mu.Unlock()
	return func(*redis.Cmd) {
		c.mu.Lock()
		delete(c.pending, id)
		c.ended.Broadcast()
		c.mu.Unlock()
	}
}

// started is how many calls have started.
func (c *scriptCalls) started() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

// waitEnded returns once every call started so far has ended.
func (c *scriptCalls) waitEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for upTo := c.next; ; c.ended.Wait() {
		open := false
		for id := range c.pending {
			open = open || id < upTo
		}
		if !open {
			return
		}
	}
}

// widest is the largest number of operations of the history open at one moment: the
// checker's search grows exponentially with it, so every unknown outcome gets the
// tightest return time the test can justify (settledBy), not "any later time".
func widest(history []porcupine.Operation) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, op := range history {
		edges = append(edges, edge{op.Call, 1}, edge{op.Return, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	open, most := 0, 0
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	return most
}

// TestUnknownHoldsSettleByTheirBound: the return time settledBy gives a hold whose
// outcome is unknown is a bound (the check's verdicts rest on it). Redis freezes while a
// dozen holds time out, several queued in the autopipeliner behind the calls already
// sent; it thaws. The barrier is an INCR of the show's generation counter: a hold
// granted after it would have a larger generation.
func TestUnknownHoldsSettleByTheirBound(t *testing.T) {
	t.Parallel()
	calls := newScriptCalls()
	v, srv := privateEnv(t, func(c *Config) { c.scriptsSeen = calls.track })
	seats := make([]string, 12)
	for i := range seats {
		seats[i] = fmt.Sprintf("S%02d", i)
	}
	v.show("settle", seats...)
	if err := v.e.Release(t.Context(), v.hold("settle", time.Minute, "", seats[0])); err != nil {
		t.Fatal(err) // the scripts are loaded, the connections open
	}
	srv.Pause()
	var holds sync.WaitGroup
	for i, s := range seats {
		if i == len(seats)/2 {
			time.Sleep(15 * time.Millisecond)
		}
		holds.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
			defer cancel()
			if _, err := v.e.Hold(ctx, HoldRequest{ShowID: "settle", SeatIDs: []string{s}, TTL: time.Minute}); !errors.Is(err, ErrUnavailable) {
				t.Errorf("hold of %s while Redis is frozen: %v, want ErrUnavailable", s, err)
			}
		})
	}
	holds.Wait()
	go func() {
		time.Sleep(50 * time.Millisecond)
		srv.Resume()
	}()
	var bound int64
	afterScripts(calls, func(ctx context.Context) (err error) {
		bound, err = v.rdb.Incr(ctx, newKeys(v.cfg.KeyPrefix, "settle").gen()).Result()
		return err
	})
	time.Sleep(500 * time.Millisecond)
	granted := 0
	for _, s := range seats {
		value := v.holdValue("settle", s) // token:generation:granted at:tag
		if value == "" {
			continue
		}
		granted++
		var gen int64
		if f := strings.Split(value, ":"); len(f) < 2 {
			t.Fatalf("hold value %q", value)
		} else if gen, _ = strconv.ParseInt(f[1], 10, 64); gen > bound {
			t.Errorf("the unknown hold of %s took effect after its bound (generation %d, the barrier's %d)", s, gen, bound)
		}
	}
	if granted == 0 {
		t.Fatal("no unknown hold took effect after the thaw: the bound was not put to the test")
	}
	t.Logf("%d of %d unknown holds took effect", granted, len(seats))
}
