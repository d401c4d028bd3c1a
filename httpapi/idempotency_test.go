package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// errReplyLost is what a client sees of a reply lost on its way back.
var errReplyLost = errors.New("the reply was lost")

// dropReply is a transport that delivers each request to the server, reads the server's
// whole reply, and loses it: the client sees errReplyLost, the test sees the reply.
type dropReply struct{ got reply }

func (d *dropReply) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	d.got = reply{status: resp.StatusCode, header: resp.Header, raw: string(data)}
	_ = json.Unmarshal(data, &d.got.body)
	return nil, errReplyLost
}

// lostThenRetried sends a write whose reply is lost, then retries it under the same
// Idempotency-Key as a client would; the retry must get the answer the server gave
// the first time (a confirmation's replay says so with 200 instead of 201).
func (a *api) lostThenRetried(method, path, holder, key string, body any) reply {
	a.t.Helper()
	h := http.Header{IdempotencyHeader: {key}}
	if holder != "" {
		h.Set(HolderHeader, holder)
	}
	srv := a.srv
	if adminRoute(method, path) {
		srv = a.admin
		h.Set("Authorization", "Bearer "+a.s.opts.OperatorToken)
	}
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(data))
	req.Header = h.Clone()
	drop := &dropReply{}
	if _, err := (&http.Client{Transport: drop}).Do(req); !errors.Is(err, errReplyLost) {
		a.t.Fatalf("%s %s: %v, want the reply lost", method, path, err)
	}
	if drop.got.status >= 300 {
		a.t.Fatalf("%s %s (reply lost): %d %s", method, path, drop.got.status, drop.got.raw)
	}
	again := a.doOn(srv, method, path, h, body)
	first, retried := drop.got.body, again.body
	if retried != nil {
		delete(retried, "replayed")
	}
	if status := again.status; status != drop.got.status && !(drop.got.status == 201 && status == 200) ||
		!jsonEqual(first, retried) {
		a.t.Fatalf("%s %s retried under its key: %d %s\nthe lost reply: %d %s", method, path, again.status, again.raw, drop.got.status, drop.got.raw)
	}
	return drop.got
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestEveryWriteSurvivesALostReplyOverHTTP: every write over HTTP whose reply is lost
// and which the client retries under its Idempotency-Key takes effect once: the retry
// gets the lost answer, and the holds, generations, bookings and events are those of one
// request each. Another request under a used key is 422.
func TestEveryWriteSurvivesALostReplyOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(6)}), 201, "")
	with := func(h reply, extra map[string]any) map[string]any {
		b := map[string]any{}
		for k, v := range h.body {
			b[k] = v
		}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}

	h := a.lostThenRetried("POST", "/v1/shows/s1/holds", "alice", "k1", map[string]any{"seats": []string{"A1", "A2", "A3"}})
	h = a.lostThenRetried("POST", "/v1/holds/extend", "alice", "k2", with(h, map[string]any{"ttl_ms": 120000}))
	h = a.lostThenRetried("POST", "/v1/holds/shrink", "alice", "k3", with(h, map[string]any{"keep_seats": []string{"A1", "A2"}}))
	h = a.lostThenRetried("POST", "/v1/holds/transfer", "alice", "k4", with(h, map[string]any{"to": "bob"}))
	b := a.lostThenRetried("POST", "/v1/bookings", "bob", "k5", h.body)
	path := "/v1/bookings/" + b.body["id"].(string)
	a.lostThenRetried("POST", path+"/transfer", "", "k6", map[string]any{"to": "carol"})
	a.lostThenRetried("POST", path+"/cancel-seats", "carol", "k7", map[string]any{"seats": []string{"A2"}})
	x := a.lostThenRetried("POST", "/v1/shows/s1/holds", "carol", "k7a", map[string]any{"seats": []string{"A6"}})
	a.lostThenRetried("POST", path+"/exchange", "carol", "k7b", map[string]any{"give_seats": []string{"A1"}, "hold": x.body})
	a.lostThenRetried("DELETE", path, "carol", "k8", nil)
	d := a.lostThenRetried("POST", "/v1/shows/s1/holds", "dave", "k9", map[string]any{"count": 2})
	a.lostThenRetried("POST", "/v1/holds/release", "dave", "k10", d.body)

	// One hold, one transfer, carol's hold and dave's hold took generations: the next is
	// the 5th.
	next := a.do("POST", "/v1/shows/s1/holds", "erin", "", map[string]any{"seats": []string{"A4"}})
	a.want(next, 201, "")
	if g := next.body["generation"].(float64); g != 5 {
		t.Fatalf("the next hold's generation is %v, want 5: a retried write took one of its own", g)
	}
	var events map[string]int
	for _, kind := range []string{"confirmed", "transferred", "seats_cancelled", "exchanged", "cancelled"} {
		var n int
		if err := a.pool.QueryRow(t.Context(), "SELECT count(*) FROM booking_events WHERE kind = $1", kind).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			if events == nil {
				events = map[string]int{}
			}
			events[kind] = n
		}
	}
	if events != nil {
		t.Fatalf("events of each kind other than one: %v", events)
	}

	a.want(a.do("POST", "/v1/shows/s1/holds", "erin", "k11", map[string]any{"seats": []string{"A5"}}), 201, "")
	a.want(a.do("POST", "/v1/shows/s1/holds", "erin", "k11", map[string]any{"seats": []string{"A6"}}), 422, "idempotency-key-reused")
	r := a.do("POST", "/v1/shows/s1/holds", "erin", "k 12", map[string]any{"seats": []string{"A6"}})
	a.want(r, 400, "invalid-argument")
	if r.body["field"] != IdempotencyHeader {
		t.Fatalf("a malformed key: %s", r.raw)
	}
}
