package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/demo"
	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestSeatMapPageZoomsOnAPhone: on a phone (390×844, device scale 3, touch) the whole
// venue of make run's show draws its seats about 10 px across; the buyer zooms into a
// section with its button, and every seat of it is then at least 24 px across (the map
// scrolls sideways), a tap on one selects it, and no row label touches its row's first
// seat.
func TestSeatMapPageZoomsOnAPhone(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	if _, err := a.s.e.EnsureShowLayout(t.Context(), "demo", demo.Venue(500)); err != nil {
		t.Fatal(err)
	}
	ctx := newBrowser(t)
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile),
		chromedp.Navigate(a.srv.URL+"/shows/demo"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="true"]`)),
	); err != nil {
		t.Fatal(err)
	}
	// The narrowest seat of a section, in CSS px.
	narrowest := func(section string) float64 {
		t.Helper()
		w, err := chromedp.Run(tctx, chromedp.Evaluate[float64](`(() => { let w = Infinity;
			for (const c of document.querySelectorAll('#map circle')) if (c.querySelector('title').textContent.includes(' · `+section+` row')) w = Math.min(w, c.getBoundingClientRect().width);
			return w; })()`))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	whole := narrowest("Circle")
	t.Logf("the whole venue on a phone: seats %.1f px across", whole)
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(`#zoom button[data-section="Circle"]`))); err != nil {
		t.Fatalf("no button zooms into the Circle: %v", err)
	}
	var zoomed float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if zoomed = narrowest("Circle"); zoomed >= 24 {
			break
		}
	}
	t.Logf("zoomed into the Circle: seats %.1f px across", zoomed)
	if zoomed < 24 {
		t.Fatalf("zoomed into a section, its narrowest seat is %.1f px across, want at least 24 (the whole venue: %.1f)", zoomed, whole)
	}
	// A tap on a seat of the section (scrolled into view) selects it.
	const seat = "R10-020"
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`document.getElementById('seat-`+seat+`').scrollIntoView({block: 'center', inline: 'center'}), true`)); err != nil {
		t.Fatal(err)
	}
	if err := clickSeat(tctx, seat); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`document.getElementById('seat-`+seat+`').classList.contains('selected')`, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("a tap on %s did not select it: %v", seat, err)
	}
	// Each row's label ends before its first seat begins, with a gap.
	gap, err := chromedp.Run(tctx, chromedp.Evaluate[float64](`(() => { let gap = Infinity;
		for (const l of document.querySelectorAll('#map text.row')) {
			const first = document.getElementById('seat-' + l.textContent + '-001');
			if (first) gap = Math.min(gap, first.getBoundingClientRect().left - l.getBoundingClientRect().right);
		}
		return gap; })()`))
	if err != nil || gap < 2 {
		t.Fatalf("a row label is %.1f px from its first seat (%v), want a gap of 2 px at least", gap, err)
	}
}
