package abuse

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// The reconnect storm's clients run in a process of its own at a lower CPU priority
// (Options.Detached; holdfast abuse --attacker-nice, 19 by default): in a deployment the attacker is on other machines, and
// its clients on the server's 2 cores would measure the machine, not the server. What
// the storm achieved (connects a second, snapshots served) is printed beside the honest
// buyers' figures, so a weaker storm shows as one.

// StormDuration and StormWorkers are the reconnect storm's length and the connects it
// has in flight at once.
const (
	StormDuration = 8 * time.Second
	StormWorkers  = 32
)

// StormResult is what a reconnect storm got.
type StormResult struct {
	Seconds   float64     `json:"seconds"`
	Snapshots int64       `json:"snapshots"` // streams that answered 200 and sent their first event
	Statuses  map[int]int `json:"statuses"`  // 0: no answer
	CPU       float64     `json:"cpu"`       // the attacker's CPU seconds (filled in by the caller)
}

// Storm connects to the event stream at url from StormWorkers clients, each a fresh
// address (X-Forwarded-For) every time, for StormDuration: it reads a served stream's
// first event (its snapshot) and closes it, and starts over; at most perSecond connects
// a second in all when it is above 0.
func Storm(ctx context.Context, url string, perSecond int) StormResult {
	tr := &http.Transport{MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}
	c := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	var st counts
	var n atomic.Int64
	t := time.Now()
	lim := rate.NewLimiter(rate.Inf, 0)
	if perSecond > 0 {
		lim = rate.NewLimiter(rate.Limit(perSecond), StormWorkers)
	}
	flood(ctx, StormWorkers, StormDuration, func(ctx context.Context, w, i int) {
		if lim.Wait(ctx) != nil {
			return // the storm's time was up
		}
		status, served := stormConnect(ctx, c, url, fmt.Sprintf("100.80.%d.%d", w, i%250))
		if ctx.Err() != nil && status <= 0 {
			return // the storm's time was up: not the server's answer
		}
		st.add(max(status, 0))
		if served {
			n.Add(1)
		}
	})
	return StormResult{Seconds: time.Since(t).Seconds(), Snapshots: n.Load(), Statuses: st.m}
}

// stormConnect opens one stream from addr and reads up to its first event.
func stormConnect(ctx context.Context, c *http.Client, url, addr string) (status int, served bool) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	q, _ := http.NewRequestWithContext(sctx, "GET", url, nil)
	q.Header.Set("X-Forwarded-For", addr)
	resp, err := c.Do(q)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body) // read to its end: the connection is used again unless the answer closes it
		return resp.StatusCode, false
	}
	br := bufio.NewReader(resp.Body)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return 200, false
		}
		if strings.HasPrefix(l, "data: ") {
			return 200, true
		}
	}
}

// reconnectStorm runs the storm in its own process (Options.Detached) while the honest
// buyers confirm, and prints the rate it achieved beside what they paid.
func (r *runner) reconnectStorm(ctx context.Context) string {
	var res StormResult
	var stormErr error
	honest := r.during(ctx, func() {
		out, cpu, err := r.o.Detached(ctx, "--storm", r.o.URL+"/v1/shows/"+r.o.Show+"/events", "--storm-rate", strconv.Itoa(r.o.StormRate))
		if err == nil {
			err = json.Unmarshal(out, &res)
		}
		res.CPU, stormErr = cpu, err
	})
	if stormErr != nil {
		return fmt.Sprintf("the storm did not run: %v", stormErr)
	}
	c := counts{m: res.Statuses}
	total := 0
	for _, v := range res.Statuses {
		total += v
	}
	capped := ""
	if r.o.StormRate > 0 {
		capped = fmt.Sprintf(", at most %d a second", r.o.StormRate)
	}
	return fmt.Sprintf("the storm (a process of its own, %d connects at a time%s): %.0f connects/s, %.0f snapshots/s served (%s), the attacker's CPU %.2f cores; %s",
		StormWorkers, capped, float64(total)/res.Seconds, float64(res.Snapshots)/res.Seconds, c.String(), res.CPU/res.Seconds, honest)
}
