package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestSaleRulesOverHTTP: the operator sets a show's rules on the admin listener; anyone
// reads them; bad bodies are 400 naming the field and change nothing.
func TestSaleRulesOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/r", "", "", map[string]any{"seats": seats(10)}), 201, "")
	r := a.do("GET", "/v1/shows/r/rules", "", "", nil)
	a.want(r, 200, "")
	if r.body["holder_limit"] != 0.0 || r.body["queue"] != nil {
		t.Fatalf("rules of a new show: %s", r.raw)
	}
	opens := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	body := map[string]any{"holder_limit": 4, "queue": map[string]any{"opens_at": opens.Format(time.RFC3339Nano), "admit_per_second": 50, "admission_ttl_ms": 120000}}
	r = a.do("PUT", "/v1/shows/r/rules", "", "", body)
	a.want(r, 200, "")
	r = a.do("GET", "/v1/shows/r/rules", "", "", nil)
	q, _ := r.body["queue"].(map[string]any)
	if r.body["holder_limit"] != 4.0 || q == nil || q["opens_at"] != opens.Format(time.RFC3339Nano) || q["admit_per_second"] != 50.0 || q["admission_ttl_ms"] != 120000.0 {
		t.Fatalf("rules read back: %s", r.raw)
	}
	// The public listener does not set rules.
	pub := a.doOn(a.srv, "PUT", "/v1/shows/r/rules", http.Header{"Authorization": {"Bearer " + a.s.opts.OperatorToken}}, body)
	a.want(pub, 405, "method-not-allowed")
	for name, c := range map[string]struct {
		body  any
		field string
	}{
		"negative limit":   {map[string]any{"holder_limit": -1}, "HolderLimit"},
		"no opening":       {map[string]any{"queue": map[string]any{"admit_per_second": 5}}, "queue.opens_at"},
		"negative rate":    {map[string]any{"queue": map[string]any{"opens_at": opens, "admit_per_second": -5}}, "AdmitPerSecond"},
		"short admission":  {map[string]any{"queue": map[string]any{"opens_at": opens, "admission_ttl_ms": 10}}, "AdmissionTTL"},
		"unknown field":    {map[string]any{"holder_limt": 3}, "holder_limt"},
		"limit not number": {map[string]any{"holder_limit": "4"}, "/holder_limit"},
	} {
		r := a.do("PUT", "/v1/shows/r/rules", "", "", c.body)
		if r.status != 400 || !strings.Contains(r.raw, c.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", name, r.status, r.raw, c.field)
		}
	}
	r = a.do("GET", "/v1/shows/r/rules", "", "", nil)
	if r.body["holder_limit"] != 4.0 {
		t.Fatalf("a refused change changed the rules: %s", r.raw)
	}
	a.want(a.do("PUT", "/v1/shows/r/rules", "", "", map[string]any{"holder_limit": 0}), 200, "")
	if r := a.do("GET", "/v1/shows/r/rules", "", "", nil); r.body["queue"] != nil {
		t.Fatalf("queue left out did not turn the room off: %s", r.raw)
	}
	a.want(a.do("GET", "/v1/shows/nope/rules", "", "", nil), 404, "not-found")
}

// TestWaitingRoomOverHTTP: a hold by a holder not admitted is 403 not-admitted; joining
// gives a ticket (again: the same place); the limit per holder is 409 holder-limit; the
// queue's event stream tells the line's length.
func TestWaitingRoomOverHTTP(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/w", "", "", map[string]any{"seats": seats(4)}), 201, "")
	blocker := a.do("POST", "/v1/shows/w/holds", "blocker", "", map[string]any{"seats": []string{"A1", "A2", "A3", "A4"}})
	a.want(blocker, 201, "")
	a.want(a.do("PUT", "/v1/shows/w/rules", "", "", map[string]any{"holder_limit": 2,
		"queue": map[string]any{"opens_at": time.Now().Add(-time.Second).Format(time.RFC3339Nano)}}), 200, "")

	a.want(a.do("POST", "/v1/shows/w/holds", "bot", "", map[string]any{"seats": []string{"A1"}}), 403, "not-admitted")
	a.want(a.do("POST", "/v1/shows/w/holds", "bot", "", map[string]any{"count": 1}), 403, "not-admitted")
	a.want(a.do("GET", "/v1/shows/w/queue", "ann", "", nil), 404, "not-found")
	a.want(a.do("POST", "/v1/shows/w/queue", "", "", nil), 400, "missing-holder")
	for i, h := range []string{"ann", "bob", "cat"} {
		r := a.do("POST", "/v1/shows/w/queue", h, "", nil)
		a.want(r, 200, "")
		if r.body["admitted"] != false || r.body["position"] != float64(i+1) || r.body["opened"] != true || r.body["admitted_until"] != nil {
			t.Fatalf("%s joins: %s", h, r.raw)
		}
	}
	if r := a.do("POST", "/v1/shows/w/queue", "ann", "", nil); r.body["position"] != 1.0 {
		t.Fatalf("joining again: %s", r.raw)
	}
	// The stream tells the line.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/shows/w/queue/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	var ev map[string]any
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			_ = json.Unmarshal([]byte(data), &ev)
			break
		}
	}
	if ev["waiting"] != 3.0 || ev["admitted_total"] != 0.0 || ev["opened"] != true {
		t.Fatalf("queue event %v", ev)
	}
	// The blocker lets two seats go: the line moves (a holder takes one seat until
	// holds say otherwise: half the limit of 2).
	var hold map[string]any
	_ = json.Unmarshal([]byte(blocker.raw), &hold)
	a.want(a.do("POST", "/v1/holds/release", "blocker", "", hold), 204, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.do("GET", "/v1/shows/w/queue", "ann", "", nil)
		a.want(r, 200, "")
		if r.body["admitted"] == true {
			if r.body["position"] != 0.0 || r.body["admitted_until"] == nil {
				t.Fatalf("admitted ticket: %s", r.raw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ann never admitted: %s", r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.want(a.do("POST", "/v1/shows/w/holds", "ann", "", map[string]any{"seats": []string{"A1", "A2", "A3"}}), 409, "holder-limit")
	h := a.do("POST", "/v1/shows/w/holds", "ann", "", map[string]any{"seats": []string{"A1", "A2"}})
	a.want(h, 201, "")
	a.want(a.do("POST", "/v1/bookings", "ann", "", h.body), 201, "")
}

// TestWaitingRoomSignedHolders: with signed holders, the room is the token's holder's:
// no token is 401, and a ticket belongs to the token's sub.
func TestWaitingRoomSignedHolders(t *testing.T) {
	t.Parallel()
	path, secret := writeSecret(t)
	auth, err := HolderSecretFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{HolderAuth: auth})
	a.want(a.do("PUT", "/v1/shows/s", "", "", map[string]any{"seats": seats(4)}), 201, "")
	a.want(a.do("PUT", "/v1/shows/s/rules", "", "", map[string]any{"queue": map[string]any{"opens_at": time.Now().Format(time.RFC3339Nano)}}), 200, "")
	a.want(a.doHeaders("POST", "/v1/shows/s/queue", http.Header{HolderHeader: {"alice"}}, nil), 401, "unauthorized")
	alice := bearer(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}))
	a.want(a.doHeaders("POST", "/v1/shows/s/queue", alice, nil), 200, "")
	// The room admits in rounds (at most every 50 ms on a call, and on the engine's
	// ticker): the round of alice's join ran before she was in line.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := a.doHeaders("GET", "/v1/shows/s/queue", alice, nil)
		a.want(r, 200, "")
		if r.body["admitted"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice (4 free seats) never admitted: %s", r.raw)
		}
	}
	a.want(a.doHeaders("POST", "/v1/shows/s/holds", alice, map[string]any{"seats": []string{"A1"}}), 201, "")
}

// TestWaitingRoomPageInABrowser drives the page of a show with a waiting room in
// headless Chromium: it joins, shows the place in line (not the map), and shows the map
// once the holder is admitted — when seats free up.
func TestWaitingRoomPageInABrowser(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/q", "", "", map[string]any{"seats": seats(12)}), 201, "")
	all := seats(12)
	blocker := a.do("POST", "/v1/shows/q/holds", "blocker", "", map[string]any{"seats": all[:6]})
	a.want(blocker, 201, "")
	a.want(a.do("POST", "/v1/shows/q/holds", "blocker2", "", map[string]any{"seats": all[6:]}), 201, "")
	a.want(a.do("PUT", "/v1/shows/q/rules", "", "", map[string]any{"queue": map[string]any{"opens_at": time.Now().Add(-time.Second).Format(time.RFC3339Nano)}}), 200, "")
	for _, h := range []string{"first", "second"} { // two ahead of the page
		a.want(a.do("POST", "/v1/shows/q/queue", h, "", nil), 200, "")
	}
	ctx := newBrowser(t)
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx,
		chromedp.Navigate(a.srv.URL+"/shows/q"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-queue-position="3"]`)),
		chromedp.WaitVisible(chromedp.ID(`queue-position`)),
	); err != nil {
		t.Fatal(err)
	}
	place, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById('queue-position').textContent + '|' + document.getElementById('sale').hidden + '|' + document.getElementById('queue-waiting').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if place != "3|true|3" {
		t.Fatalf("the page shows place|map hidden|waiting = %q, want 3|true|3", place)
	}
	if path := os.Getenv("HOLDFAST_QUEUE_SCREENSHOT"); path != "" {
		saveScreenshot(t, tctx, path)
	}
	// Seats free up: three holders are let in, the page among them, and it shows the map.
	var hold map[string]any
	_ = json.Unmarshal([]byte(blocker.raw), &hold)
	a.want(a.do("POST", "/v1/holds/release", "blocker", "", hold), 204, "")
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`body[data-seats="12"]`))); err != nil {
		t.Fatal(err)
	}
	visible, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`document.getElementById('queue').hidden && !document.getElementById('sale').hidden && document.getElementById('admission').textContent.includes('let in')`))
	if err != nil || !visible {
		t.Fatalf("after admission the page shows the map: %v %v", visible, err)
	}
	// And the admitted page can hold.
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.Search(`//p[@id="status" and starts-with(., "live")]`)),
		chromedp.Click(chromedp.ID(`seat-A5`)), chromedp.Click(chromedp.ID(`hold`))); err != nil {
		t.Fatal(err)
	}
	waitSeat(t, tctx, "A5", "mine", 5*time.Second)
}
