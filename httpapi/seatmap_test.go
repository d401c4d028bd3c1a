package httpapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestCompactSeatMap: a large show's map is compact by default (a byte per seat, in
// layout order), revalidates with 304 until a seat changes, and is gzipped when asked;
// the per-seat form stays available.
func TestCompactSeatMap(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	ids := seats(20_000)
	a.want(a.do("PUT", "/v1/shows/big", "", "", map[string]any{"seats": ids}), 201, "")
	// The first read builds the show's view from the backends; on a loaded machine that
	// can pass the request's bound (503 backend-unavailable, "retry later"): retry, as a
	// client would.
	r := a.do("GET", "/v1/shows/big/seats", "", "", nil)
	for start := time.Now(); r.status == 503 && r.body["type"] == problemPrefix+"backend-unavailable" && time.Since(start) < 30*time.Second; {
		time.Sleep(100 * time.Millisecond)
		r = a.do("GET", "/v1/shows/big/seats", "", "", nil)
	}
	a.want(r, 200, "")
	if len(r.raw) > 64<<10 || r.body["format"] != "compact" {
		t.Fatalf("20,000-seat map: %d bytes, format %v", len(r.raw), r.body["format"])
	}
	states, _ := r.body["states"].(string)
	if len(states) != 20_000 || strings.Trim(states, "f") != "" {
		t.Fatalf("states of an empty show: %d chars, not all free", len(states))
	}
	etag := r.header.Get("ETag")
	if etag == "" || r.header.Get("Holdfast-Stale") != "false" || r.header.Get("Holdfast-As-Of") == "" {
		t.Fatalf("headers %v", r.header)
	}
	revalidate := http.Header{"If-None-Match": {etag}}
	a.want(a.doHeaders("GET", "/v1/shows/big/seats", revalidate, nil), 304, "")

	// A hold changes the map: 200 with a new ETag, the held seats 'h' at their index
	// in the layout.
	a.want(a.do("POST", "/v1/shows/big/holds", "alice", "", map[string]any{"seats": []string{ids[7], ids[19_999]}}), 201, "")
	r = a.doHeaders("GET", "/v1/shows/big/seats", revalidate, nil)
	a.want(r, 200, "")
	states, _ = r.body["states"].(string)
	at := a.layoutIndex("big")
	if states[at[ids[7]]] != 'h' || states[at[ids[19_999]]] != 'h' || strings.Count(states, "h") != 2 || r.header.Get("ETag") == etag {
		t.Fatalf("after a hold: %d held, etag %s (was %s)", strings.Count(states, "h"), r.header.Get("ETag"), etag)
	}

	// gzip when asked: the same document, smaller.
	req, _ := http.NewRequest("GET", a.srv.URL+"/v1/shows/big/seats", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	zipped, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if string(plain) != r.raw || len(zipped) >= len(plain)/4 {
		t.Fatalf("gzip: %d bytes for %d, or not the same document", len(zipped), len(plain))
	}
	t.Logf("20,000 seats: %d bytes compact, %d gzipped", len(plain), len(zipped))

	// Per seat, when asked; small shows get it by default.
	r = a.do("GET", "/v1/shows/big/seats?format=json", "", "", nil)
	a.want(r, 200, "")
	if list, _ := r.body["seats"].([]any); len(list) != 20_000 {
		t.Fatalf("per-seat form has %d seats", len(list))
	}
	a.want(a.do("PUT", "/v1/shows/small", "", "", map[string]any{"seats": seats(3)}), 201, "")
	r = a.do("GET", "/v1/shows/small/seats", "", "", nil)
	if r.body["format"] != "json" {
		t.Fatalf("small show format %v", r.body["format"])
	}
	a.want(a.do("GET", "/v1/shows/big/seats?format=xml", "", "", nil), 400, "invalid-argument")
	a.want(a.do("GET", "/v1/shows/nope/seats?format=compact", "", "", nil), 404, "not-found")
}

// layoutIndex maps each seat of a show to its index in the layout.
func (a *api) layoutIndex(show string) map[string]int {
	a.t.Helper()
	r := a.do("GET", "/v1/shows/"+show+"/layout", "", "", nil)
	a.want(r, 200, "")
	out := map[string]int{}
	for i, s := range r.body["seats"].([]any) {
		out[s.(map[string]any)["id"].(string)] = i
	}
	return out
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event string
	data      map[string]any
}

// sseStream reads events from an open stream.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
	beats  chan struct{}
	cancel context.CancelFunc
}

// openEvents opens the show's event stream with the given Last-Event-ID (if any).
func (a *api) openEvents(show, lastID string) (*sseStream, *http.Response) {
	a.t.Helper()
	h := http.Header{}
	if lastID != "" {
		h.Set("Last-Event-ID", lastID)
	}
	return a.openSSE("/v1/shows/"+show+"/events", h)
}

// openSSE opens the event stream at path with the request headers h.
func (a *api) openSSE(path string, h http.Header) (*sseStream, *http.Response) {
	a.t.Helper()
	ctx, cancel := context.WithCancel(a.t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", a.srv.URL+path, nil)
	req.Header = h
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		return nil, resp
	}
	s := &sseStream{t: a.t, resp: resp, events: make(chan sseEvent, 1000), beats: make(chan struct{}, 100), cancel: cancel}
	a.t.Cleanup(s.close)
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				select {
				case s.beats <- struct{}{}:
				default:
				}
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
			}
		}
	}()
	return s, resp
}

// waitStreams waits until the server has n event streams open.
func (a *api) waitStreams(n int64) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for int64(a.s.streams.open()) != n {
		if time.Now().After(deadline) {
			a.t.Fatalf("%d event streams open, want %d", int64(a.s.streams.open()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

func (s *sseStream) next(within time.Duration) sseEvent {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(within):
		s.t.Fatalf("no event within %v", within)
	}
	return sseEvent{}
}

// changed reads events until one says the seat at layout index i is in state (f, h,
// s), within 1 s.
func (s *sseStream) changed(i int, state string) sseEvent {
	s.t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		ev := s.next(time.Until(deadline))
		changes, _ := ev.data["changes"].([]any)
		for _, c := range changes {
			m, _ := c.(map[string]any)
			if m["i"] == float64(i) && m["s"] == state {
				if state == "h" && m["x"] == nil {
					s.t.Fatalf("a held change without its expiry: %v", m)
				}
				return ev
			}
		}
	}
}

// TestSeatEvents: the event stream starts with a snapshot, delivers changes, resumes
// after Last-Event-ID with what was missed, starts over from a snapshot for an id it
// cannot resume, refuses a malformed id, beats, and caps open streams.
func TestSeatEvents(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{Heartbeat: 100 * time.Millisecond, MaxStreams: 2})
	a.want(a.do("PUT", "/v1/shows/ev", "", "", map[string]any{"seats": seats(10)}), 201, "")
	s, _ := a.openEvents("ev", "")
	first := s.next(5 * time.Second)
	if first.event != "snapshot" || first.data["states"] != strings.Repeat("f", 10) {
		t.Fatalf("first event %+v", first)
	}
	h := a.do("POST", "/v1/shows/ev/holds", "alice", "", map[string]any{"seats": []string{"A3"}})
	a.want(h, 201, "")
	at := a.layoutIndex("ev")
	held := s.changed(at["A3"], "h")
	select {
	case <-s.beats:
	case <-time.After(2 * time.Second):
		t.Fatal("no heartbeat")
	}
	s.close()
	a.waitStreams(0) // the server counts the closed stream out once its handler sees the close

	// Missed while away: a release and another hold. Resume gets exactly those.
	a.want(a.do("POST", "/v1/holds/release", "alice", "", h.body), 204, "")
	a.want(a.do("POST", "/v1/shows/ev/holds", "bob", "", map[string]any{"seats": []string{"A5"}}), 201, "")
	s2, _ := a.openEvents("ev", held.id)
	if ev := s2.next(5 * time.Second); ev.event != "changes" {
		t.Fatalf("resume started with %+v", ev)
	}
	s2.changed(at["A5"], "h")

	// An id of another server (or a restarted one): a snapshot to start from (the last
	// one built, within a second, and the changes since).
	s3, _ := a.openEvents("ev", "00000000.12")
	want := []byte(strings.Repeat("f", 10))
	want[at["A5"]] = 'h'
	s3.mapAfter(func(states []byte) bool { return string(states) == string(want) }, 5*time.Second)
	// Two streams open, the cap: the third is refused.
	_, resp := a.openEvents("ev", "")
	if resp == nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %v", resp)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "too-many-streams") {
		t.Fatalf("third stream: %s", body)
	}
	s2.close()
	s3.close()
	a.waitStreams(0) // counted out once their handlers see the closes: the requests below are not refused as a third
	for _, bad := range []string{"x", "abc.def", "12345678", "1234567.5"} {
		r := a.doHeaders("GET", "/v1/shows/ev/events", http.Header{"Last-Event-Id": {bad}}, nil)
		a.want(r, 400, "invalid-argument")
	}
	a.want(a.do("GET", "/v1/shows/nope/events", "", "", nil), 404, "not-found")
}

// TestSeatEventsEveryClientConverges: many streams on one show while holds and
// releases run; each stream's map, built from its snapshot and changes, ends equal to
// the server's.
func TestSeatEventsEveryClientConverges(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{MaxSeatsPerHolder: 1000}, Options{})
	ids := seats(50)
	a.want(a.do("PUT", "/v1/shows/many", "", "", map[string]any{"seats": ids}), 201, "")
	const clients = 20
	streams := make([]*sseStream, clients)
	for i := range streams {
		streams[i], _ = a.openEvents("many", "")
	}
	for i := 0; i < 40; i++ {
		h := a.do("POST", "/v1/shows/many/holds", fmt.Sprint("h", i%7), "", map[string]any{"seats": []string{ids[i], ids[(i*7)%50]}, "ttl_ms": 300 + 20*i})
		if h.status == 201 && i%3 == 0 {
			a.want(a.do("POST", "/v1/holds/release", fmt.Sprint("h", i%7), "", h.body), 204, "")
		}
	}
	// Every hold is short: wait until the server's map shows them all expired.
	var want string
	for deadline := time.Now().Add(5 * time.Second); ; {
		want = a.do("GET", "/v1/shows/many/seats?format=compact", "", "", nil).body["states"].(string)
		if !strings.Contains(want, "h") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holds of at most 1.1 s still held after 5 s: %s", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, s := range streams {
		var states []byte
		deadline := time.Now().Add(3 * time.Second)
		for string(states) != want {
			if time.Now().After(deadline) {
				t.Fatalf("client %d ended with %s, the server says %s", i, states, want)
			}
			ev := s.next(time.Until(deadline))
			switch ev.event {
			case "snapshot":
				states = []byte(ev.data["states"].(string))
			case "changes":
				for _, c := range ev.data["changes"].([]any) {
					m := c.(map[string]any)
					states[int(m["i"].(float64))] = m["s"].(string)[0]
				}
			}
		}
	}
}

// TestBestAvailableOverHTTP: POST …/holds with count (and section, adjacent) holds the
// best seats; nothing fitting is 409 without seats and with what is left; both seats
// and count, or neither, is 400; an unknown section is 404.
func TestBestAvailableOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	layout := []map[string]any{}
	for _, sec := range []string{"A", "B"} {
		for p := 1; p <= 5; p++ {
			layout = append(layout, map[string]any{"id": fmt.Sprintf("%s%d", sec, p), "section": sec, "row": "1", "position": p, "rank": p, "x": 0, "y": 0})
		}
	}
	a.want(a.do("PUT", "/v1/shows/best", "", "", map[string]any{"layout": layout}), 201, "")
	r := a.do("POST", "/v1/shows/best/holds", "alice", "", map[string]any{"count": 3, "section": "B", "adjacent": true})
	a.want(r, 201, "")
	if fmt.Sprint(r.body["seats"]) != "[B1 B2 B3]" {
		t.Fatalf("best 3 in B: %v", r.body["seats"])
	}
	a.want(a.do("POST", "/v1/holds/release", "alice", "", r.body), 204, "")
	r = a.do("POST", "/v1/shows/best/holds", "bob", "", map[string]any{"count": 6, "adjacent": true})
	a.want(r, 409, "seats-unavailable")
	if r.body["available"] != float64(5) || r.body["seats"] != nil {
		t.Fatalf("nothing fits: %v", r.raw)
	}
	a.want(a.do("POST", "/v1/shows/best/holds", "bob", "", map[string]any{"count": 1, "seats": []string{"A1"}}), 400, "invalid-argument")
	a.want(a.do("POST", "/v1/shows/best/holds", "bob", "", map[string]any{"adjacent": true}), 400, "invalid-argument")
	a.want(a.do("POST", "/v1/shows/best/holds", "bob", "", map[string]any{"count": 0}), 400, "invalid-argument")
	a.want(a.do("POST", "/v1/shows/best/holds", "bob", "", map[string]any{"count": 1, "section": "Z"}), 404, "not-found")
}

// TestSeatEventsResumeOnAnotherReplica: two servers (replicas) on one database and
// Redis. Clients stream from the first; it dies mid-sale; each client reconnects to the
// second with its Last-Event-ID and resumes from the feed position in it — its first
// event there is changes, not a snapshot — and every client's map, built from what it
// received, ends equal to the second server's. An id whose position the second server
// cannot reach back to gets a snapshot.
func TestSeatEventsResumeOnAnotherReplica(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{MaxSeatsPerHolder: 1000}, Options{})
	b := a.replica()
	ids := seats(40)
	a.want(a.do("PUT", "/v1/shows/rep", "", "", map[string]any{"seats": ids}), 201, "")
	mutate := func(via *api, from, to int) {
		for i := from; i < to; i++ {
			h := via.do("POST", "/v1/shows/rep/holds", fmt.Sprint("h", i%5), "", map[string]any{"seats": []string{ids[i%40]}, "ttl_ms": 60000})
			if h.status == 201 && i%3 == 0 {
				via.want(via.do("POST", "/v1/holds/release", fmt.Sprint("h", i%5), "", h.body), 204, "")
			}
		}
	}
	// Both replicas follow the show, as they would behind a balancer.
	bs, _ := b.openEvents("rep", "")
	b.waitStreams(1)
	const clients = 8
	type client struct {
		states []byte
		lastID string
	}
	cs := make([]client, clients)
	apply := func(c *client, ev sseEvent) {
		switch ev.event {
		case "snapshot":
			c.states = []byte(ev.data["states"].(string))
		case "changes":
			for _, ch := range ev.data["changes"].([]any) {
				m := ch.(map[string]any)
				c.states[int(m["i"].(float64))] = m["s"].(string)[0]
			}
		}
		c.lastID = ev.id
	}
	streams := make([]*sseStream, clients)
	for i := range streams {
		streams[i], _ = a.openEvents("rep", "")
		apply(&cs[i], streams[i].next(5*time.Second))
	}
	mutate(a, 0, 20)
	// Each client reads what it got so far (some more, some less), then replica a dies.
	for i, s := range streams {
		for n := 0; n < 1+i; n++ {
			select {
			case ev, ok := <-s.events:
				if ok {
					apply(&cs[i], ev)
				}
			case <-time.After(200 * time.Millisecond):
			}
		}
		s.close()
	}
	a.srv.CloseClientConnections()
	a.srv.Close()
	mutate(b, 20, 40)
	want := func() string {
		return b.do("GET", "/v1/shows/rep/seats?format=compact", "", "", nil).body["states"].(string)
	}
	for i := range cs {
		s, resp := b.openEvents("rep", cs[i].lastID)
		if s == nil {
			t.Fatalf("client %d: resume on the other replica: %v", i, resp.Status)
		}
		first := s.next(5 * time.Second)
		if first.event != "changes" {
			t.Errorf("client %d resumed on the other replica with a %s, want changes", i, first.event)
		}
		apply(&cs[i], first)
		deadline := time.Now().Add(5 * time.Second)
		for string(cs[i].states) != want() {
			if time.Now().After(deadline) {
				t.Fatalf("client %d ended with %s, the server says %s", i, cs[i].states, want())
			}
			select {
			case ev, ok := <-s.events:
				if !ok {
					t.Fatalf("client %d: the stream ended", i)
				}
				apply(&cs[i], ev)
			case <-time.After(100 * time.Millisecond):
			}
		}
		s.close()
	}
	bs.close()
	// A position from before what a replica has kept (here: one that started after it):
	// a snapshot.
	c := b.replica()
	s, _ := c.openEvents("rep", "00000000.5.1")
	if ev := s.next(5 * time.Second); ev.event != "snapshot" {
		t.Errorf("an id whose position cannot be resumed from started with %s, want a snapshot", ev.event)
	}
	for _, bad := range []string{"12345678.1.x", "12345678.1.-1"} {
		r := b.doHeaders("GET", "/v1/shows/rep/events", http.Header{"Last-Event-Id": {bad}}, nil)
		b.want(r, 400, "invalid-argument")
	}
}
