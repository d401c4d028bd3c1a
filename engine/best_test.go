package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/lua"
)

// venueLayout is a layout of sections × rows × seats per row; rank favours the front
// rows and the middle of a row, as a real venue's would.
func venueLayout(sections, rows, perRow int) []Seat {
	var out []Seat
	for s := range sections {
		for r := range rows {
			for p := 1; p <= perRow; p++ {
				mid := p - (perRow+1)/2
				if mid < 0 {
					mid = -mid
				}
				out = append(out, Seat{ID: fmt.Sprintf("%c%02d-%03d", 'A'+s, r+1, p), Section: string(rune('A' + s)),
					Row: fmt.Sprintf("%02d", r+1), Position: p, Rank: s*1000 + r*40 + mid*3})
			}
		}
	}
	return out
}

// bestOffline computes, from the layout and the seats not available, the score sum of
// the best choice for a request, and whether one exists.
func bestOffline(sh *show, taken map[string]bool, req BestRequest) (int64, bool) {
	count := req.Count
	score := func(i int) int64 { return int64(sh.layout[i].Rank)*bestScale + int64(i) }
	in := func(i int) bool {
		return (req.Section == "" || sh.layout[i].Section == req.Section) && (req.Category == "" || sh.layout[i].Category == req.Category)
	}
	if !req.Adjacent {
		var free []int64
		for i, s := range sh.layout {
			if in(i) && !taken[s.ID] {
				free = append(free, score(i))
			}
		}
		if len(free) < count {
			return 0, false
		}
		slices.Sort(free)
		var sum int64
		for _, v := range free[:count] {
			sum += v
		}
		return sum, true
	}
	var best int64
	found := false
	for i := range sh.layout {
		if !in(i) {
			continue
		}
		var sum int64
		ok := true
		for j := i; j < i+count; j++ {
			if j >= len(sh.layout) || taken[sh.layout[j].ID] || (j > i && !sh.joinedRight(j-1)) {
				ok = false
				break
			}
			sum += score(j)
		}
		if ok && (!found || sum < best) {
			best, found = sum, true
		}
	}
	return best, found
}

func sumOf(sh *show, seats []string) int64 {
	var sum int64
	for _, s := range seats {
		i := sh.index[s]
		sum += int64(sh.layout[i].Rank)*bestScale + int64(i)
	}
	return sum
}

// adjacentSeats reports whether seats are side by side in one row.
func adjacentSeats(sh *show, seats []string) bool {
	idx := make([]int, len(seats))
	for k, s := range seats {
		idx[k] = sh.index[s]
	}
	sort.Ints(idx)
	for k := 1; k < len(idx); k++ {
		a, b := sh.layout[idx[k-1]], sh.layout[idx[k]]
		if a.Section != b.Section || a.Row != b.Row || b.Position != a.Position+1 {
			return false
		}
	}
	return true
}

// TestHoldBestChoosesTheBest: small cases whose answer is known.
func TestHoldBestChoosesTheBest(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if err := v.e.CreateShowLayout(t.Context(), "b", venueLayout(2, 3, 8)); err != nil {
		t.Fatal(err)
	}
	hold := func(req BestRequest) Hold {
		t.Helper()
		req.ShowID = "b"
		h, err := v.e.HoldBest(t.Context(), req)
		if err != nil {
			t.Fatalf("HoldBest(%+v): %v", req, err)
		}
		return h
	}
	// The two best seats: the middle of the front row of section A (A01-003 and
	// A01-005 rank alike; the layout order decides).
	if h := hold(BestRequest{Count: 2}); !slices.Equal(h.SeatIDs, []string{"A01-003", "A01-004"}) {
		t.Fatalf("best 2: %v", h.SeatIDs)
	}
	// Four together: the front row's best block is broken by the two held seats in the
	// middle; the best four left side by side.
	h4 := hold(BestRequest{Count: 4, Adjacent: true})
	if !adjacentSeats(v.showOf("b"), h4.SeatIDs) {
		t.Fatalf("adjacent 4 not adjacent: %v", h4.SeatIDs)
	}
	sh := v.showOf("b")
	taken := map[string]bool{"A01-003": true, "A01-004": true}
	if want, _ := bestOffline(sh, taken, BestRequest{Count: 4, Adjacent: true}); sumOf(sh, h4.SeatIDs) != want {
		t.Fatalf("adjacent 4 chose %v, not the best block", h4.SeatIDs)
	}
	// A section: the middle of its front row.
	if h := hold(BestRequest{Count: 3, Section: "B", Adjacent: true}); !slices.Equal(h.SeatIDs, []string{"B01-003", "B01-004", "B01-005"}) {
		t.Fatalf("section B, 3 together: %v", h.SeatIDs)
	}
	// Nothing fits: 9 together in rows of 8.
	_, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "b", Count: 9, Adjacent: true})
	var sue *SeatsUnavailableError
	if !errors.As(err, &sue) || len(sue.SeatIDs) != 0 || sue.Available == 0 {
		t.Fatalf("9 together: %v", err)
	}
	// The hold is an ordinary hold: it confirms.
	b, err := v.e.Confirm(t.Context(), h4, ConfirmOptions{})
	if err != nil || !slices.Equal(b.SeatIDs, h4.SeatIDs) {
		t.Fatalf("confirm a best hold: %v", err)
	}
	// Retried with the same token (a lost reply), the script answers the same seats.
	tag := holderTag("")
	ks := []string{sh.k.gen(), sh.k.holder(tag)}
	token := newToken()
	args := []any{tag, token, 60000, 0, 2, "0", "0 1", unreadRules(sh).arg}
	first, err := lua.Best.Run(t.Context(), v.rdb, ks, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	again, err := lua.Best.Run(t.Context(), v.rdb, ks, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(first[5:]) != fmt.Sprint(again[5:]) || first[1] != again[1] {
		t.Fatalf("retry answered %v, first %v", again, first)
	}
}

func (v *env) showOf(id string) *show {
	v.t.Helper()
	sh, err := v.e.show(v.t.Context(), id)
	if err != nil {
		v.t.Fatal(err)
	}
	return sh
}

// TestHoldBestConcurrent: 2,000 concurrent HoldBest calls (counts 1-6, adjacent and
// not, some in a section) on a 5,000-seat layout: no seat in two holds, every adjacent
// hold adjacent, every hold the best available at its moment (replayed in generation
// order, the order Redis ran them), and a refusal only when nothing of that shape was
// left at the end (seats only get taken here, so nothing fit at its moment either).
func TestHoldBestConcurrent(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 6 })
	if err := v.e.CreateShowLayout(t.Context(), "big", venueLayout(4, 50, 25)); err != nil {
		t.Fatal(err)
	}
	sh := v.showOf("big")
	results := make([]bestResult, 2000)
	var wg sync.WaitGroup
	var next sync.Mutex
	n := 0
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				next.Lock()
				i := n
				n++
				next.Unlock()
				if i >= len(results) {
					return
				}
				req := BestRequest{ShowID: "big", Count: 1 + rng.IntN(6), Adjacent: rng.IntN(2) == 0, TTL: time.Minute}
				if rng.IntN(4) == 0 {
					req.Section = string(rune('A' + rng.IntN(4)))
				}
				h, err := v.e.HoldBest(t.Context(), req)
				results[i] = bestResult{req, h, err}
			}
		}()
	}
	wg.Wait()
	granted, refused, held := checkBestResults(t, sh, results)
	t.Logf("%d granted, %d refused, %d of 5,000 seats held", granted, refused, held)
	if got := v.heldInRedis("big"); got != held {
		t.Fatalf("%d hold keys in Redis, %d seats granted", got, held)
	}
}

// bestResult is one best-available request and what it got.
type bestResult struct {
	req BestRequest
	h   Hold
	err error
}

// checkBestResults checks best-available requests made at once against the layout:
// every grant of the seats asked for (count, section, category, adjacency), no seat in
// two holds, each grant the best choice left when it was made (replayed in generation
// order against bestOffline), and a refusal only when nothing of its shape was left
// even at the end. It returns the grants, the refusals and the seats held.
func checkBestResults(t *testing.T, sh *show, results []bestResult) (granted, refused, held int) {
	t.Helper()
	var grants []bestResult
	final := map[string]bool{}
	for _, r := range results {
		switch {
		case r.err == nil:
			grants = append(grants, r)
			for _, s := range r.h.SeatIDs {
				seat := sh.layout[sh.index[s]]
				if final[s] {
					t.Fatalf("seat %s in two holds", s)
				}
				if (r.req.Category != "" && seat.Category != r.req.Category) || (r.req.Section != "" && seat.Section != r.req.Section) {
					t.Fatalf("%+v got %s, of section %q and category %q", r.req, s, seat.Section, seat.Category)
				}
				final[s] = true
			}
			if len(r.h.SeatIDs) != r.req.Count || (r.req.Adjacent && !adjacentSeats(sh, r.h.SeatIDs)) {
				t.Fatalf("%+v got %v", r.req, r.h.SeatIDs)
			}
		case errors.Is(r.err, ErrSeatsUnavailable):
		default:
			t.Fatalf("HoldBest %+v: %v", r.req, r.err)
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].h.Generation < grants[j].h.Generation })
	taken := map[string]bool{}
	for _, r := range grants {
		want, ok := bestOffline(sh, taken, r.req)
		if !ok || sumOf(sh, r.h.SeatIDs) != want {
			t.Fatalf("generation %d, %+v: chose %v (score %d), the best then scored %d (exists %v)",
				r.h.Generation, r.req, r.h.SeatIDs, sumOf(sh, r.h.SeatIDs), want, ok)
		}
		for _, s := range r.h.SeatIDs {
			taken[s] = true
		}
	}
	for _, r := range results {
		if r.err != nil {
			refused++
			if _, ok := bestOffline(sh, final, r.req); ok {
				t.Fatalf("%+v refused, but such seats are free even at the end", r.req)
			}
		}
	}
	return len(grants), refused, len(final)
}

func (v *env) heldInRedis(show string) int {
	v.t.Helper()
	sh := v.showOf(show)
	n := 0
	for _, s := range sh.seats {
		if v.rdb.Exists(v.t.Context(), sh.holdKeys[s]).Val() == 1 {
			n++
		}
	}
	return n
}

// TestHoldBestListsRunsGivenBack: a seat given back leaves its segment's runs to the
// next adjacent search (it marks the seat), which lists them before it searches, over
// more than one call when the marked segments have more seats than one call reads, and
// unlists the runs the seat joined.
func TestHoldBestListsRunsGivenBack(t *testing.T) {
	t.Parallel()
	const rows = 600 // segments of one section: more seats than one call reads (RELIST_SEATS)
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 100 })
	ctx := t.Context()
	sh := fragmentsGivenBack(t, v, "relist", venueLayout(1, rows, 4))
	four := BestRequest{ShowID: "relist", Count: 4, Adjacent: true, TTL: time.Minute}
	want, _ := bestOffline(sh, map[string]bool{}, four)
	h, err := v.e.HoldBest(ctx, four)
	if err != nil {
		t.Fatalf("4 together after the releases: %v", err)
	}
	if got := sumOf(sh, h.SeatIDs); got != want || !adjacentSeats(sh, h.SeatIDs) {
		t.Fatalf("4 together chose %v (score %d), the best scores %d", h.SeatIDs, got, want)
	}
	if n := v.rdb.SCard(ctx, sh.k.base+"rd:0").Val(); n != 0 {
		t.Fatalf("%d seats still marked after an adjacent search", n)
	}
	// The runs each released seat joined (the first search listed them: A..-001 and
	// A..-003..004) are unlisted, so that gives do not pile up listings.
	for _, c := range []int{1, 2} {
		if runs := v.rdb.ZRange(ctx, fmt.Sprintf("%srn:0:%d", sh.k.base, c), 0, -1).Val(); len(runs) != 0 {
			t.Fatalf("%d runs of %d seats still listed after the releases and a search, e.g. %q", len(runs), c, runs[0])
		}
	}
	v.indexConsistent("relist")
}

// TestHoldBestListingBoundedPerCall: the seats one adjacent search reads to list
// runs are bounded per call over all its sections, not per section: four sections of
// 600 marked seats each (2,400 seats of segments) take two calls.
func TestHoldBestListingBoundedPerCall(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 100 })
	sh := fragmentsGivenBack(t, v, "share", venueLayout(4, 150, 4))
	tag := holderTag("")
	ks := []string{sh.k.gen(), sh.k.holder(tag)}
	args := []any{tag, newToken(), 60000, 0, 4, "1", "0 1 2 3", unreadRules(sh).arg}
	first, err := lua.Best.Run(t.Context(), v.rdb, ks, args...).Slice()
	if err != nil || first[0] != "AGAIN" {
		t.Fatalf("the first call over 2,400 seats of marked segments answered %v %v, want AGAIN", first, err)
	}
	second, err := lua.Best.Run(t.Context(), v.rdb, ks, args...).Slice()
	if err != nil || second[0] != "OK" {
		t.Fatalf("the second call answered %v %v, want OK", second, err)
	}
	v.indexConsistent("share")
}

// TestHoldBestDropsWhatIsNotAMark: a member of a section's marked seats that is not
// "<segment>:<place>" is dropped by the adjacent search that meets it, which goes on to
// choose as it would without it; left there, it would be met again by every search.
func TestHoldBestDropsWhatIsNotAMark(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 100 })
	ctx := t.Context()
	sh := fragmentsGivenBack(t, v, "junk", venueLayout(1, 20, 4))
	junk := []any{"12", "3:", ":4", "a:1", "5:x", ""}
	if err := v.rdb.SAdd(ctx, sh.k.base+"rd:0", junk...).Err(); err != nil {
		t.Fatal(err)
	}
	four := BestRequest{ShowID: "junk", Count: 4, Adjacent: true, TTL: time.Minute}
	want, _ := bestOffline(sh, map[string]bool{}, four)
	h, err := v.e.HoldBest(ctx, four)
	if err != nil {
		t.Fatalf("4 together beside members that are not marks: %v", err)
	}
	if got := sumOf(sh, h.SeatIDs); got != want || !adjacentSeats(sh, h.SeatIDs) {
		t.Fatalf("4 together chose %v (score %d), the best scores %d", h.SeatIDs, got, want)
	}
	if left := v.rdb.SMembers(ctx, sh.k.base+"rd:0").Val(); len(left) != 0 {
		t.Fatalf("members left in the marked seats after an adjacent search: %q", left)
	}
	v.indexConsistent("junk")
}

// fragmentsGivenBack creates show with layout (rows of 4 seats), holds every row's
// second seat, has an adjacent search for 4 together replace every row's listing by
// its fragments (it finds none), then releases the holds: every row is free again
// and listed nowhere, its second seat marked.
func fragmentsGivenBack(t *testing.T, v *env, show string, layout []Seat) *show {
	t.Helper()
	ctx := t.Context()
	if err := v.e.CreateShowLayout(ctx, show, layout); err != nil {
		t.Fatal(err)
	}
	var second []string
	for _, s := range layout {
		if s.Position == 2 {
			second = append(second, s.ID)
		}
	}
	var holds []Hold
	for from := 0; from < len(second); from += 100 {
		h, err := v.e.Hold(ctx, HoldRequest{ShowID: show, SeatIDs: second[from:min(from+100, len(second))], TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	if h, err := v.e.HoldBest(ctx, BestRequest{ShowID: show, Count: 4, Adjacent: true, TTL: time.Minute}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("4 together with every row's second seat held: %v %v", h.SeatIDs, err)
	}
	for _, h := range holds {
		if err := v.e.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	sh := v.showOf(show)
	var marked int64
	for sec := range sh.sections {
		marked += v.rdb.SCard(ctx, fmt.Sprintf("%srd:%d", sh.k.base, sec)).Val()
	}
	if marked != int64(len(second)) {
		t.Fatalf("%d seats marked after the releases, want %d", marked, len(second))
	}
	return sh
}

// TestHoldBestSeatsComeBack: seats of expired and released best holds, and of
// cancelled bookings, are offered again; sold seats never.
func TestHoldBestSeatsComeBack(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if err := v.e.CreateShowLayout(t.Context(), "back", venueLayout(1, 1, 6)); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	all := func(ttl time.Duration) (Hold, error) {
		return v.e.HoldBest(ctx, BestRequest{ShowID: "back", Count: 6, Adjacent: true, TTL: ttl})
	}
	h, err := all(300 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := all(time.Minute); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("a held row offered again: %v", err)
	}
	v.waitExpired(h)
	h, err = all(time.Minute) // the expired hold's seats are given back
	if err != nil {
		t.Fatalf("after the expiry: %v", err)
	}
	if err := v.e.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	h, err = all(time.Minute)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	b, err := v.e.Confirm(ctx, h, ConfirmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.HoldBest(ctx, BestRequest{ShowID: "back", Count: 1}); !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatalf("a sold seat offered: %v", err)
	}
	if err := v.e.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := all(time.Minute); err != nil {
		t.Fatalf("after the cancellation: %v", err)
	}
	// A named hold takes its seat out of the index too.
	v2 := newEnv(t)
	if err := v2.e.CreateShowLayout(ctx, "mix", venueLayout(1, 1, 6)); err != nil {
		t.Fatal(err)
	}
	v2.hold("mix", time.Minute, "", "A01-003")
	h, err = v2.e.HoldBest(ctx, BestRequest{ShowID: "mix", Count: 3, Adjacent: true})
	if err != nil || !slices.Equal(h.SeatIDs, []string{"A01-004", "A01-005", "A01-006"}) {
		t.Fatalf("3 together beside a named hold on A01-003: %v %v", h.SeatIDs, err)
	}
}

// TestHoldBestBadInput: refused before anything is written.
func TestHoldBestBadInput(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	if err := v.e.CreateShowLayout(t.Context(), "bad", venueLayout(1, 2, 5)); err != nil {
		t.Fatal(err)
	}
	before := v.redisSnapshot()
	for _, c := range []struct {
		req  BestRequest
		want error
	}{
		{BestRequest{ShowID: "bad", Count: 0}, ErrInvalidArgument},
		{BestRequest{ShowID: "bad", Count: 11}, ErrInvalidArgument},
		{BestRequest{ShowID: "bad", Count: 1, Section: "Z"}, ErrNotFound},
		{BestRequest{ShowID: "nope", Count: 1}, ErrNotFound},
		{BestRequest{ShowID: "bad", Count: 1, TTL: -time.Second}, ErrInvalidArgument},
	} {
		if _, err := v.e.HoldBest(t.Context(), c.req); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v, want %v", c.req, err, c.want)
		}
	}
	if after := v.redisSnapshot(); after != before {
		t.Fatal("a refused call changed Redis")
	}
}

// indexConsistent checks a show's best-available index against its keys: every seat
// indexed, sold seats out of the sets, held seats apart (an expired hold may wait to be
// given back), free seats at their score, and the runs exactly the runs of free seats.
func (v *env) indexConsistent(show string) {
	v.t.Helper()
	ctx := v.t.Context()
	sh := v.showOf(show)
	const held = 1 << 52
	free := map[int]bool{}
	now := time.Now().UnixMilli()
	for i, s := range sh.layout {
		b := fmt.Sprint(sh.bucket[i])
		if got := v.rdb.HGet(ctx, sh.k.base+"mt:"+b, s.ID).Val(); got != sh.meta[i] {
			v.t.Fatalf("seat %s meta %q, want %q", s.ID, got, sh.meta[i])
		}
		sec := fmt.Sprint(sectionNumber(sh, i))
		score, err := v.rdb.ZScore(ctx, sh.k.base+"fr:"+sec, s.ID+"@"+b).Result()
		present := err == nil
		mark := v.rdb.HGet(ctx, sh.soldKeys[s.ID], s.ID).Val()
		sold := mark != "" && mark[0] != '-'
		live := v.rdb.Exists(ctx, sh.holdKeys[s.ID]).Val() == 1
		own := float64(int64(s.Rank)*bestScale + int64(i))
		switch {
		case sold:
			if present {
				v.t.Fatalf("sold seat %s still indexed (score %v)", s.ID, score)
			}
		case live:
			if !present || score < held {
				v.t.Fatalf("held seat %s indexed as free (%v, %v)", s.ID, present, score)
			}
		case present && score >= held:
			if int64(score)-held > now+50 {
				v.t.Fatalf("free seat %s indexed as held until %v", s.ID, int64(score)-held)
			}
		case !present || score != own:
			v.t.Fatalf("free seat %s: indexed %v at %v, want %v", s.ID, present, score, own)
		default:
			free[i] = true
		}
	}
	score := func(i int) int64 { return int64(sh.layout[i].Rank)*bestScale + int64(i) }
	// Each segment's record: its places' scores and seats.
	for i := 0; i < len(sh.layout); i++ {
		j := i
		for sh.joinedRight(j) {
			j++
		}
		var scores, seats []string
		for k := i; k <= j; k++ {
			scores = append(scores, fmt.Sprintf("%016d", score(k)))
			seats = append(seats, fmt.Sprintf("%s@%d", sh.layout[k].ID, sh.bucket[k]))
		}
		want := strings.Join(scores, "") + " " + strings.Join(seats, " ")
		if got := v.rdb.HGet(ctx, sh.k.base+"sg", fmt.Sprint(i)).Val(); got != want {
			v.t.Fatalf("segment %d (%s..%s):\n got %q\nwant %q", i, sh.layout[i].ID, sh.layout[j].ID, got, want)
		}
		i = j
	}
	// The listed runs (kept lazily): each a range of one segment, in the list of its
	// length, at its best seat's score; and every run of free seats within a listed one.
	type span struct{ from, to int } // layout indices
	var listed []span
	for sec := range sh.sections {
		for c := 1; c <= 10; c++ {
			for _, m := range v.rdb.ZRangeWithScores(ctx, fmt.Sprintf("%srn:%d:%d", sh.k.base, sec, c), 0, -1).Val() {
				var seg, lo, n int
				if _, err := fmt.Sscanf(m.Member.(string), "%d:%d:%d", &seg, &lo, &n); err != nil {
					v.t.Fatalf("listed run %q: %v", m.Member, err)
				}
				from, to := seg+lo-1, seg+lo+n-2
				if seg < 0 || to >= len(sh.layout) || sh.place[seg] != 1 || lo < 1 || n < 1 || min(n, 10) != c ||
					sh.place[from] != lo || (n > 1 && sh.place[to] != lo+n-1) || sectionNumber(sh, from) != sec {
					v.t.Fatalf("listed run %q in section %d, list %d: not a range of a segment", m.Member, sec, c)
				}
				best := score(from)
				for k := from; k <= to; k++ {
					best = min(best, score(k))
				}
				if int64(m.Score) != best {
					v.t.Fatalf("listed run %q at %v, its best seat's score is %d", m.Member, m.Score, best)
				}
				listed = append(listed, span{from, to})
			}
		}
	}
	// A seat given back since its segment's runs were listed is marked instead
	// ("<segment>:<place>"): an adjacent search lists the segment's runs first.
	owed := map[int]bool{}
	for sec := range sh.sections {
		for _, mark := range v.rdb.SMembers(ctx, fmt.Sprintf("%srd:%d", sh.k.base, sec)).Val() {
			seg, place, _ := strings.Cut(mark, ":")
			n, err := strconv.Atoi(seg)
			p, perr := strconv.Atoi(place)
			if err != nil || perr != nil || n < 0 || n+p-1 >= len(sh.layout) || sh.place[n] != 1 || sh.place[n+p-1] != p || sectionNumber(sh, n) != sec {
				v.t.Fatalf("seat %q marked in section %d: not a seat of it", mark, sec)
			}
			owed[n] = true
		}
	}
	for i := 0; i < len(sh.layout); i++ {
		if !free[i] {
			continue
		}
		j := i
		for free[j+1] && sh.joinedRight(j) {
			j++
		}
		if !owed[i-sh.place[i]+1] && !slices.ContainsFunc(listed, func(s span) bool { return s.from <= i && j <= s.to }) {
			v.t.Fatalf("the free seats %s..%s lie within no listed run, and their segment is not marked", sh.layout[i].ID, sh.layout[j].ID)
		}
		i = j
	}
}

// sectionNumber is the number of seat i's (layout index) section of the index.
func sectionNumber(sh *show, i int) int {
	return slices.Index(sh.sections, bestSection{sh.layout[i].Section, sh.layout[i].Category})
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestHoldBestMixed: best-available and named holds on one show, from two engines,
// with confirmations, releases, cancellations, short holds that expire, and a Redis
// restart in the middle: no seat is booked twice, no seat is in two live holds, and
// the index agrees with the keys at the end.
func TestHoldBestMixed(t *testing.T) {
	t.Parallel()
	v, srv := privateEnv(t, func(c *Config) { c.MaxSeatsPerHold = 6 })
	twin := v.twin()
	if err := v.e.CreateShowLayout(t.Context(), "mix", venueLayout(2, 8, 20)); err != nil {
		t.Fatal(err)
	}
	sh := v.showOf("mix")
	engines := []*Engine{v.e, twin}
	var wg sync.WaitGroup
	var restarted sync.Once
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for k := range 60 {
				if w == 0 && k == 30 {
					restarted.Do(srv.Restart)
				}
				e := engines[rng.IntN(2)]
				ttl := time.Duration(50+rng.IntN(400)) * time.Millisecond
				if rng.IntN(2) == 0 {
					ttl = time.Minute
				}
				var h Hold
				var err error
				if rng.IntN(3) == 0 {
					seat := sh.layout[rng.IntN(len(sh.layout))].ID
					h, err = e.Hold(t.Context(), HoldRequest{ShowID: "mix", SeatIDs: []string{seat}, TTL: ttl})
				} else {
					h, err = e.HoldBest(t.Context(), BestRequest{ShowID: "mix", Count: 1 + rng.IntN(4), Adjacent: rng.IntN(2) == 0, TTL: ttl})
				}
				if err != nil {
					if !errors.Is(err, ErrSeatsUnavailable) && !errors.Is(err, ErrUnavailable) {
						t.Errorf("hold: %v", err)
					}
					continue
				}
				other := engines[rng.IntN(2)]
				switch rng.IntN(4) {
				case 0:
					_ = other.Release(t.Context(), h)
				case 1, 2:
					if b, err := other.Confirm(t.Context(), h, ConfirmOptions{}); err == nil && rng.IntN(4) == 0 {
						_ = other.Cancel(t.Context(), b.ID)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := v.doubleBookings(); n != 0 {
		t.Fatalf("%d double bookings", n)
	}
	// Every expired hold given back, the index agrees with the keys.
	time.Sleep(500 * time.Millisecond)
	if _, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "mix", Count: 6, Adjacent: true, TTL: time.Minute}); err != nil && !errors.Is(err, ErrSeatsUnavailable) {
		t.Fatal(err)
	}
	v.indexConsistent("mix")
	// And a sold seat is never offered: everything left, best-available, then confirm.
	sold := len(v.claims("mix"))
	got := 0
	for {
		h, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "mix", Count: 1, TTL: time.Minute})
		if errors.Is(err, ErrSeatsUnavailable) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
			t.Fatalf("confirm seat %v offered as free: %v", h.SeatIDs, err)
		}
		got++
	}
	t.Logf("%d seats sold during the run, %d more sold one by one", sold, got)
	if n := len(v.claims("mix")); n+v.heldInRedis("mix") != len(sh.layout) || v.doubleBookings() != 0 {
		t.Fatalf("%d sold + %d held of %d seats", n, v.heldInRedis("mix"), len(sh.layout))
	}
}

// TestHoldBestAfterNamedHoldsAndReleases: the runs of free seats are kept lazily (a
// named hold does not split them; HoldBest does when it meets them), so HoldBest is
// checked here against the layout after every kind of change: one caller, named holds
// of 1-3 seats, releases, confirmations and best-available holds of 1-8 together or
// not, on rows of 40 (segments of 32 and 8). Every best-available hold is the best
// block left at its moment, and the index agrees with the keys along the way.
func TestHoldBestAfterNamedHoldsAndReleases(t *testing.T) {
	t.Parallel()
	v := newEnv(t, func(c *Config) { c.MaxSeatsPerHold = 8; c.MaxSeatsPerHolder = 1000 })
	if err := v.e.CreateShowLayout(t.Context(), "lazy", venueLayout(2, 4, 40)); err != nil {
		t.Fatal(err)
	}
	sh := v.showOf("lazy")
	rng := rand.New(rand.NewPCG(7, 22))
	taken := map[string]bool{} // held or sold
	var live []Hold
	bests := 0
	for step := range 600 {
		switch op := rng.IntN(10); {
		case op < 4: // a named hold of 1-3 seats side by side
			i := rng.IntN(len(sh.layout) - 3)
			n := 1 + rng.IntN(3)
			var seats []string
			for k := i; k < i+n; k++ {
				seats = append(seats, sh.layout[k].ID)
			}
			h, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "lazy", SeatIDs: seats, TTL: 10 * time.Minute})
			if errors.Is(err, ErrSeatsUnavailable) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range seats {
				taken[s] = true
			}
			live = append(live, h)
		case op < 6 && len(live) > 0: // a release, or a confirmation
			k := rng.IntN(len(live))
			h := live[k]
			live = slices.Delete(live, k, k+1)
			if rng.IntN(3) == 0 {
				if _, err := v.e.Confirm(t.Context(), h, ConfirmOptions{}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := v.e.Release(t.Context(), h); err != nil {
				t.Fatal(err)
			}
			for _, s := range h.SeatIDs {
				delete(taken, s)
			}
		default: // best available
			count, adjacent := 1+rng.IntN(8), rng.IntN(3) > 0
			want, ok := bestOffline(sh, taken, BestRequest{Count: count, Adjacent: adjacent})
			h, err := v.e.HoldBest(t.Context(), BestRequest{ShowID: "lazy", Count: count, Adjacent: adjacent, TTL: 10 * time.Minute})
			if !ok {
				if !errors.Is(err, ErrSeatsUnavailable) {
					t.Fatalf("step %d: %d (adjacent %v) when none fit: %v %v", step, count, adjacent, h.SeatIDs, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %d (adjacent %v): %v", step, count, adjacent, err)
			}
			if got := sumOf(sh, h.SeatIDs); got != want || (adjacent && !adjacentSeats(sh, h.SeatIDs)) {
				t.Fatalf("step %d: %d (adjacent %v) chose %v (score %d), the best left scores %d", step, count, adjacent, h.SeatIDs, got, want)
			}
			for _, s := range h.SeatIDs {
				taken[s] = true
			}
			live = append(live, h)
			bests++
		}
		if step%50 == 49 {
			v.indexConsistent("lazy")
		}
	}
	if bests < 100 {
		t.Fatalf("only %d best-available holds granted", bests)
	}
	v.indexConsistent("lazy")
}
