package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// xlenCounter counts the XLEN commands a client sends, alone or in pipelines.
type xlenCounter struct{ n atomic.Int64 }

func (c *xlenCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *xlenCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "xlen") {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *xlenCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if strings.EqualFold(cmd.Name(), "xlen") {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestSweepCostsTheShowsThatMayHaveMoves: with no move pending, a sweep (every engine
// runs one every 2 s) reads the streams of the shows a call may have left moves of, not
// of every show ever created: 5,000 past shows cost it no XLEN.
func TestSweepCostsTheShowsThatMayHaveMoves(t *testing.T) {
	t.Parallel()
	rdb := testsvc.Redis(t)
	var xlen xlenCounter
	rdb.AddHook(&xlen)
	v := newEnvWith(t, testsvc.Database(t), rdb)
	ctx := t.Context()
	const shows = 5000 // past shows: no hold, no move, nothing pending
	if _, err := v.pool.Exec(ctx, `INSERT INTO shows (show_id) SELECT 'past-' || g FROM generate_series(1, $1::int) g`, shows); err != nil {
		t.Fatal(err)
	}
	before := xlen.n.Load()
	start := time.Now()
	if err := v.e.sweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n := xlen.n.Load() - before; n > 100 {
		t.Fatalf("one sweep with no move pending sent %d XLENs for %d shows (took %v); every engine repeats it every %v",
			n, shows, took, moveSweepEvery)
	}
}

// TestSweepGoesOnPastOneBadShow: a show whose stream of moves cannot be read (here a
// WRONGTYPE key; on a Cluster, one master down or a slot migrating) does not stop the
// sweep: the pending move of a healthy show, left by a dead engine, is relayed.
func TestSweepGoesOnPastOneBadShow(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ctx := t.Context()
	v.show("a-bad", "A1")
	v.show("b-good", "A1")
	// a-bad's moves key is unreadable as a stream (stand-in for a node that fails).
	if err := v.rdb.Set(ctx, newKeys(v.cfg.KeyPrefix, "a-bad").moves(), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := v.rdb.SAdd(ctx, v.e.movesKey(), "a-bad").Err(); err != nil { // as a move of it would
		t.Fatal(err)
	}
	dying := v.twin()
	dying.hooks.beforeRelay = func(context.Context) bool { return false }
	h := v.hold("b-good", time.Minute, "alice", "A1")
	if _, err := dying.Transfer(ctx, h, "bob"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("transfer on the dying engine: %v", err)
	}
	dying.Close()
	err := v.e.sweepOnce(ctx)
	if v.holdEventRows("b-good") != 1 {
		t.Fatalf("the sweep left b-good's move pending because of a-bad (sweep: %v); %d pending, %d events",
			err, v.movesPending("b-good"), v.holdEventRows("b-good"))
	}
}

// TestPlaceBookingEventOnTheWire: a booking of places only, as the feed writes it on the
// wire (GET /v1/events, holdfast events, the webhooks' data), says its places.
func TestPlaceBookingEventOnTheWire(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	show := "evp-" + testsvc.RandomName("s")
	v.areaVenue(show, 10)
	v.bookPlaces(show, "ann", 3)
	evs, _, err := v.e.Events(t.Context(), "", MaxEventsPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.ShowID != show || ev.Kind != EventConfirmed {
			continue
		}
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var j struct {
			Booking map[string]json.RawMessage `json:"booking"`
		}
		if err := json.Unmarshal(data, &j); err != nil {
			t.Fatal(err)
		}
		var seats []string
		_ = json.Unmarshal(j.Booking["seats"], &seats)
		_, places := j.Booking["places"]
		if len(seats) == 0 && !places {
			t.Fatalf("a booking of 3 places on the wire: %s (Event.Booking.Places %v lost; seats [] breaks SeatIDs minItems 1)",
				data, ev.Booking.Places)
		}
		return
	}
	t.Fatalf("no confirmed event of %s in %+v", show, evs)
}
