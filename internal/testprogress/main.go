// Command testprogress runs go test and prints a line as each test finishes, instead of a
// line per package at its end: make test and make test-short use it on a terminal or in a
// log. A failed test's whole output follows its line; output that belongs to no test (a
// build error, a panic, a timeout) is printed as it comes. It ends with "N passed, N
// failed, N skipped" and exits as go test did.
//
//	go run ./internal/testprogress [go test flags] packages
//
// CI runs go test -v itself (make test GOTEST_FLAGS='… -v'): its output stays go test's own.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	events, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(2)
	}
	r := newReport(os.Stdout, time.Now())
	r.read(events)
	err = cmd.Wait()
	r.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(2)
	case r.failed > 0:
		os.Exit(1)
	}
}

// report keeps each running test's output until it ends, and the counts.
type report struct {
	w                       io.Writer
	start                   time.Time
	output                  map[string]*strings.Builder // by package and top-level test
	passed, failed, skipped int
}

func newReport(w io.Writer, start time.Time) *report {
	return &report{w: w, start: start, output: map[string]*strings.Builder{}}
}

// read handles each event of go test -json; a line that is not an event is printed.
func (r *report) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.handle(e)
	}
}

func (r *report) handle(e event) {
	pkg := strings.TrimPrefix(e.Package, "github.com/holdfast/holdfast/")
	if e.Test == "" {
		r.packageEvent(pkg, e)
		return
	}
	top, _, sub := strings.Cut(e.Test, "/")
	key := pkg + " " + top
	switch e.Action {
	case "output":
		b := r.output[key]
		if b == nil {
			b = &strings.Builder{}
			r.output[key] = b
		}
		b.WriteString(e.Output)
	case "pass", "fail", "skip":
		if sub {
			return // a subtest's output is its parent's; its result too
		}
		r.testEnded(key, e)
	}
}

// testEnded prints the test's line (and its output when it failed or skipped).
func (r *report) testEnded(key string, e event) {
	out := r.output[key]
	delete(r.output, key)
	label := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[e.Action]
	switch e.Action {
	case "pass":
		r.passed++
	case "fail":
		r.failed++
	case "skip":
		r.skipped++
	}
	fmt.Fprintf(r.w, "%s %-60s %6.2fs  [%s, %d passed, %d failed]\n",
		label, key, e.Elapsed, time.Since(r.start).Round(time.Second), r.passed, r.failed)
	if e.Action != "pass" && out != nil {
		fmt.Fprint(r.w, indent(out.String()))
	}
}

// packageEvent prints what belongs to no test: build output, panics, go test's own
// line per package (ok, FAIL, no test files).
func (r *report) packageEvent(pkg string, e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "output":
		if s := e.Output; s != "PASS\n" && s != "FAIL\n" && !strings.HasPrefix(s, "testing: warning: no tests to run") {
			fmt.Fprint(r.w, s)
		}
	case "fail":
		r.unfinished(pkg)
	}
}

// unfinished prints the output of the package's tests that never ended (a panic or a
// timeout stopped the test binary), and counts each as failed.
func (r *report) unfinished(pkg string) {
	for key, out := range r.output {
		if strings.HasPrefix(key, pkg+" ") {
			r.failed++
			fmt.Fprintf(r.w, "FAIL %s (did not finish)\n%s", key, indent(out.String()))
			delete(r.output, key)
		}
	}
}

func (r *report) summary() {
	fmt.Fprintf(r.w, "\n%d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
