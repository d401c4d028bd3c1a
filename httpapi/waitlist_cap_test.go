package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestWaitlistCountsAgainstTheAddressSeatCap: without signing, one address may hold at
// most MaxSeatsPerAddress seats of a show whatever holder ids it makes up, and a
// waitlist join counts as a hold of its count (its offer, made at once when seats are
// free): 5 made-up holders from one address, cap 2, hold 2 seats in all through
// waitlist offers, the other joins 409 address-limit.
func TestWaitlistCountsAgainstTheAddressSeatCap(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{TrustedProxies: loopback, MaxSeatsPerAddress: 2})
	a.want(a.do("PUT", "/v1/shows/cap", "", "", map[string]any{"seats": seats(20)}), 201, "")
	a.want(a.doHeaders("POST", "/v1/shows/cap/holds", from("203.0.113.7", http.Header{HolderHeader: {"h0"}}), map[string]any{"count": 3}), 409, "address-limit")
	held, refused := 0, 0
	for i := range 5 {
		r := a.doHeaders("POST", "/v1/shows/cap/waitlist", from("203.0.113.7", http.Header{HolderHeader: {fmt.Sprintf("fresh-%d", i)}}), map[string]any{"count": 2})
		switch {
		case r.status == 201 && r.body["offer"] != nil:
			held += 2
		case r.status == 409 && r.body["type"] == "urn:holdfast:problem:address-limit":
			refused++
		default:
			t.Fatalf("join %d: %d %s", i, r.status, r.raw)
		}
	}
	if held != 2 || refused != 4 {
		t.Fatalf("one address (cap 2 seats) holds %d seats through waitlist offers, %d joins refused; want 2 and 4", held, refused)
	}
}
