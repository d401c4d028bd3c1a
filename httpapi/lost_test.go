package httpapi

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestHoldLostNamesItsCause: a hold-lost refusal says why in "cause" (and "at"): a hold
// that expired (sent back with its expires_at), one released, one confirmed (with its
// booking, to its holder); and to another holder only not_current, with no time and no
// booking.
func TestHoldLostNamesItsCause(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/s1", "", "", map[string]any{"seats": seats(3)}), 201, "")
	wantCause := func(r reply, cause string) {
		t.Helper()
		a.want(r, 410, "hold-lost")
		if r.body["cause"] != cause {
			t.Fatalf("cause %v, want %s: %s", r.body["cause"], cause, r.raw)
		}
	}

	expiring := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A1"}, "ttl_ms": 50})
	a.want(expiring, 201, "")
	key := a.cfg.KeyPrefix + ":{s1}:hold:A1"
	deadline := time.Now().Add(10 * time.Second)
	for a.rdb.PTTL(t.Context(), key).Val() != -2 {
		if time.Now().After(deadline) {
			t.Fatal("the hold never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := a.do("POST", "/v1/bookings", "alice", "", expiring.body)
	wantCause(r, "expired")
	if at, _ := time.Parse(time.RFC3339Nano, r.body["at"].(string)); !at.Equal(mustTime(t, expiring.body["expires_at"])) {
		t.Fatalf("expired at %v, want the hold's expires_at %v", r.body["at"], expiring.body["expires_at"])
	}

	released := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A2"}})
	a.want(released, 201, "")
	a.want(a.do("POST", "/v1/holds/release", "alice", "", released.body), 204, "")
	r = a.do("POST", "/v1/holds/extend", "alice", "", withTTL(released.body))
	wantCause(r, "released")
	if _, ok := r.body["at"].(string); !ok {
		t.Fatalf("no release time: %s", r.raw)
	}
	wantCause(a.do("POST", "/v1/holds/release", "mallory", "", released.body), "not_current")

	confirmed := a.do("POST", "/v1/shows/s1/holds", "alice", "", map[string]any{"seats": []string{"A3"}})
	a.want(confirmed, 201, "")
	b := a.do("POST", "/v1/bookings", "alice", "", confirmed.body)
	a.want(b, 201, "")
	r = a.do("POST", "/v1/holds/release", "alice", "", confirmed.body)
	wantCause(r, "confirmed")
	if r.body["booking"] != "/v1/bookings/"+b.body["id"].(string) {
		t.Fatalf("the refusal does not point at the booking: %s", r.raw)
	}
	other := a.do("POST", "/v1/bookings", "mallory", "", confirmed.body)
	wantCause(other, "not_current")
	if _, ok := other.body["at"]; ok || strings.Contains(other.raw, b.body["id"].(string)) || other.body["booking"] != nil {
		t.Fatalf("another holder learned of the hold: %s", other.raw)
	}
}

func mustTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return at
}

// withTTL is a hold's body with a ttl_ms, as extend takes it.
func withTTL(hold map[string]any) map[string]any {
	out := map[string]any{"ttl_ms": 60000}
	for k, v := range hold {
		out[k] = v
	}
	return out
}
