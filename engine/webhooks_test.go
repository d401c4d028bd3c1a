package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestWebhookSignatureMatchesTheSpec: the headers of a delivery carry the signature of
// the Standard Webhooks spec's test vector, and one computed here with crypto/hmac.
func TestWebhookSignatureMatchesTheSpec(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	body := []byte(`{"test": 2432232314}`)
	if err := signWebhook(h, wh, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("webhook-signature"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want the spec's %q", got, want)
	}
	if h.Get("webhook-id") != "msg_p5jXN8AQM9LWM0D4loKWxJek" || h.Get("webhook-timestamp") != "1614265330" {
		t.Fatalf("headers %v", h)
	}
	if !verifyByHand(secret, h, body) {
		t.Fatal("crypto/hmac does not agree")
	}
}

// verifyByHand checks a delivery's signature without the library: HMAC-SHA256 of
// id.timestamp.body under the base64 key after whsec_.
func verifyByHand(secret string, h http.Header, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", h.Get("webhook-id"), h.Get("webhook-timestamp"), body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(s), []byte(want)) {
			return true
		}
	}
	return false
}

// receiver is a real webhook endpoint on loopback that fails (500), hangs past the
// sender's timeout and restarts on the same port, and records what it was sent.
type receiver struct {
	t      *testing.T
	secret string
	wh     *standardwebhooks.Webhook
	addr   string
	plan   func(n int) string // for the nth request: "ok", "fail" or "hang"

	mu       sync.Mutex
	srv      *http.Server
	n        int
	inFlight int
	overlaps int      // requests that arrived while another was being answered
	bad      []string // deliveries whose signature or body did not check
	log      []delivered
}

type delivered struct {
	id, show string
	acked    bool
}

func startReceiver(t *testing.T, secret string, plan func(int) string) *receiver {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, secret: secret, wh: wh, addr: "127.0.0.1:0", plan: plan}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *receiver) start() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	for i := 0; err != nil && i < 50; i++ { // the port of the last run, just closed
		time.Sleep(20 * time.Millisecond)
		ln, err = net.Listen("tcp", r.addr)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	srv := r.srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (r *receiver) stop() {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	_ = srv.Close()
}

func (r *receiver) url() string { return "http://" + r.addr + "/hooks" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var msg struct {
		Type string `json:"type"`
		Data Event  `json:"data"`
	}
	err := r.wh.Verify(body, req.Header)
	if err == nil && !verifyByHand(r.secret, req.Header, body) {
		err = errors.New("crypto/hmac does not agree")
	}
	if err == nil {
		err = json.Unmarshal(body, &msg)
	}
	if err == nil && (msg.Data.ID != req.Header.Get("webhook-id") || msg.Type != webhookType(msg.Data.Kind)) {
		err = fmt.Errorf("webhook-id %q, type %q for event %s", req.Header.Get("webhook-id"), msg.Type, msg.Data.ID)
	}
	r.mu.Lock()
	r.n++
	n := r.n
	if r.inFlight > 0 {
		r.overlaps++
	}
	r.inFlight++
	if err != nil {
		r.bad = append(r.bad, err.Error())
	}
	r.mu.Unlock()
	done := func(acked bool) {
		r.mu.Lock()
		r.inFlight--
		if err == nil {
			r.log = append(r.log, delivered{msg.Data.ID, msg.Data.ShowID, acked})
		}
		r.mu.Unlock()
	}
	switch plan := r.plan(n); {
	case err != nil:
		done(false)
		w.WriteHeader(http.StatusBadRequest)
	case plan == "hang":
		select {
		case <-req.Context().Done():
		case <-time.After(10 * time.Second):
		}
		done(false)
	case plan == "fail":
		done(false)
		w.WriteHeader(http.StatusInternalServerError)
	default:
		done(true)
		w.WriteHeader(http.StatusNoContent)
	}
}

// acked returns the ids the endpoint acknowledged.
func (r *receiver) acked() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, d := range r.log {
		if d.acked {
			out[d.id] = true
		}
	}
	return out
}

// TestWebhooksDeliverEveryEventInOrderThroughFailures: two engines run the delivery loop
// for one endpoint while bookings and cancellations commit; the endpoint answers 500 to
// some requests, hangs past the timeout on others, and is down for a while; the loop
// that delivers is stopped (the other takes over) and started again. Every event is
// acknowledged, every delivery's signature verifies, no request arrives while another
// is being answered (one engine delivers at a time), each show's events arrive in the
// feed's order (an event again only before the next has been acknowledged), and the
// oldest-undelivered metric is back at 0.
func TestWebhooksDeliverEveryEventInOrderThroughFailures(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	other := v.twin()
	const shows, seats = 3, 30
	for s := range shows {
		v.show(fmt.Sprintf("wh%d", s), seatNames(seats)...)
	}
	key := make([]byte, 24)
	for i := range key {
		key[i] = byte(i * 7)
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	rcv := startReceiver(t, secret, func(n int) string {
		switch {
		case n%7 == 3:
			return "fail"
		case n%11 == 5:
			return "hang"
		}
		return "ok"
	})
	cfg := WebhookConfig{URL: rcv.url(), Secret: secret, Timeout: 300 * time.Millisecond, Lease: time.Second,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Poll: 20 * time.Millisecond}
	ctx := t.Context()
	run := func(e *Engine) (stop func()) {
		lctx, cancel := context.WithCancel(ctx)
		exited := make(chan error, 1)
		go func() { exited <- e.DeliverWebhooks(lctx, cfg) }()
		return func() {
			cancel()
			if err := <-exited; err != nil {
				t.Errorf("DeliverWebhooks: %v", err)
			}
		}
	}
	stopA, stopB := run(v.e), run(other)

	var wg sync.WaitGroup
	for s := range shows {
		wg.Go(func() {
			show := fmt.Sprintf("wh%d", s)
			for i, seat := range seatNames(seats) {
				b, err := v.e.Confirm(ctx, v.hold(show, time.Minute, "", seat), ConfirmOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				if i%4 == 0 {
					if err := v.e.Cancel(ctx, b.ID); err != nil {
						t.Error(err)
						return
					}
				}
				switch {
				case s == 0 && i == seats/3:
					rcv.stop() // the endpoint goes down for a while
					time.Sleep(700 * time.Millisecond)
					if v.e.m.webhookAge() == 0 && other.m.webhookAge() == 0 {
						t.Error("the oldest-undelivered metric is 0 on both engines while the endpoint is down")
					}
					rcv.start()
				case s == 1 && i == seats/2:
					stopA() // one loop stops (if it delivered, the other takes over), then starts again
					time.Sleep(300 * time.Millisecond)
					stopA = run(v.e)
				}
			}
		})
	}
	wg.Wait()

	feed, _ := waitEvents(t, v.e, "", shows*(seats+seats/4+1))
	if want := shows * (seats + seats/4 + 1); len(feed) != want {
		t.Fatalf("the feed has %d events, want %d", len(feed), want)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(rcv.acked()) < len(feed) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for time.Now().Before(deadline) && (v.e.m.webhookAge() != 0 || other.m.webhookAge() != 0) {
		time.Sleep(50 * time.Millisecond)
	}
	stopA()
	stopB()

	acked := rcv.acked()
	for _, ev := range feed {
		if !acked[ev.ID] {
			t.Errorf("event %s (%s %s) never acknowledged", ev.ID, ev.ShowID, ev.Kind)
		}
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 || rcv.overlaps > 0 {
		t.Fatalf("%d deliveries did not verify (%v); %d arrived while another was being answered", len(rcv.bad), rcv.bad, rcv.overlaps)
	}
	index := map[string]int{} // event id -> its place among its show's events
	perShow := map[string]int{}
	for _, ev := range feed {
		index[ev.ID] = perShow[ev.ShowID]
		perShow[ev.ShowID]++
	}
	last := map[string]int{} // show -> the place of its last acknowledged event
	for s := range perShow {
		last[s] = -1
	}
	for _, d := range rcv.log {
		i, ok := index[d.id]
		if !ok || i > last[d.show]+1 || i < last[d.show] {
			t.Fatalf("show %s: event %s (place %d) delivered when its last acknowledged was place %d", d.show, d.id, i, last[d.show])
		}
		if d.acked {
			last[d.show] = i
		}
	}
	if v.e.m.webhookAge() != 0 || other.m.webhookAge() != 0 {
		t.Errorf("oldest undelivered %.1fs and %.1fs after everything was delivered", v.e.m.webhookAge(), other.m.webhookAge())
	}
	var cursor string
	if err := v.pool.QueryRow(ctx, "SELECT delivered FROM webhook_deliveries").Scan(&cursor); err != nil || cursor != feed[len(feed)-1].ID {
		t.Errorf("delivery cursor %q (%v), want the last event %s", cursor, err, feed[len(feed)-1].ID)
	}
	t.Logf("%d events, %d requests", len(feed), len(rcv.log))
}

// TestWebhookConfigRefused: a bad URL or secret is refused at once.
func TestWebhookConfigRefused(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	good := "whsec_" + base64.StdEncoding.EncodeToString(uuid.New().NodeID())
	for _, c := range []WebhookConfig{{URL: "ftp://x/", Secret: good}, {URL: "http://127.0.0.1:18570/", Secret: "nope!"},
		{URL: "http://127.0.0.1:18570/", Secret: "whsec_"}, {URL: "http://127.0.0.1:18570/", Secret: good, Timeout: time.Minute, Lease: time.Minute}} {
		if err := v.e.DeliverWebhooks(t.Context(), c); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", c, err)
		}
	}
}
