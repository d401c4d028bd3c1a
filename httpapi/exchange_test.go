package httpapi

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestExchangeSignedHoldersOverHTTP: with signed holders, an exchange under an
// Idempotency-Key is answered again on a retry; another holder's request on the booking
// (even under the same key and body) is 404 and changes nothing; malformed bodies are
// 400 and change nothing; another holder's hold cannot be exchanged in.
func TestExchangeSignedHoldersOverHTTP(t *testing.T) {
	t.Parallel()
	path, secret := writeSecret(t)
	auth, err := HolderSecretFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{HolderAuth: auth})
	as := func(holder, key string) http.Header {
		h := bearer(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": holder, "exp": time.Now().Add(time.Hour).Unix()}))
		h.Set("Content-Type", "application/json")
		if key != "" {
			h.Set(IdempotencyHeader, key)
		}
		return h
	}
	a.want(a.do("PUT", "/v1/shows/sx", "", "", map[string]any{"seats": seats(5)}), 201, "")
	h := a.doHeaders("POST", "/v1/shows/sx/holds", as("alice", ""), map[string]any{"seats": []string{"A1", "A2"}})
	a.want(h, 201, "")
	b := a.doHeaders("POST", "/v1/bookings", as("alice", ""), h.body)
	a.want(b, 201, "")
	x := a.doHeaders("POST", "/v1/shows/sx/holds", as("alice", ""), map[string]any{"seats": []string{"A3"}})
	a.want(x, 201, "")
	m := a.doHeaders("POST", "/v1/shows/sx/holds", as("mallory", ""), map[string]any{"seats": []string{"A4"}})
	a.want(m, 201, "")
	p := fmt.Sprintf("/v1/bookings/%s/exchange", b.body["id"])
	body := map[string]any{"give_seats": []string{"A1"}, "hold": x.body}

	// Malformed bodies.
	for _, bad := range []any{"", "null", "{", `{"give_seats":"A1"}`, `{"give_seats":["A1"],"hold":{}}`,
		`{"give_seats":["A1"],"hold":null}`, `{"give_places":[{"area":"FLOOR","count":-1}],"hold":` + x.raw + `}`,
		`{"give_seats":["A1"],"hold":` + x.raw + `,"extra":1}`} {
		r := a.doHeaders("POST", p, as("alice", ""), bad)
		if r.status < 400 || r.status >= 500 {
			t.Errorf("body %.60q: %d %s, want 4xx", bad, r.status, r.raw)
		}
	}
	// mallory's hold into alice's booking, as alice: not alice's hold.
	r := a.doHeaders("POST", p, as("alice", ""), map[string]any{"give_seats": []string{"A1"}, "hold": m.body})
	if r.status == 200 {
		t.Errorf("alice exchanged mallory's hold: %s", r.raw)
	}
	// mallory on alice's booking with her own hold.
	r = a.doHeaders("POST", p, as("mallory", ""), map[string]any{"give_seats": []string{"A1"}, "hold": m.body})
	a.want(r, 404, "not-found")

	e1 := a.doHeaders("POST", p, as("alice", "xk"), body)
	a.want(e1, 200, "")
	e2 := a.doHeaders("POST", p, as("alice", "xk"), body)
	a.want(e2, 200, "")
	if e1.raw != e2.raw && (e1.body["generation"] != e2.body["generation"] || fmt.Sprint(e1.body["seats"]) != fmt.Sprint(e2.body["seats"])) {
		t.Errorf("retry %s, first %s", e2.raw, e1.raw)
	}
	// mallory under alice's key: with another body, and with the very same body.
	r = a.doHeaders("POST", p, as("mallory", "xk"), map[string]any{"give_seats": []string{"A2"}, "hold": m.body})
	t.Logf("mallory, alice's key, another body: %d %s", r.status, r.raw)
	if r.status != 404 {
		t.Errorf("mallory under alice's key with another body: %d, want 404 (the booking is not hers)", r.status)
	}
	r = a.doHeaders("POST", p, as("mallory", "xk"), body)
	t.Logf("mallory, alice's key, alice's body: %d %s", r.status, r.raw)
	if r.status != 404 {
		t.Errorf("mallory under alice's key with alice's body: %d %s, want 404 (alice's booking answered to mallory)", r.status, r.raw)
	}
	got := a.doHeaders("GET", fmt.Sprintf("/v1/bookings/%s", b.body["id"]), as("alice", ""), nil)
	if fmt.Sprint(got.body["seats"]) != "[A2 A3]" {
		t.Errorf("booking now %s", got.raw)
	}
	a.want(a.doHeaders("POST", "/v1/shows/sx/holds", as("bob", ""), map[string]any{"seats": []string{"A1"}}), 201, "")
	// The same for a partial cancellation: alice's key tells mallory nothing.
	c := fmt.Sprintf("/v1/bookings/%s/cancel-seats", b.body["id"])
	a.want(a.doHeaders("POST", c, as("alice", "ck"), map[string]any{"seats": []string{"A2"}}), 200, "")
	a.want(a.doHeaders("POST", c, as("mallory", "ck"), map[string]any{"seats": []string{"A2"}}), 404, "not-found")
	a.want(a.doHeaders("POST", c, as("mallory", "ck"), map[string]any{"seats": []string{"A3"}}), 404, "not-found")
}
