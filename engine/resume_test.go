package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// mapClient is a seat-map watcher's own copy of the map, built from the events it got,
// with the feed position of the last one (what it resumes from).
type mapClient struct {
	states []SeatStatus
	pos    uint64
}

func (c *mapClient) apply(ev SeatMapEvent) {
	if ev.Snapshot != nil {
		c.states = slices.Clone(ev.Snapshot.States)
	}
	for _, ch := range ev.Changes {
		c.states[ch.Index] = ch.Status
	}
	c.pos = ev.Position
}

// until applies the events of ch until cond holds, failing after 10 s.
func (c *mapClient) until(t *testing.T, ch <-chan SeatMapEvent, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			c.apply(ev)
		case <-deadline:
			t.Fatalf("%s: not after 10 s", what)
		}
	}
}

// mapSays waits until e's seat map shows seat in state st.
func mapSays(t *testing.T, e *Engine, show, seat string, st SeatStatus) {
	t.Helper()
	waitFor(t, "the map of "+show+" shows "+seat+" "+string(st), 10*time.Second, func() bool {
		m, err := e.SeatMap(t.Context(), show)
		return err == nil && m.States[indexOf(m, seat)] == st
	})
}

// TestResumeOnAnotherReplicaHasTheExpiries: a client watches a show's seat map on
// replica A and leaves at feed position P with S000 held; the hold expires while it is
// away; it resumes on replica B (the same Redis and database) from P. The first event B
// sends (in the channel when the watch begins) must leave S000 free in the client's
// map, whatever position B applied the expiry at:
//   - B was a feed read behind when it applied the expiry (at a position before P), and
//     has caught up when the client resumes;
//   - B is still behind P when the client resumes;
//   - A's clock runs late: B applied the expiry before entry P was written, and A
//     published P with S000 still held.
func TestResumeOnAnotherReplicaHasTheExpiries(t *testing.T) {
	t.Parallel()
	for _, tc := range []string{"caught up", "still behind", "late clock"} {
		t.Run(tc, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t)
			var paused sync.Mutex
			resume := func() {}
			b := v.twin()
			b.hooks.beforeFeedRead = func(context.Context, string) { paused.Lock(); paused.Unlock() }
			seats := seatNames(10)
			v.show("rs", seats...)
			// Both replicas follow the show (B for a stream of its own).
			bctx, bcancel := context.WithCancel(t.Context())
			defer bcancel()
			bw, err := b.WatchSeatMap(bctx, "rs", 0)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for range bw {
				}
			}()
			cctx, leave := context.WithCancel(t.Context())
			defer leave()
			ch, err := v.e.WatchSeatMap(cctx, "rs", 0)
			if err != nil {
				t.Fatal(err)
			}
			var c mapClient
			c.apply(<-ch)

			ttl := 5 * time.Second
			if tc == "late clock" {
				ttl = 300 * time.Millisecond
				v.e.views.mu.RLock()
				av := v.e.views.m["rs"]
				v.e.views.mu.RUnlock()
				av.mu.Lock()
				av.offset -= 60_000 // A's idea of Redis's clock: a minute late
				av.mu.Unlock()
			}
			h0 := v.hold("rs", ttl, "", "S000")
			c.until(t, ch, "the client sees S000 held", func() bool { return c.states[0] == SeatHeld })
			if tc != "late clock" {
				mapSays(t, b, "rs", "S000", SeatHeld)
			}

			if tc == "late clock" {
				// B applies the expiry by its clock, before entry P exists.
				waitExpired(t, v, h0)
				mapSays(t, b, "rs", "S000", SeatFree)
			} else {
				// B reads the feed once more (S009), then no more.
				paused.Lock()
				unpause := sync.OnceFunc(paused.Unlock)
				t.Cleanup(unpause) // before B closes
				resume = unpause
				v.hold("rs", time.Minute, "", "S009")
				mapSays(t, b, "rs", "S009", SeatHeld)
			}
			v.hold("rs", time.Minute, "", "S001") // entry P
			c.until(t, ch, "the client sees S001 held", func() bool { return c.states[1] == SeatHeld })
			leave()
			if tc != "late clock" && c.states[0] != SeatHeld {
				t.Fatalf("the client saw S000 expire before it left at position %d: the case is not made", c.pos)
			}
			if tc != "late clock" {
				waitExpired(t, v, h0)
				mapSays(t, b, "rs", "S000", SeatFree) // B applied the expiry behind P
				if tc == "caught up" {
					resume()
					mapSays(t, b, "rs", "S001", SeatHeld)
				}
			}

			rctx, rcancel := context.WithCancel(t.Context())
			defer rcancel()
			rch, err := b.WatchSeatMapFrom(rctx, "rs", c.pos)
			if err != nil {
				t.Fatal(err)
			}
			// The first event is in the channel when the watch begins: none at all means
			// the client's map is this replica's already.
			select {
			case ev := <-rch:
				c.apply(ev)
				if tc == "caught up" && ev.Snapshot != nil {
					t.Errorf("a resume on a replica that followed the show throughout began with a snapshot, want changes")
				}
				if c.states[0] != SeatFree {
					t.Errorf("the first event on replica B (snapshot %v, changes %v) leaves S000 %s; it expired while the client was away",
						ev.Snapshot != nil, ev.Changes, c.states[0])
				}
			default:
				if c.states[0] != SeatFree {
					t.Errorf("replica B sent no first event; the client has S000 %s, which expired while it was away", c.states[0])
				}
			}
			if tc == "still behind" {
				resume()
			}
			c.until(t, rch, "the client's map equals B's", func() bool {
				m, err := b.SeatMap(t.Context(), "rs")
				return err == nil && slices.Equal(m.States, c.states)
			})
		})
	}
}

// waitExpired waits until Redis no longer has h's hold.
func waitExpired(t *testing.T, v *env, h Hold) {
	t.Helper()
	sh, err := v.e.show(t.Context(), h.ShowID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hold expires", time.Until(h.ExpiresAt)+10*time.Second, func() bool {
		return v.rdb.PTTL(t.Context(), sh.holdKeys[h.SeatIDs[0]]).Val() == -2
	})
}
