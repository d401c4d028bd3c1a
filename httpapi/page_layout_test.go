package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestSeatMapPageLoadsThenFits drives the page of make run's show (the demo venue,
// 500 seats) in headless Chromium. While the seat map's stream has not answered, no
// seat is drawn free (all "loading", the status says so); once it has, the seats show
// their states. On a laptop (1280×900) and a phone (390×844) the legend and the
// buttons are on screen without scrolling. HOLDFAST_SCREENSHOT=$PWD/docs/seatmap.png
// saves the laptop view mid-sale (make screenshots).
func TestSeatMapPageLoadsThenFits(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	venue := demo.Venue(500)
	if _, err := a.s.e.EnsureShowLayout(t.Context(), "demo", venue); err != nil {
		t.Fatal(err)
	}
	// Sell and hold part of it, as a sale under way.
	sold := 0
	for i, s := range venue {
		switch {
		case i%3 == 0 || (i > 60 && i < 120):
			h := a.do("POST", "/v1/shows/demo/holds", fmt.Sprint("buyer", i%5), "", map[string]any{"seats": []string{s.ID}})
			if h.status == 201 && a.do("POST", "/v1/bookings", fmt.Sprint("buyer", i%5), "", h.body).status == 201 {
				sold++
			}
		case i%7 == 0:
			a.want(a.do("POST", "/v1/shows/demo/holds", fmt.Sprint("holder", i%9), "", map[string]any{"seats": []string{s.ID}}), 201, "")
		}
	}
	// The page's event stream answers only when the test lets it.
	release := make(chan struct{})
	target, _ := url.Parse(a.srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	ctx := newBrowser(t)
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(front.URL+"/shows/demo"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-seats="500"]`)),
	); err != nil {
		t.Fatal(err)
	}
	counts := `(() => { const c = {}; for (const e of document.querySelectorAll('#map circle')) c[e.dataset.state] = (c[e.dataset.state] || 0) + 1; return JSON.stringify(c); })()`
	before, err := chromedp.Run(tctx, chromedp.Evaluate[string](counts))
	if err != nil {
		t.Fatal(err)
	}
	status, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
	if before != `{"loading":500}` || !strings.HasPrefix(status, "connecting") && !strings.HasPrefix(status, "loading") {
		t.Fatalf("before the map's stream answered: seats %s, status %q; want every seat loading", before, status)
	}
	close(release)
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="true"]`))); err != nil {
		t.Fatal(err)
	}
	after, _ := chromedp.Run(tctx, chromedp.Evaluate[string](counts))
	if strings.Contains(after, "loading") || !strings.Contains(after, fmt.Sprintf(`"sold":%d`, sold)) {
		t.Fatalf("after the snapshot: %s, want %d sold and none loading", after, sold)
	}
	inView := `(() => { const out = []; for (const id of ['hold', 'confirm', 'release']) out.push(document.getElementById(id));
		out.push(document.querySelector('.legend'));
		return out.every((e) => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight && r.left >= 0 && r.right <= window.innerWidth; }); })()`
	for _, vp := range []struct {
		name   string
		w, h   int64
		mobile bool
	}{{"laptop", 1280, 900, false}, {"phone", 390, 844, true}} {
		opts := []chromedp.EmulateViewportOption{}
		if vp.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		if err := chromedp.Do(tctx, chromedp.EmulateViewport(vp.w, vp.h, opts...)); err != nil {
			t.Fatal(err)
		}
		// The resize lays the page out again: wait (up to 5 s) for the controls to be in
		// view; never in view is the failure.
		var ok bool
		var err error
		for deadline := time.Now().Add(5 * time.Second); !ok && err == nil && time.Now().Before(deadline); {
			if ok, err = chromedp.Run(tctx, chromedp.Evaluate[bool](inView)); !ok && err == nil {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if path := os.Getenv("HOLDFAST_PHONE_SCREENSHOT"); path != "" && vp.mobile {
			png, _ := chromedp.Run(tctx, chromedp.CaptureScreenshot())
			_ = os.WriteFile(path, png, 0o644)
		}
		if err != nil || !ok {
			t.Errorf("on a %s (%d×%d) the legend or a button is off screen without scrolling (%v)", vp.name, vp.w, vp.h, err)
		}
	}
	// The index lists the show with its seats sold, a link to its page.
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(front.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#shows a[href="/shows/demo"]`))); err != nil {
		t.Fatalf("the index does not list the show: %v", err)
	}
	row, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector('#shows tbody tr').textContent`))
	if !strings.Contains(row, fmt.Sprintf("%d / 500", sold)) {
		t.Fatalf("the index's row %q, want %d / 500 sold", row, sold)
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(front.URL+"/shows/demo"), chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="true"]`))); err != nil {
		t.Fatal(err)
	}
	if path := os.Getenv("HOLDFAST_SCREENSHOT"); path != "" {
		if err := chromedp.Do(tctx, chromedp.EmulateViewport(1280, 900), chromedp.Click(chromedp.ID(`seat-`+venue[250].ID))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		png, err := chromedp.Run(tctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
