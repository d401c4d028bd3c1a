// Package progress shows a long run as it goes: a progress bar on a terminal, a plain
// line every two seconds elsewhere (a log, CI). holdfast demo and holdfast bench use it.
package progress

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Show reports current() out of total, named what, with status() after it, until stop
// is closed; then it returns.
func Show(w io.Writer, stop <-chan struct{}, what string, total int, current func() int, status func() string) {
	start := time.Now()
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowDescriptionAtLineEnd())
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			_ = bar.Set(current())
			bar.Describe(what + " — " + status())
			select {
			case <-stop:
				_ = bar.Set(current())
				fmt.Fprintln(w)
				return
			case <-t.C:
			}
		}
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fmt.Fprintf(w, "[%5.1fs] %s %d/%d, %s\n", time.Since(start).Seconds(), what, current(), total, status())
		}
	}
}
