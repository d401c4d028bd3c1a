package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestTokenGuessing: random tokens and one-character mutations of a live token never
// confirm or release a hold, the guesser is rate limited, and the owner is unaffected.
func TestTokenGuessing(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{RateLimit: 50, RateBurst: 100})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(2)}), 201, "")
	h := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}})
	a.want(h, 201, "")
	token := h.body["token"].(string)

	var guesses []string
	for i := range len(token) { // every one-character mutation
		for _, c := range "0123456789abcdef" {
			if byte(c) != token[i] {
				guesses = append(guesses, token[:i]+string(c)+token[i+1:])
			}
		}
	}
	for range 100 {
		b := make([]byte, 16)
		rand.Read(b)
		guesses = append(guesses, hex.EncodeToString(b))
	}
	statuses := map[int]int{}
	for i, g := range guesses {
		forged := map[string]any{}
		for k, v := range h.body {
			forged[k] = v
		}
		forged["token"] = g
		path := "/v1/bookings"
		if i%2 == 1 {
			path = "/v1/holds/release"
		}
		// The guesser is another holder; even alice's own identity would not help.
		r := a.do("POST", path, "mallory", "", forged)
		statuses[r.status]++
		if r.status < 300 {
			t.Fatalf("guess %d succeeded on %s: %s", i, path, r.raw)
		}
	}
	if statuses[429] == 0 || statuses[410] == 0 {
		t.Fatalf("statuses %v: want hold-lost refusals and the rate limit engaged", statuses)
	}
	// mallory presenting the real token is still not alice.
	a.want(a.do("POST", "/v1/bookings", "bob", "", h.body), 410, "hold-lost")
	b := a.do("POST", "/v1/bookings", "alice", "k1", h.body)
	a.want(b, 201, "")
	t.Logf("%d guesses: %v", len(guesses), statuses)
}

// TestOversizedNeverReachesTheEngine: an oversized or malformed request is refused
// before any Redis or PostgreSQL call (the engine counts no operation).
func TestOversizedNeverReachesTheEngine(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	body := `{"seats":["` + strings.Repeat("A", 20000) + `"]}`
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", body), 413, "request-too-large")
	a.want(a.do("POST", "/v1/bookings", "alice", "", `{"token":`+strings.Repeat(" ", 17000)+`"x"}`), 413, "request-too-large")
	a.want(a.do("POST", "/v1/shows/s1/holds", "alice", "", `{"seats":["A1"],"evil":true}`), 400, "malformed-request")
	n, err := testutil.GatherAndCount(a.s.reg, "holdfast_operations_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the engine ran %d operations for refused requests", n)
	}
}
