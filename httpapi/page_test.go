package httpapi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestPageRoutes: the index, a show's page (404 for an unknown show) and the static
// files are served, with a content security policy that allows only the page's own
// files.
func TestPageRoutes(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/p1", "", "", map[string]any{"seats": seats(3)}), 201, "")
	for _, path := range []string{"/", "/shows/p1", "/static/app.js", "/static/app.css", "/static/index.js"} {
		r := a.do("GET", path, "", "", nil)
		if r.status != 200 || r.raw == "" {
			t.Fatalf("GET %s: %d", path, r.status)
		}
		if strings.HasSuffix(path, "/p1") && !strings.Contains(r.header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Fatalf("page CSP %q", r.header.Get("Content-Security-Policy"))
		}
	}
	a.want(a.do("GET", "/shows/nope", "", "", nil), 404, "not-found")
	if r := a.do("GET", "/static/nope.js", "", "", nil); r.status != 404 {
		t.Fatalf("missing static file: %d", r.status)
	}
}

// browser returns the path of a headless-capable Chromium. Under CI a missing browser
// fails the test (the services script installs it: services.sh browser).
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HOLDFAST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium: run ./internal/services/services.sh browser (apt-get install chromium) or set HOLDFAST_CHROMIUM")
	}
	t.Skip("no Chromium here (apt-get install chromium, or set HOLDFAST_CHROMIUM); under CI this fails")
	return ""
}

// newBrowser starts a headless Chromium for the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1000, 900),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	return ctx
}

// seatState reads a seat's drawn state (free, held, mine, sold) from the page.
func seatState(ctx context.Context, seat string) (string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`window.holdfastMap ? holdfastMap.state(%q) : ''`, seat)))
}

// clickSeat clicks where the page draws seat (an SVG circle or a spot on the canvas).
func clickSeat(ctx context.Context, seat string) error {
	p, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`holdfastMap.point(%q)`, seat)))
	if err != nil {
		return err
	}
	if len(p) != 2 {
		return fmt.Errorf("seat %s is not on the page", seat)
	}
	return chromedp.Do(ctx, chromedp.MouseClickXY(p[0], p[1]))
}

// waitColour waits until what is on the screen at seat — the canvas's pixel under it,
// or the SVG circle's fill — has the colour the page's stylesheet gives state (--free,
// --held, …): the seat is really drawn so, not only recorded as drawn.
func waitColour(t *testing.T, ctx context.Context, seat, state string) {
	t.Helper()
	js := fmt.Sprintf(`(() => {
		const id = %q, probe = document.createElement('i');
		probe.style.color = 'var(--%s)';
		document.body.append(probe);
		const want = getComputedStyle(probe).color;
		probe.remove();
		let got;
		if (holdfastMap.view === 'svg') {
			got = getComputedStyle(document.getElementById('seat-' + id)).fill;
		} else {
			const c = document.getElementById('map-canvas'), r = c.getBoundingClientRect(), [x, y] = holdfastMap.point(id);
			const d = c.getContext('2d').getImageData(Math.floor((x - r.left) * c.width / r.width), Math.floor((y - r.top) * c.height / r.height), 1, 1).data;
			got = 'rgb(' + d[0] + ', ' + d[1] + ', ' + d[2] + ')';
		}
		return got === want;
	})()`, seat, state)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("seat %s not shown in the colour of %s: %v", seat, state, err)
	}
}

// waitSeat waits until the page draws seat in state, and returns how long it took.
func waitSeat(t *testing.T, ctx context.Context, seat, state string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st, err := seatState(ctx, seat)
		if err != nil {
			t.Fatal(err)
		}
		if st == state {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("seat %s drawn %q after %v, want %q", seat, st, within, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSeatMapPageInABrowser drives the seat-map page in headless Chromium, drawn as
// SVG elements (the default for this size) and on a canvas (the default past 5,000
// seats): it draws every seat of the layout; a hold made through the API shows as held
// within 1 s without a reload; clicking a free seat and "Hold" holds it (mine);
// "Confirm" turns it sold; an expiry turns a seat free.
func TestSeatMapPageInABrowser(t *testing.T) {
	t.Parallel()
	for _, draw := range []string{"svg", "canvas"} {
		t.Run(draw, func(t *testing.T) {
			t.Parallel()
			seatMapPageInABrowser(t, draw)
		})
	}
}

func seatMapPageInABrowser(t *testing.T, draw string) {
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	venue := demo.Venue(300)
	layout := make([]map[string]any, len(venue))
	for i, s := range venue {
		layout[i] = map[string]any{"id": s.ID, "section": s.Section, "row": s.Row, "position": s.Position, "rank": s.Rank, "x": s.X, "y": s.Y}
	}
	a.want(a.do("PUT", "/v1/shows/venue", "", "", map[string]any{"layout": layout}), 201, "")
	ctx := newBrowser(t)
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	page := a.srv.URL + "/shows/venue"
	if draw == "canvas" {
		page += "?draw=canvas"
	}
	if err := chromedp.Do(tctx,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`body[data-seats="300"]`)),
	); err != nil {
		t.Fatal(err)
	}
	drawn, err := chromedp.Run(tctx, chromedp.Evaluate[int](`holdfastMap.view === 'canvas' ? holdfastMap.seats() * document.querySelectorAll('#map-canvas').length : document.querySelectorAll('#map circle').length`))
	if err != nil {
		t.Fatal(err)
	}
	if view, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`holdfastMap.view`)); view != draw || drawn != 300 {
		t.Fatalf("the page drew %d seats of 300 as %q, want %s", drawn, view, draw)
	}
	// Once the stream's snapshot is in, every seat is drawn free.
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`holdfastMap.states().every((s) => s === 'free')`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		st, _ := chromedp.Run(tctx, chromedp.Evaluate[[]string](`holdfastMap.states()`))
		t.Fatalf("not every seat drawn free after the snapshot: %v (%v)", err, st)
	}
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.Search(`//p[@id="status" and starts-with(., "live")]`))); err != nil {
		t.Fatal(err)
	}
	waitColour(t, tctx, "R01-005", "free")

	// Another customer's hold, through the API: held on the page within 1 s.
	a.want(a.do("POST", "/v1/shows/venue/holds", "bob", "", map[string]any{"seats": []string{"R01-005"}}), 201, "")
	took := waitSeat(t, tctx, "R01-005", "held", time.Second)
	t.Logf("a hold through the API was drawn after %v", took)
	waitColour(t, tctx, "R01-005", "held")

	// Click a free seat, then Hold: mine.
	if err := clickSeat(tctx, "R02-010"); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.ID(`hold`))); err != nil {
		t.Fatal(err)
	}
	waitSeat(t, tctx, "R02-010", "mine", 5*time.Second)
	if r := a.do("GET", "/v1/shows/venue/seats?format=json", "", "", nil); !strings.Contains(r.raw, `"seat":"R02-010","status":"held"`) {
		t.Fatal("the page's hold is not held on the server")
	}
	// Confirm: sold.
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.ID(`confirm`))); err != nil {
		t.Fatal(err)
	}
	waitSeat(t, tctx, "R02-010", "sold", 5*time.Second)
	if r := a.do("GET", "/v1/shows/venue/seats?format=json", "", "", nil); !strings.Contains(r.raw, `"seat":"R02-010","status":"sold"`) {
		t.Fatal("the page's confirmation is not sold on the server")
	}
	// An expiry: held, then free once the hold expires.
	h := a.do("POST", "/v1/shows/venue/holds", "carol", "", map[string]any{"seats": []string{"R03-003"}, "ttl_ms": 1500})
	a.want(h, 201, "")
	waitSeat(t, tctx, "R03-003", "held", time.Second)
	exp, _ := time.Parse(time.RFC3339Nano, h.body["expires_at"].(string))
	waitSeat(t, tctx, "R03-003", "free", time.Until(exp)+2*time.Second)
	if late := time.Since(exp); late < 0 {
		t.Fatalf("drawn free %v before the hold's expiry", -late)
	}
}

// saveScreenshot saves the page as a PNG.
func saveScreenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAreasOnThePageInABrowser: the page lists a show's standing areas with their
// places free, held and sold as the stream brings them, and holds and confirms a number
// of places of one.
func TestAreasOnThePageInABrowser(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	a.want(a.do("PUT", "/v1/shows/ga", "", "", venueBody(50)), 201, "")
	ctx := newBrowser(t)
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	floorSays := func(text string) {
		t.Helper()
		q := `//li[@data-area="FLOOR"]/span[starts-with(., "` + text + `")]`
		if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.Search(q))); err != nil {
			got, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById('area-list').textContent`))
			t.Fatalf("FLOOR on the page: %q, want %q (%v)", got, text, err)
		}
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(a.srv.URL+"/shows/ga")); err != nil {
		t.Fatal(err)
	}
	floorSays("FLOOR: 50 of 50 free (0 held, 0 sold)")
	a.want(a.do("POST", "/v1/shows/ga/holds", "bob", "", map[string]any{"places": places("FLOOR", 5)}), 201, "")
	floorSays("FLOOR: 45 of 50 free (5 held, 0 sold)")
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`(() => { const n = document.querySelector('li[data-area="FLOOR"] input'); n.value = 3; return true })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`li[data-area="FLOOR"] button`))); err != nil {
		t.Fatal(err)
	}
	floorSays("FLOOR: 42 of 50 free (8 held, 0 sold)")
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.ID(`confirm`))); err != nil {
		t.Fatal(err)
	}
	floorSays("FLOOR: 42 of 50 free (5 held, 3 sold)")
	if r := a.do("GET", "/v1/shows/ga/seats?format=json", "", "", nil); !strings.Contains(r.raw, `"id":"FLOOR","capacity":50,"free":42,"held":5,"sold":3`) {
		t.Fatalf("the server's map: %s", r.raw)
	}
}
