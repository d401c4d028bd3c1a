package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestEventsCommand: holdfast events prints the feed as NDJSON, one event a line; with
// --after the last id it prints nothing; --follow prints an event committed while it
// runs, and ends when interrupted.
func TestEventsCommand(t *testing.T) {
	t.Parallel()
	pool, url := testsvc.EmptyDatabase(t)
	prefix := testsvc.KeyPrefix(t)
	vars := env(map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL(), "HOLDFAST_KEY_PREFIX": prefix})
	if err := run(t.Context(), []string{"migrate", "up"}, vars, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(pool, testsvc.Redis(t), &engine.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateShow(t.Context(), "gala", []string{"A1", "A2"}); err != nil {
		t.Fatal(err)
	}
	book := func(seat string) engine.Booking {
		h, err := e.Hold(t.Context(), engine.HoldRequest{ShowID: "gala", SeatIDs: []string{seat}, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Confirm(t.Context(), h, engine.ConfirmOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := book("A1")
	lines := func(out string) []engine.Event {
		var evs []engine.Event
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l == "" {
				continue
			}
			var ev engine.Event
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			evs = append(evs, ev)
		}
		return evs
	}
	// The feed hands out a transaction's events once every transaction that started
	// before it has ended, on the whole server: the other tests' transactions can hold
	// it back for a moment, so the one-shot command is run until it prints the booking.
	var out bytes.Buffer
	var evs []engine.Event
	for deadline := time.Now().Add(30 * time.Second); len(evs) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out.Reset()
		if err := run(t.Context(), []string{"events"}, vars, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		evs = lines(out.String())
	}
	if len(evs) != 1 || evs[0].Booking.ID != first.ID || evs[0].Kind != engine.EventConfirmed {
		t.Fatalf("holdfast events: %q", out.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"events", "--after", evs[0].ID}, vars, &out, io.Discard); err != nil || out.Len() != 0 {
		t.Fatalf("--after the last: %v %q", err, out.String())
	}

	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"events", "--after", evs[0].ID, "--follow"}, vars, w, io.Discard)
		w.Close()
	}()
	second := book("A2")
	var line []byte
	buf := make([]byte, 1)
	for !bytes.HasSuffix(line, []byte("\n")) {
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
		line = append(line, buf[0])
	}
	if evs := lines(string(line)); len(evs) != 1 || evs[0].Booking.ID != second.ID {
		t.Fatalf("--follow printed %q", line)
	}
	cancel()
	go io.Copy(io.Discard, r)
	if err := <-done; err != nil {
		t.Fatalf("--follow interrupted: %v", err)
	}
}

// TestServeWebhookFlags: --webhook-url without a secret file, and a file without a
// whsec_ secret, are usage errors before serving.
func TestServeWebhookFlags(t *testing.T) {
	t.Parallel()
	_, url := testsvc.EmptyDatabase(t)
	vars := env(map[string]string{"DATABASE_URL": url, "REDIS_URL": testsvc.RedisURL(), "HOLDFAST_KEY_PREFIX": testsvc.KeyPrefix(t)})
	if err := run(t.Context(), []string{"migrate", "up"}, vars, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(bad, []byte("not-a-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--webhook-url", "http://127.0.0.1:18571/"}, {"--webhook-secret-file", bad},
		{"--webhook-url", "http://127.0.0.1:18571/", "--webhook-secret-file", bad}} {
		err := run(t.Context(), append([]string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", ""}, args...), vars, io.Discard, io.Discard)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(ee.msg, "webhook") {
			t.Errorf("serve %v: %v, want a usage error about the webhook", args, err)
		}
	}
}
