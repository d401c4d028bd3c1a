package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// Who a caller is decides whose allowance a request
// spends. Each test's clients connect from an address of their own (all of 127.0.0.0/8
// is loopback), so the server sees real peers, no proxy.

// fromAddr is a client whose connections come from ip.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64}, Timeout: 20 * time.Second}
}

// statuses tallies the answers of concurrent requests (t.Fatal is for the test's own
// goroutine).
type statuses struct {
	mu sync.Mutex
	m  map[int]int
}

func (s *statuses) send(c *http.Client, method, url string, h http.Header) {
	req, _ := http.NewRequest(method, url, nil)
	req.Header = h
	st := 0 // no answer
	if resp, err := c.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		st = resp.StatusCode
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[int]int{}
	}
	s.m[st]++
}

func (s *statuses) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.m)
}

// TestUnprovenHolderSpendsNoAllowance: with signed holders, reads that name a holder
// without proving it (Holder-Id alone, or with a bad token), 200 of them from four
// addresses, spend none of that holder's read allowance: the holder's 40 signed reads
// of its bookings and its waiting-room ticket all answer. The review saw 24 of 40 get
// 429, and the ticket too.
func TestUnprovenHolderSpendsNoAllowance(t *testing.T) {
	t.Parallel()
	path, secret := writeSecret(t)
	auth, err := HolderSecretFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Read buckets of 50 that do not refill within the test: what is spent stays spent.
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{HolderAuth: auth, ReadRateLimit: 0.001, ReadRateBurst: 50})
	a.want(a.do("PUT", "/v1/shows/room", "", "", map[string]any{"seats": seats(5)}), 201, "")
	a.want(a.do("PUT", "/v1/shows/room/rules", "", "", map[string]any{
		"queue": map[string]any{"opens_at": time.Now().Add(-time.Second).Format(time.RFC3339Nano)}}), 200, "")
	victim := bearer(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "victim", "exp": time.Now().Add(time.Hour).Unix()}))
	own := fromAddr("127.0.7.10")
	if r := a.doWith(own, a.srv, "POST", "/v1/shows/room/queue", victim, nil); r.status != 200 && r.status != 201 {
		t.Fatalf("the victim joins the room: %d %s", r.status, r.raw)
	}

	var attack statuses
	var wg sync.WaitGroup
	paths := []string{"/v1/shows/room/seats", "/v1/shows/room/layout", "/v1/shows/room/queue", "/v1/holders/me/bookings",
		"/v1/holders/me/holds?show=room", "/v1/bookings/00000000-0000-4000-8000-000000000000"}
	for w := range 4 {
		c := fromAddr(fmt.Sprintf("127.0.7.%d", 66+w))
		for g := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 5 {
					h := http.Header{HolderHeader: {"victim"}}
					if i%2 == 1 {
						h.Set("Authorization", "Bearer not.a.token")
					}
					attack.send(c, "GET", a.srv.URL+paths[(g+i)%len(paths)], h)
				}
			}()
		}
	}
	wg.Wait()
	got := map[int]int{}
	for range 40 {
		got[a.doWith(own, a.srv, "GET", "/v1/holders/me/bookings", victim, nil).status]++
	}
	ticket := a.doWith(own, a.srv, "GET", "/v1/shows/room/queue", victim, nil)
	if got[200] != 40 || ticket.status != 200 {
		t.Fatalf("after 200 reads naming the victim without its token (%s), the victim's 40 signed reads of its bookings: %v, its ticket: %d %s; want all 200",
			attack.String(), got, ticket.status, ticket.raw)
	}
	// The attacker's own addresses paid: 4 × 50 reads, every one charged to its address.
	if r := a.doWith(fromAddr("127.0.7.66"), a.srv, "GET", "/v1/shows/room/seats", nil, nil); r.status != 429 {
		t.Fatalf("the attacker's address after 50 reads in a bucket of 50: %d", r.status)
	}
	// The victim's own reads are its to spend: the bucket binds the proven holder, from
	// any address.
	other := fromAddr("127.0.7.11")
	for range 9 {
		a.want(a.doWith(other, a.srv, "GET", "/v1/holders/me/bookings", victim, nil), 200, "")
	}
	a.want(a.doWith(other, a.srv, "GET", "/v1/holders/me/bookings", victim, nil), 429, "rate-limited")
}

// TestWrongOperatorTokensNeverLockOutTheOperator: wrong operator tokens from one
// address (a shared NAT, a bastion) are throttled, 5 then 429, but the right token
// from that same address is never refused, not even while 800 wrong guesses flood
// from it. The review saw five wrong tokens lock the operator out for about 10 s.
func TestWrongOperatorTokensNeverLockOutTheOperator(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{ReadRateLimit: 0.001, ReadRateBurst: 20})
	shared := fromAddr("127.0.7.66")
	op := func(tok string) reply {
		return a.doWith(shared, a.admin, "GET", "/v1/shows", http.Header{"Authorization": {"Bearer " + tok}}, nil)
	}
	for range 5 {
		a.want(op("wrong-guess-0000000000"), 401, "unauthorized")
	}
	a.want(op("wrong-guess-0000000000"), 429, "rate-limited")
	a.want(op(testOperatorToken), 200, "")

	var guesses statuses
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				guesses.send(shared, "GET", a.admin.URL+"/v1/shows", http.Header{"Authorization": {fmt.Sprintf("Bearer guess-%d-%d-0000000000", w, i)}})
			}
		}()
	}
	got := map[int]int{}
	for i := range 20 {
		r := a.doWith(shared, a.admin, "PUT", fmt.Sprintf("/v1/shows/op-%d", i), http.Header{"Authorization": {"Bearer " + testOperatorToken}},
			map[string]any{"seats": seats(2)})
		got[r.status]++
	}
	wg.Wait()
	if got[201] != 20 {
		t.Fatalf("the operator's 20 show creations from the guessing address: %v, want 20 × 201 (the guesses: %s)", got, guesses.String())
	}
	if s := guesses.String(); !strings.Contains(s, "429:") || strings.Contains(s, "200:") {
		t.Fatalf("800 wrong guesses: %s, want 429s and no 200", s)
	}
	if n := strings.Count(a.logs.String(), `"msg":"operator token refused"`); n < 5 || n > 6 {
		t.Fatalf("%d failures logged, want 5 (perhaps one more refilled): the throttled ones are counted, not logged", n)
	}
}
