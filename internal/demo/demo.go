// Package demo simulates a sale opening against a live holdfast HTTP API: many buyers
// at once, some abandoning, some releasing, some paying late, some retrying a confirm
// whose response was "lost". It then checks the outcome independently with SQL.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"golang.org/x/time/rate"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/internal/progress"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Options describe one simulated sale.
type Options struct {
	BaseURL string        // the API, e.g. http://127.0.0.1:8080
	Pool    *pgxpool.Pool // the same database, for the independent check
	ShowID  string        // created with Seats seats
	Seats   int
	// Places is the capacity of the show's standing area FLOOR, sold by count beside
	// the seats (0: no area): one buyer in ten asks for 1–4 places of it (joining its
	// waitlist when it is short), and one in twenty waits on its waitlist for 1 or 2.
	Places   int
	Buyers   int           // concurrent buyers
	HoldTTL  time.Duration // TTL buyers ask for; late payers wait past it
	Duration time.Duration // stop by then even if seats remain
	// Pace spreads the sale over about this long, so that it can be watched on the
	// page: buyers together ask for seats at about Seats/Pace a second (more, for the
	// holds that lapse). 0: as fast as they can.
	Pace time.Duration
	// StartIn is how long the show waits, created and unsold, before the buyers come.
	StartIn  time.Duration
	Progress io.Writer // a live progress line, or nil
	// AdminURL is the server's admin listener (holdfast serve --admin-addr), where the
	// show is created; OperatorToken authorizes that (--operator-token).
	AdminURL      string
	OperatorToken string
}

// Summary is what happened.
type Summary struct {
	Elapsed    time.Duration
	Requests   int64
	Outcomes   map[string]int64 // "op status/type" -> count
	Bookings   int              // confirmed bookings in the database
	SeatsSold  int              // claimed seats in the database
	Seats      int
	PlacesSold int // places of the area claimed by confirmed bookings in the database
	Places     int
	// PlacesMiscounted is the places sold past the area's capacity, plus the difference
	// between the area's sold count and its claimed places (must be 0).
	PlacesMiscounted int
	DoubleBookings   int // seats in two confirmed bookings (must be 0)
	MissingAcked     int // bookings the API acknowledged that the database lacks (must be 0)
	ReplayMismatch   int64
	Latency          map[string][3]time.Duration // op -> p50, p90, p99
	// TransportErrors counts requests that got no response (connection refused or
	// reset, timeouts).
	TransportErrors int64
	// RefusedPerBooking is, for each kind of buyer ("best-available", "pick-your-seat"),
	// hold attempts refused (seats taken, nothing fits) per booking made.
	RefusedPerBooking map[string]float64
	// WaitlistJoins is how many times buyers joined the standing area's waitlist;
	// WaitlistOffers the offers they were made.
	WaitlistJoins, WaitlistOffers int64
}

type client struct {
	base          string
	http          *http.Client
	operatorToken string
	admin         string       // the admin listener's base URL
	failed        atomic.Int64 // requests that got no response
}

// problem is the part of an error answer the buyers use.
type problem struct {
	Type      string   `json:"type"`
	Seats     []string `json:"seats"`
	Available *int     `json:"available"`
}

// call sends one request, backing off and trying again while the holder is rate
// limited (as a well-behaved client does), and decodes a JSON answer into out.
func (c *client) call(ctx context.Context, method, path, holder, key string, body, out any) (int, string, error) {
	st, p, err := c.callP(ctx, method, path, holder, key, body, out)
	return st, p.Type, err
}

// callP is call that returns the whole problem (its type without the prefix).
func (c *client) callP(ctx context.Context, method, path, holder, key string, body, out any) (int, problem, error) {
	for attempt := 1; ; attempt++ {
		st, p, err := c.once(ctx, method, path, holder, key, body, out)
		p.Type = strings.TrimPrefix(p.Type, "urn:holdfast:problem:")
		if err != nil || st != http.StatusTooManyRequests || attempt == 20 {
			return st, p, err
		}
		select {
		case <-ctx.Done():
			return st, problem{Type: "rate-limited"}, ctx.Err()
		case <-time.After(time.Duration(50+rand.IntN(100*attempt)) * time.Millisecond):
		}
	}
}

func (c *client) once(ctx context.Context, method, path, holder, key string, body, out any) (int, problem, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	base := c.base
	if method == http.MethodPut { // show creation, the demo's one operator route
		base = c.admin
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, problem{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if holder != "" {
		req.Header.Set("Holder-Id", holder)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if method == http.MethodPut && c.operatorToken != "" { // show creation, the demo's one operator route
		req.Header.Set("Authorization", "Bearer "+c.operatorToken)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			c.failed.Add(1) // no response at all: the server is down or the network is
		}
		return 0, problem{}, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var p problem
	if resp.StatusCode >= 400 {
		_ = json.Unmarshal(data, &p)
		return resp.StatusCode, p, nil
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, p, err
		}
	}
	return resp.StatusCode, p, nil
}

type hold struct {
	Show       string    `json:"show"`
	Seats      []string  `json:"seats"`
	Token      string    `json:"token"`
	Generation int64     `json:"generation"`
	ExpiresAt  time.Time `json:"expires_at"`
	Places     []any     `json:"places,omitempty"` // presented back: they name the hold's place keys
}

type booking struct {
	ID    string   `json:"id"`
	Seats []string `json:"seats"`
}

// recorder counts outcomes and latencies.
type recorder struct {
	mu        sync.Mutex
	outcomes  map[string]int64
	latencies map[string][]time.Duration
	requests  atomic.Int64
	acked     []string
	holdsOK   atomic.Int64
	booked    atomic.Int64
	// waitJoins and waitOffers count the joins of the standing area's waitlist, and the
	// offers made to them.
	waitJoins, waitOffers atomic.Int64
	// by kind of buyer: 0 pick-your-seat, 1 best-available
	refusedBy [2]atomic.Int64
	bookedBy  [2]atomic.Int64
	mismatch  atomic.Int64
}

func (r *recorder) add(op string, status int, typ string, d time.Duration) {
	r.requests.Add(1)
	key := fmt.Sprintf("%s %d", op, status)
	if typ != "" {
		key += " " + typ
	}
	r.mu.Lock()
	r.outcomes[key]++
	r.latencies[op] = append(r.latencies[op], d)
	r.mu.Unlock()
}

// Run simulates the sale and checks it.
func Run(ctx context.Context, o Options) (Summary, error) {
	if o.Seats < 1 || o.Buyers < 1 {
		return Summary{}, fmt.Errorf("demo needs seats and buyers")
	}
	c := &client{base: strings.TrimRight(o.BaseURL, "/"), admin: strings.TrimRight(o.AdminURL, "/"), operatorToken: o.OperatorToken, http: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.Buyers, MaxConnsPerHost: o.Buyers},
	}}
	venue := Venue(o.Seats)
	seats := make([]string, len(venue))
	layout := make([]map[string]any, len(venue))
	for i, s := range venue {
		seats[i] = s.ID
		layout[i] = map[string]any{"id": s.ID, "section": s.Section, "row": s.Row, "position": s.Position, "rank": s.Rank, "x": s.X, "y": s.Y}
	}
	show := map[string]any{"layout": layout}
	if o.Places > 0 {
		show["areas"] = []map[string]any{{"id": "FLOOR", "section": "Floor", "capacity": o.Places, "category": standingCategory}}
	}
	status, typ, err := c.call(ctx, http.MethodPut, "/v1/shows/"+o.ShowID, "", "", show, nil)
	if err != nil || status >= 300 {
		hint := ""
		if status == http.StatusForbidden || status == http.StatusUnauthorized {
			hint = " (the server's operator token is needed to create a show: --operator-token or HOLDFAST_OPERATOR_TOKEN)"
		}
		return Summary{}, fmt.Errorf("create show %s: status %d %s %v%s", o.ShowID, status, typ, err, hint)
	}
	if o.StartIn > 0 {
		select {
		case <-ctx.Done():
			return Summary{}, ctx.Err()
		case <-time.After(o.StartIn):
		}
	}
	rec := &recorder{outcomes: map[string]int64{}, latencies: map[string][]time.Duration{}}
	view := newSeatView(seats)
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	start := time.Now()

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if o.Progress != nil {
		progressDone.Go(func() { showProgress(o.Progress, stopProgress, start, o.Seats, view, rec) })
	}

	var pace *rate.Limiter // seats asked for per second, all buyers together
	if o.Pace > 0 {
		// A third more than the seats: holds that lapse, are released or come too late
		// give theirs back.
		perSecond := 1.33 * float64(o.Seats+o.Places) / o.Pace.Seconds()
		pace = rate.NewLimiter(rate.Limit(perSecond), max(4, int(perSecond/5)))
	}
	var wg sync.WaitGroup
	for b := range o.Buyers {
		best := b%5 != 0 // four buyers in five ask for the best available
		holder := fmt.Sprintf("buyer-%04d", b)
		if o.Places > 0 && b%10 == 3 { // one in ten stands
			wg.Go(func() { standing(ctx, c, o, rec, pace, holder) })
			continue
		}
		if o.Places > 0 && b%20 == 7 { // one in twenty waits in line for standing places
			wg.Go(func() {
				for ctx.Err() == nil {
					n := 1 + rand.IntN(2)
					if pace != nil && pace.WaitN(ctx, n) != nil {
						return
					}
					waitlisted(ctx, c, o, rec, holder, n)
					time.Sleep(o.HoldTTL / 4)
				}
			})
			continue
		}
		wg.Go(func() { buyer(ctx, c, o, view, rec, pace, holder, best) })
	}
	// The sale ends when the seat map shows every seat sold (or at the deadline), or
	// when the server stops answering.
	var serverGone atomic.Bool
	wg.Go(func() {
		unanswered := 0
		for ctx.Err() == nil {
			var m struct {
				Seats []struct {
					Seat   string `json:"seat"`
					Status string `json:"status"`
				} `json:"seats"`
				Areas []struct {
					Sold int `json:"sold"`
				} `json:"areas"`
			}
			st, _, err := c.call(ctx, http.MethodGet, "/v1/shows/"+o.ShowID+"/seats?format=json", "", "", nil, &m)
			if err != nil && ctx.Err() == nil {
				if unanswered++; unanswered == 10 { // two seconds without an answer
					serverGone.Store(true)
					cancel()
					return
				}
			} else {
				unanswered = 0
			}
			if err == nil && st == 200 {
				sold := 0
				for _, s := range m.Seats {
					if s.Status == "sold" {
						sold++
						view.markSold(s.Seat)
					}
				}
				if sold == o.Seats && (o.Places == 0 || len(m.Areas) == 1 && m.Areas[0].Sold == o.Places) {
					cancel()
					return
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	wg.Wait()
	elapsed := time.Since(start)
	close(stopProgress)
	progressDone.Wait()

	sum := Summary{Elapsed: elapsed, Requests: rec.requests.Load(), Outcomes: rec.outcomes, Seats: o.Seats, Places: o.Places,
		ReplayMismatch: rec.mismatch.Load(), Latency: map[string][3]time.Duration{}, TransportErrors: c.failed.Load(),
		RefusedPerBooking: map[string]float64{}, WaitlistJoins: rec.waitJoins.Load(), WaitlistOffers: rec.waitOffers.Load()}
	for k, name := range []string{"pick-your-seat", "best-available"} {
		sum.RefusedPerBooking[name] = float64(rec.refusedBy[k].Load()) / float64(max(1, rec.bookedBy[k].Load()))
	}
	if serverGone.Load() {
		return sum, fmt.Errorf("the server at %s stopped answering mid-sale (%d requests never got a response)", o.BaseURL, sum.TransportErrors)
	}
	for op, ls := range rec.latencies {
		slices.Sort(ls)
		sum.Latency[op] = [3]time.Duration{pct(ls, 50), pct(ls, 90), pct(ls, 99)}
	}
	return sum, check(context.WithoutCancel(ctx), o, rec, &sum)
}

// check verifies the sale with SQL, independently of the engine.
func check(ctx context.Context, o Options, rec *recorder, sum *Summary) error {
	q := func(sql string, args ...any) (n int, err error) {
		err = o.Pool.QueryRow(ctx, sql, args...).Scan(&n)
		return
	}
	var err error
	if sum.Bookings, err = q("SELECT count(*) FROM bookings WHERE show_id = $1 AND status = 'confirmed'", o.ShowID); err != nil {
		return err
	}
	if sum.SeatsSold, err = q("SELECT count(*) FROM seat_claims WHERE show_id = $1", o.ShowID); err != nil {
		return err
	}
	if sum.DoubleBookings, err = q(`SELECT count(*) FROM (
		SELECT bs.seat_id FROM booking_seats bs JOIN bookings b USING (show_id, booking_id)
		WHERE bs.show_id = $1 AND b.status = 'confirmed'
		GROUP BY bs.seat_id HAVING count(*) > 1) d`, o.ShowID); err != nil {
		return err
	}
	rec.mu.Lock()
	acked := slices.Clone(rec.acked)
	rec.mu.Unlock()
	found, err := q("SELECT count(*) FROM bookings WHERE show_id = $1 AND booking_id::text = ANY($2::text[])", o.ShowID, acked)
	if err != nil {
		return err
	}
	sum.MissingAcked = len(acked) - found
	return checkPlaces(q, o, sum)
}

// checkPlaces counts the area's places sold two ways, independently of the engine: the
// places of the confirmed bookings' claimed rows, and the area's own count.
func checkPlaces(q func(string, ...any) (int, error), o Options, sum *Summary) error {
	if o.Places == 0 {
		return nil
	}
	var err error
	if sum.PlacesSold, err = q(`SELECT COALESCE(sum(p.places), 0)::int FROM booking_places p JOIN bookings b USING (show_id, booking_id)
		WHERE p.show_id = $1 AND p.claimed AND b.status = 'confirmed'`, o.ShowID); err != nil {
		return err
	}
	counted, err := q("SELECT sold FROM areas WHERE show_id = $1 AND area_id = 'FLOOR'", o.ShowID)
	if err != nil {
		return err
	}
	sum.PlacesMiscounted = max(sum.PlacesSold-o.Places, 0) + max(counted-sum.PlacesSold, sum.PlacesSold-counted)
	return nil
}

// standing keeps buying 1–4 places of the standing area FLOOR until the sale ends:
// most confirm, some abandon the hold.
func standing(ctx context.Context, c *client, o Options, rec *recorder, pace *rate.Limiter, holder string) {
	for ctx.Err() == nil {
		n := 1 + rand.IntN(4)
		if pace != nil && pace.WaitN(ctx, min(n, pace.Burst())) != nil {
			return
		}
		var h hold
		t := time.Now()
		body := map[string]any{"places": []map[string]any{{"area": "FLOOR", "count": n}}, "ttl_ms": o.HoldTTL.Milliseconds()}
		st, p, err := c.callP(ctx, http.MethodPost, "/v1/shows/"+o.ShowID+"/holds", holder, "", body, &h)
		if err != nil {
			continue
		}
		rec.add("hold places", st, p.Type, time.Since(t))
		if st != http.StatusCreated {
			if p.Type == "places-unavailable" {
				waitlisted(ctx, c, o, rec, holder, n) // the area is short: wait in line for places
			} else {
				time.Sleep(o.HoldTTL / 4) // the area is short: wait for holds to end
			}
			continue
		}
		rec.holdsOK.Add(1)
		if rand.IntN(5) == 0 {
			continue // abandoned: the places come back at the hold's expiry, to the waitlist
		}
		confirm(ctx, c, rec, holder, fmt.Sprintf("%s-%d", holder, h.Generation), h, false)
	}
}

// standingCategory is the category of the standing area, whose waitlist the standing
// buyers who find it short join.
const standingCategory = "GA"

// waitlisted joins holder to the standing area's waitlist for n places and follows the
// entry until its offer comes, then confirms it — or, one time in five, lets it expire,
// so that it goes to the next in line. A buyer waits for four hold TTLs at most: the
// last places of the area may be fewer than anyone in line waits for, and a buyer who
// asks again for fewer takes them.
func waitlisted(ctx context.Context, c *client, o Options, rec *recorder, holder string, n int) {
	path := "/v1/shows/" + o.ShowID + "/waitlist"
	body := map[string]any{"category": standingCategory, "count": n, "offer_ttl_ms": o.HoldTTL.Milliseconds()}
	t := time.Now()
	st, p, err := c.callP(ctx, http.MethodPost, path, holder, "", body, nil)
	if err != nil {
		return
	}
	rec.add("waitlist join", st, p.Type, time.Since(t))
	if st != http.StatusCreated {
		return
	}
	rec.waitJoins.Add(1)
	for until := time.Now().Add(4 * o.HoldTTL); ctx.Err() == nil && time.Now().Before(until); {
		var entry struct {
			Offer *hold `json:"offer"`
		}
		st, _, err := c.callP(ctx, http.MethodGet, path+"?category="+standingCategory, holder, "", nil, &entry)
		switch {
		case err == nil && st == http.StatusOK && entry.Offer != nil:
			rec.waitOffers.Add(1)
			if rand.IntN(5) > 0 {
				confirm(ctx, c, rec, holder, fmt.Sprintf("%s-w%d", holder, entry.Offer.Generation), *entry.Offer, false)
			}
			return
		case err == nil && st != http.StatusOK:
			return // the entry ended
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// buyer keeps trying to buy 1–4 seats until the sale ends: most buyers (best) ask for
// that many seats together, best available; the others pick seats from the seat map,
// mostly among the best 10%.
func buyer(ctx context.Context, c *client, o Options, view *seatView, rec *recorder, pace *rate.Limiter, holder string, best bool) {
	kind := 0
	if best {
		kind = 1
	}
	want := 0 // a best-available buyer told fewer seats are left asks for fewer
	for ctx.Err() == nil {
		n := 1 + rand.IntN(4)
		if want > 0 {
			n, want = want, 0
		}
		if pace != nil && pace.WaitN(ctx, min(n, pace.Burst())) != nil {
			return
		}
		body := map[string]any{"count": n, "adjacent": true, "ttl_ms": o.HoldTTL.Milliseconds()}
		op := "hold best"
		if !best {
			want := view.pick(n)
			if len(want) == 0 {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			body, op = map[string]any{"seats": want, "ttl_ms": o.HoldTTL.Milliseconds()}, "hold"
		}
		var h hold
		t := time.Now()
		st, p, err := c.callP(ctx, http.MethodPost, "/v1/shows/"+o.ShowID+"/holds", holder, "", body, &h)
		if err != nil {
			continue
		}
		rec.add(op, st, p.Type, time.Since(t))
		if st == http.StatusConflict && p.Type == "seats-unavailable" {
			rec.refusedBy[kind].Add(1)
			switch {
			case !best:
				view.markBusy(p.Seats, o.HoldTTL/2) // look elsewhere for a while
			case p.Available != nil && *p.Available > 0 && *p.Available < n:
				want = *p.Available // fewer seats are left than asked for
			default:
				// Nothing fits now: wait for holds to expire or be released.
				time.Sleep(o.HoldTTL / 4)
			}
		}
		if st != http.StatusCreated {
			continue
		}
		rec.holdsOK.Add(1)
		key := fmt.Sprintf("%s-%d", holder, h.Generation)
		switch r := rand.IntN(100); {
		case r < 10: // abandon: the hold expires by itself
		case r < 20: // change of mind
			t = time.Now()
			st, typ, _ := c.call(ctx, http.MethodPost, "/v1/holds/release", holder, "", h, nil)
			rec.add("release", st, typ, time.Since(t))
		case r < 30: // pays late, after the hold expired
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.HoldTTL + 200*time.Millisecond):
			}
			if confirm(ctx, c, rec, holder, key, h, false) {
				rec.bookedBy[kind].Add(1)
			}
		case r < 40: // the response is "lost": retry with the same key
			if confirm(ctx, c, rec, holder, key, h, true) {
				rec.bookedBy[kind].Add(1)
			}
		default:
			if confirm(ctx, c, rec, holder, key, h, false) {
				rec.bookedBy[kind].Add(1)
			}
		}
	}
}

// confirm books a hold (and with retry, confirms again with the same key, as a client
// whose answer was lost would); it reports whether the booking was made.
func confirm(ctx context.Context, c *client, rec *recorder, holder, key string, h hold, retry bool) bool {
	var b booking
	t := time.Now()
	st, typ, err := c.call(ctx, http.MethodPost, "/v1/bookings", holder, key, h, &b)
	if err != nil {
		return false
	}
	rec.add("confirm", st, typ, time.Since(t))
	if st == http.StatusCreated {
		rec.booked.Add(1)
		rec.mu.Lock()
		rec.acked = append(rec.acked, b.ID)
		rec.mu.Unlock()
	}
	if retry && st == http.StatusCreated {
		// The retry of a request whose response was lost: with the same key it gets the
		// same booking. A 503 (a failover under way) is not an answer: retried, as a
		// client would, a few times; only a definite other answer is a mismatch.
		for attempt := 1; attempt <= 10; attempt++ {
			var again booking
			t = time.Now()
			st2, typ2, err := c.call(ctx, http.MethodPost, "/v1/bookings", holder, key, h, &again)
			if err != nil {
				return true
			}
			rec.add("confirm-retry", st2, typ2, time.Since(t))
			if st2 == http.StatusServiceUnavailable {
				select {
				case <-ctx.Done():
					return true
				case <-time.After(time.Duration(100*attempt) * time.Millisecond):
				}
				continue
			}
			if st2 != http.StatusOK || again.ID != b.ID {
				rec.mismatch.Add(1)
			}
			break
		}
	}
	return st == http.StatusCreated
}

// seatView is the buyers' shared idea of which seats may be free.
type seatView struct {
	mu    sync.Mutex
	seats []string
	sold  map[string]bool
	busy  map[string]time.Time // held by someone, until about then
}

func newSeatView(seats []string) *seatView {
	return &seatView{seats: seats, sold: map[string]bool{}, busy: map[string]time.Time{}}
}

func (v *seatView) markBusy(seats []string, d time.Duration) {
	v.mu.Lock()
	until := time.Now().Add(d)
	for _, s := range seats {
		v.busy[s] = until
	}
	v.mu.Unlock()
}

func (v *seatView) markSold(s string) {
	v.mu.Lock()
	v.sold[s] = true
	v.mu.Unlock()
}

func (v *seatView) soldCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.sold)
}

// pick chooses up to n seats not known sold, 80% of the time among the best 10%.
func (v *seatView) pick(n int) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var free, best []string
	bestN := max(1, len(v.seats)/10)
	now := time.Now()
	for i, s := range v.seats {
		if v.sold[s] || now.Before(v.busy[s]) {
			continue
		}
		free = append(free, s)
		if i < bestN {
			best = append(best, s)
		}
	}
	pool := free
	if len(best) > 0 && rand.IntN(100) < 80 {
		pool = best
	}
	rand.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	return slices.Clone(pool[:min(n, len(pool))])
}

// Print writes the summary for a person.
func (s Summary) Print(w io.Writer) {
	places := ""
	if s.Places > 0 {
		places = fmt.Sprintf(" and %d/%d places", s.PlacesSold, s.Places)
	}
	fmt.Fprintf(w, "sale over in %s: %d/%d seats sold%s in %d bookings, %d requests (%.0f/s)\n",
		s.Elapsed.Round(time.Millisecond), s.SeatsSold, s.Seats, places, s.Bookings, s.Requests, float64(s.Requests)/s.Elapsed.Seconds())
	fmt.Fprintf(w, "refused hold attempts per booking: best-available %.2f, pick-your-seat %.2f\n",
		s.RefusedPerBooking["best-available"], s.RefusedPerBooking["pick-your-seat"])
	if s.Places > 0 {
		fmt.Fprintf(w, "standing area's waitlist: %d joins, %d offers\n", s.WaitlistJoins, s.WaitlistOffers)
	}
	fmt.Fprintln(w, "outcomes:")
	for _, k := range slices.Sorted(maps.Keys(s.Outcomes)) {
		fmt.Fprintf(w, "  %-40s %d\n", k, s.Outcomes[k])
	}
	fmt.Fprintln(w, "latency (p50 / p90 / p99):")
	for _, op := range slices.Sorted(maps.Keys(s.Latency)) {
		l := s.Latency[op]
		fmt.Fprintf(w, "  %-14s %8s %8s %8s\n", op, l[0].Round(10*time.Microsecond), l[1].Round(10*time.Microsecond), l[2].Round(10*time.Microsecond))
	}
	if s.TransportErrors > 0 {
		fmt.Fprintf(w, "requests without a response: %d\n", s.TransportErrors)
	}
	fmt.Fprintf(w, "independent SQL check: double bookings %d, acknowledged bookings missing %d, replay mismatches %d, places oversold or miscounted %d\n",
		s.DoubleBookings, s.MissingAcked, s.ReplayMismatch, s.PlacesMiscounted)
}

// OK reports whether the sale kept every promise.
func (s Summary) OK() bool {
	return s.DoubleBookings == 0 && s.MissingAcked == 0 && s.ReplayMismatch == 0 && s.PlacesMiscounted == 0
}

// showProgress shows the sale as it goes until stop is closed: a progress bar of seats sold
// on a terminal, a plain line every two seconds elsewhere (a log, CI).
func showProgress(w io.Writer, stop <-chan struct{}, start time.Time, seats int, view *seatView, rec *recorder) {
	progress.Show(w, stop, "seats sold", seats, view.soldCount, func() string {
		el := time.Since(start).Seconds()
		return fmt.Sprintf("holds %d, bookings %d, requests %d (%.0f/s)", rec.holdsOK.Load(), rec.booked.Load(),
			rec.requests.Load(), float64(rec.requests.Load())/el)
	})
}
