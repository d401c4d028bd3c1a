// Webhooks is a booking backend's receiving end of holdfast's webhooks (serve
// --webhook-url): it checks each delivery's Standard Webhooks signature with the
// whsec_ secret holdfast signs with, skips an event it has seen (deliveries are at
// least once; webhook-id is the event's id), and prints each new event, one JSON line.
//
//	go run ./examples/webhooks --addr 127.0.0.1:18570 --secret-file webhook.secret
//	holdfast serve --webhook-url http://127.0.0.1:18570/hooks --webhook-secret-file webhook.secret
//
// A real backend records the event and its id in the same transaction (its own
// database) before answering 2xx: then a redelivery is found and acknowledged again.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18570", "listen address")
	secretFile := flag.String("secret-file", "webhook.secret", "file with the whsec_ secret")
	flag.Parse()
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		log.Fatal(err)
	}
	h, err := newReceiver(strings.TrimSpace(string(secret)), os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(*addr, h))
}

// event is what this backend reads of a delivery's data (holdfast's Event): a booking's
// change, or a hold's move (hold_reclaimed, hold_transferred), whose booking is null.
type event struct {
	ID      string `json:"id"`
	Show    string `json:"show"`
	Kind    string `json:"kind"` // confirmed, cancelled, transferred, lost, hold_transferred…
	Booking *struct {
		ID     string   `json:"id"`
		Seats  []string `json:"seats"`
		Holder string   `json:"holder"`
		Status string   `json:"status"`
	} `json:"booking,omitempty"`
	Hold *struct {
		Seats      []string `json:"seats"`
		Holder     string   `json:"holder"`
		FromHolder string   `json:"from_holder"`
	} `json:"hold,omitempty"`
}

// receiver verifies and records deliveries.
type receiver struct {
	wh  *standardwebhooks.Webhook
	out io.Writer

	mu   sync.Mutex
	seen map[string]bool // event ids recorded; a real backend keeps them in its database
}

func newReceiver(secret string, out io.Writer) (*receiver, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("the secret is not whsec_ and base64: %w", err)
	}
	return &receiver{wh: wh, out: out, seen: map[string]bool{}}, nil
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	// The signature covers webhook-id, webhook-timestamp (within 5 minutes of now) and the body.
	if err := rc.wh.Verify(body, r.Header); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var msg struct {
		Type string `json:"type"`
		Data event  `json:"data"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Data.ID != r.Header.Get("webhook-id") {
		http.Error(w, "not a holdfast event", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.seen[msg.Data.ID] { // a redelivery: already recorded, acknowledge again
		line, _ := json.Marshal(msg.Data)
		fmt.Fprintf(rc.out, "%s\n", line)
		rc.seen[msg.Data.ID] = true
	}
	w.WriteHeader(http.StatusNoContent)
}
