package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// syncBuffer is a bytes.Buffer for one writer and a reader in another goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestReceiverVerifiesHoldfastDeliveries: an engine delivers a booking's events and a
// hold's transfer to the example receiver, which records each once; a delivery signed
// with another secret, or altered, is refused with 401.
func TestReceiverVerifiesHoldfastDeliveries(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("example-secret-of-24-bytes"))
	var out syncBuffer
	rc, err := newReceiver(secret, &out)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	prefix := testsvc.KeyPrefix(t)
	e, err := engine.New(testsvc.Database(t), testsvc.Redis(t), &engine.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := t.Context()
	if err := e.CreateShow(ctx, "gala", []string{"A1"}); err != nil {
		t.Fatal(err)
	}
	h, err := e.Hold(ctx, engine.HoldRequest{ShowID: "gala", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Confirm(ctx, h, engine.ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	h, err = e.Hold(ctx, engine.HoldRequest{ShowID: "gala", SeatIDs: []string{"A1"}, TTL: time.Minute, HolderID: "bob"})
	if err == nil {
		_, err = e.Transfer(ctx, h, "cy")
	}
	if err != nil {
		t.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- e.DeliverWebhooks(dctx, engine.WebhookConfig{URL: srv.URL + "/hooks", Secret: secret, Poll: 20 * time.Millisecond})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"kind":"confirmed"`) || !strings.Contains(lines[1], `"kind":"cancelled"`) ||
		!strings.Contains(lines[0], b.ID.String()) || !strings.Contains(lines[2], `"kind":"hold_transferred"`) ||
		!strings.Contains(lines[2], `"holder":"cy","from_holder":"bob"`) {
		t.Fatalf("recorded:\n%s", out.String())
	}

	// Another secret's signature, and a body changed after signing: refused.
	body := `{"type":"booking.confirmed","data":{"id":"x"}}`
	for _, c := range []struct{ secret, body string }{{"whsec_" + base64.StdEncoding.EncodeToString([]byte("another")), body}, {secret, body + " "}} {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(c.body))
		other, _ := newReceiver(c.secret, nil)
		now := time.Now()
		sig, _ := other.wh.Sign("x", now, []byte(body))
		req.Header.Set("webhook-id", "x")
		req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a forged delivery got %d, want 401", resp.StatusCode)
		}
	}
}
