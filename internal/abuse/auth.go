package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The attacks on who a caller is.

func (r *runner) authAttacks() []attack {
	return []attack{
		{"unsigned holders on a non-loopback listener (serve --addr :0): anyone who knows a holder id", r.unsignedPublic},
		{"reads naming a signed holder without its token, from 4 addresses", r.unprovenReads},
		{"5 wrong operator tokens, then the right one, from one shared address", r.operatorLockout},
	}
}

// unsignedPublic starts serve on every interface without signed holders. If it starts,
// whoever reaches it and knows a holder id reads, cancels and blocks that holder's
// bookings and holds.
func (r *runner) unsignedPublic(ctx context.Context) string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the server, if it started
	base, err := r.o.Serve(ctx, "--addr", ":0")
	if err != nil {
		return "refused to start: " + err.Error()
	}
	victim, victimAddr, attackerAddr := http.Header{"Holder-Id": {"victim-39"}}, "203.0.113.10", "198.51.100.66"
	path := "/v1/shows/" + r.o.Show + "/holds"
	st, body, _ := r.req(ctx, base, "POST", path, victimAddr, victim, `{"count":2}`)
	if st == 201 {
		h := victim.Clone()
		h.Set("Idempotency-Key", "victim-39-order")
		st, _, _ = r.req(ctx, base, "POST", "/v1/bookings", victimAddr, h, string(body))
	}
	r.req(ctx, base, "POST", path, victimAddr, victim, `{"count":2}`) // two seats held, not yet booked
	// The attacker, from its own address, names the victim.
	var bookings struct {
		Bookings []struct {
			ID    string   `json:"id"`
			Seats []string `json:"seats"`
		} `json:"bookings"`
	}
	lst, lb, _ := r.req(ctx, base, "GET", "/v1/holders/me/bookings", attackerAddr, victim, "")
	_ = json.Unmarshal(lb, &bookings)
	var holds struct {
		Seats []json.RawMessage `json:"seats"`
	}
	hst, hb, _ := r.req(ctx, base, "GET", "/v1/holders/me/holds?show="+r.o.Show, attackerAddr, victim, "")
	_ = json.Unmarshal(hb, &holds)
	cancelled := 0
	if len(bookings.Bookings) > 0 {
		cancelled, _, _ = r.req(ctx, base, "DELETE", "/v1/bookings/"+bookings.Bookings[0].ID, attackerAddr, victim, "")
	}
	var junk counts
	for range 60 {
		s, _, _ := r.req(ctx, base, "POST", path, attackerAddr, victim, `{"count":1}`)
		junk.add(s)
	}
	own, _, _ := r.req(ctx, base, "POST", path, victimAddr, victim, `{"count":1}`)
	return fmt.Sprintf("started on %s (the victim's booking: %d); naming the victim from another address: its bookings %d (%d listed), its holds %d (%d seats), cancel of its booking %d; 60 junk holds in its name: %s; the victim's own hold then: %d",
		base, st, lst, len(bookings.Bookings), hst, len(holds.Seats), cancelled, junk.String(), own)
}

// unprovenReads floods the signed server with reads that name a holder in Holder-Id
// and carry no token (or a bad one), while that holder reads its own bookings 40
// times and its waiting-room ticket with its token.
func (r *runner) unprovenReads(ctx context.Context) string {
	room := fmt.Sprintf("room-%d", time.Now().UnixNano())
	opens := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	for _, put := range [][2]string{{room, `{"seats":["A1","A2","A3","A4","A5"]}`}, {room + "/rules", `{"queue":{"opens_at":"` + opens + `"}}`}} {
		h := http.Header{"Authorization": {"Bearer " + r.o.OperatorToken}}
		if st, body, _ := r.req(ctx, r.o.SignedAdminURL, "PUT", "/v1/shows/"+put[0], "", h, put[1]); st >= 300 {
			return fmt.Sprintf("PUT /v1/shows/%s: %d %s", put[0], st, body)
		}
	}
	victim := http.Header{"Authorization": {"Bearer " + r.o.Sign("victim-39")}}
	const victimAddr = "203.0.113.20"
	joined, _, _ := r.req(ctx, r.o.SignedURL, "POST", "/v1/shows/"+room+"/queue", victimAddr, victim, "")

	fctx, stop := context.WithCancel(ctx)
	var attacker counts
	var sent atomic.Int64
	var wg sync.WaitGroup
	paths := []string{"/v1/shows/" + room + "/seats?format=compact", "/v1/shows/" + room + "/queue",
		"/v1/holders/me/bookings", "/v1/bookings/00000000-0000-4000-8000-000000000000"}
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; fctx.Err() == nil; i++ {
				h := http.Header{"Holder-Id": {"victim-39"}}
				if i%3 == 0 {
					h.Set("Authorization", "Bearer not.a.token")
				}
				st, _, _ := r.req(fctx, r.o.SignedURL, "GET", paths[i%len(paths)], fmt.Sprintf("198.51.100.%d", 70+w%4), h, "")
				attacker.add(st)
				sent.Add(1)
			}
		}()
	}
	for sent.Load() < 400 && ctx.Err() == nil { // the attacker's four address buckets spent first
		time.Sleep(10 * time.Millisecond)
	}
	var own counts
	for range 40 {
		st, _, _ := r.req(ctx, r.o.SignedURL, "GET", "/v1/holders/me/bookings", victimAddr, victim, "")
		own.add(st)
	}
	ticket, _, _ := r.req(ctx, r.o.SignedURL, "GET", "/v1/shows/"+room+"/queue", victimAddr, victim, "")
	stop()
	wg.Wait()
	return fmt.Sprintf("the attacker: %s; meanwhile the victim (joined the room: %d) read its bookings 40 times: %s; its waiting-room ticket: %d",
		attacker.String(), joined, own.String(), ticket)
}

// operatorLockout sends wrong operator tokens from one address (a shared NAT, a
// bastion), then the right one from the same address, then floods wrong ones while the
// operator works.
func (r *runner) operatorLockout(ctx context.Context) string {
	const shared = "198.51.100.99"
	op := func(ctx context.Context, tok string) int {
		st, _, _ := r.req(ctx, r.o.AdminURL, "GET", "/v1/shows", shared, http.Header{"Authorization": {"Bearer " + tok}}, "")
		return st
	}
	var first counts
	for i := range 5 {
		first.add(op(ctx, fmt.Sprintf("wrong-guess-%d-0000000000", i)))
	}
	right := op(ctx, r.o.OperatorToken)
	var guesses, operator counts
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 125 {
				guesses.add(op(ctx, fmt.Sprintf("guess-%d-%d-000000000000", w, i)))
			}
		}()
	}
	for range 20 {
		operator.add(op(ctx, r.o.OperatorToken))
	}
	wg.Wait()
	return fmt.Sprintf("5 wrong: %s; the right token next: %d; 2,000 more wrong from that address: %s; the operator's 20 requests meanwhile: %s",
		first.String(), right, guesses.String(), operator.String())
}
