package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/httpapi"
	"github.com/holdfast/holdfast/internal/abuse"
)

// runAbuse runs the attacks of docs/RELIABILITY.md ("Abuse") against two holdfast
// serve processes it starts with default limits (one with signed holders), behind a
// trusted proxy (this process), and prints what each attack got.
func runAbuse(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("holdfast abuse", flag.ContinueOnError)
	var backends backendFlags
	seats := fs.Int("seats", 100_000, "seats of the show attacked (and sold by honest buyers meanwhile)")
	only := fs.String("attacks", "", "comma-separated words: run only the attacks whose name contains one (for example \"reconnect,keep-alive\")")
	storm := fs.String("storm", "", "run only a reconnect storm's clients against this event-stream URL and print what they got as JSON (abuse runs its storm so, in a process of its own)")
	attackerNice := fs.Int("attacker-nice", 19, "niceness of the reconnect storm's process (0: the servers' priority; an attacker on other machines takes none of their CPU)")
	stormRate := fs.Int("storm-rate", 0, "the reconnect storm's connects a second at most (0: as fast as its clients go); with --attacker-cpus, a storm of a given size")
	honestRate := fs.Int("honest-rate", 0, "the honest sale's confirmations a second in all (0: its 8 buyers 20 ms apart, about 300 a second on 2 cores)")
	attackerCPUs := fs.String("attacker-cpus", "", "CPUs the reconnect storm's process runs on (taskset -c list, e.g. 1); run abuse and the services on the others, so that the storm takes none of their CPU, as from other machines")
	backends.register(fs, true)
	if _, err := parseFlags(ctx, fs, args, getenv, stdout, stderr, 0); err != nil {
		return err
	}
	if *storm != "" {
		return json.NewEncoder(stdout).Encode(abuse.Storm(ctx, *storm, *stormRate))
	}
	if backends.databaseURL == "" || backends.redisURL == "" {
		return usageErr("DATABASE_URL and REDIS_URL must be set (make services prints them)")
	}
	if getenv("GOGC") == "" {
		// This process is the honest buyers' client, which measures: its collections
		// (it reads the 100,000-seat show's layout) would show in the latencies it
		// reports. The servers run theirs at serve's --gc-percent.
		debug.SetGCPercent(400)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "holdfast-abuse")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	secretFile := filepath.Join(dir, "holder.secret")
	if err := os.WriteFile(secretFile, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		return err
	}
	opToken := rand.Text()
	show := fmt.Sprintf("abuse-%d", time.Now().Unix())
	common := []string{"serve", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--trusted-proxy", "127.0.0.1",
		"--demo-show", show, "--demo-seats", fmt.Sprint(*seats), "--operator-token", opToken, "--database-url", backends.databaseURL, "--redis-url", backends.redisURL}
	ctx, cancel := context.WithCancel(ctx)
	sv := &servers{exe: exe, common: common, keyPrefix: getenv("HOLDFAST_KEY_PREFIX")}
	defer sv.stop(cancel)
	public, admin, err := sv.start(ctx)
	if err != nil {
		return err
	}
	signed, signedAdmin, err := sv.start(ctx, "--holder-jwt-secret-file", secretFile)
	if err != nil {
		return err
	}
	auth, err := httpapi.HolderSecretFile(secretFile, nil)
	if err != nil {
		return err
	}
	sign := func(holder string) string {
		tok, _, _ := auth.Sign(holder, time.Hour) // an HS256 secret: it signs
		return tok
	}
	if err := createShows(ctx, admin, opToken, 40); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "abuse: servers %s (unsigned) and %s (signed), show %s of %d seats\n", public, signed, show, *seats)
	// The log line counter counts both servers; the flood row reads its difference,
	// and the signed server is idle then.
	serveMore := func(ctx context.Context, extra ...string) (string, error) {
		public, _, err := sv.start(ctx, extra...)
		return strings.Replace(public, "[::]", "127.0.0.1", 1), err // an address on every interface: reached on loopback
	}
	rows, err := abuse.Run(ctx, abuse.Options{URL: public, AdminURL: admin, SignedURL: signed, Token: sign("hoarder"), Show: show,
		LogLines: sv.logLines.Load, Out: stdout, SignedAdminURL: signedAdmin, OperatorToken: opToken, Sign: sign, Serve: serveMore, Detached: detached(exe, *attackerNice, *attackerCPUs), StormRate: *stormRate, HonestRate: *honestRate, Only: onlyList(*only)})
	fmt.Fprintln(stdout, "\n| attack | measured |\n|---|---|")
	for _, r := range rows {
		fmt.Fprintf(stdout, "| %s | %s |\n", r.Attack, r.Result)
	}
	return err
}

// detached runs exe abuse with args in a process of its own under nice(1) at nice
// (below the servers' and the honest buyers' priority), on cpus when given (taskset(1)),
// and returns its output and the CPU it used.
func detached(exe string, nice int, cpus string) func(ctx context.Context, args ...string) ([]byte, float64, error) {
	return func(ctx context.Context, args ...string) ([]byte, float64, error) {
		argv := append([]string{"nice", "-n", fmt.Sprint(nice), exe, "abuse"}, args...)
		if cpus != "" {
			argv = append([]string{"taskset", "-c", cpus}, argv...)
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "DATABASE_URL=", "REDIS_URL=") // the storm needs neither
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, 0, fmt.Errorf("%v: %v: %s", argv, err, stderr.String())
		}
		st := cmd.ProcessState
		return out, (st.UserTime() + st.SystemTime()).Seconds(), nil
	}
}

// servers starts the holdfast serve processes the attacks run against: this
// executable, with common's flags and a test's Redis key prefix, counting the lines
// every one of them logs.
type servers struct {
	exe       string
	common    []string
	keyPrefix string
	logLines  atomic.Int64
	started   []*exec.Cmd
	exited    []chan struct{} // closed once the server of the same index has exited
}

// stop ends every server started — an interrupt, as ctx ends (cancel), then a kill
// past serverStopWait — and returns once each has exited: abuse leaves none running
// behind it (a process that returned at once could exit before the interrupts were
// sent).
func (sv *servers) stop(cancel context.CancelFunc) {
	cancel()
	for i, exited := range sv.exited {
		select {
		case <-exited:
		case <-time.After(serverStopWait):
			_ = sv.started[i].Process.Kill()
			<-exited
		}
	}
}

// serverStopWait bounds a server's graceful stop at the end of abuse: past serve's own
// drain deadline (--shutdown-timeout, 15 s by default).
const serverStopWait = 20 * time.Second

// start starts one serve with extra flags and returns its public and admin addresses
// once it listens; it ends with ctx.
func (sv *servers) start(ctx context.Context, extra ...string) (public, admin string, err error) {
	cmd := exec.CommandContext(ctx, sv.exe, append(sv.common, extra...)...)
	cmd.Env = append(os.Environ(), "HOLDFAST_KEY_PREFIX="+sv.keyPrefix)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	out, _ := cmd.StdoutPipe()
	logs, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	var last string // the last line serve wrote to stderr: its error, if it ended
	var waitErr error
	exited := make(chan struct{})
	sv.started, sv.exited = append(sv.started, cmd), append(sv.exited, exited)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(logs)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			sv.logLines.Add(1)
			last = sc.Text()
		}
		waitErr = cmd.Wait() // stderr ended: the process has exited
	}()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "holdfast: admin (metrics, show creation) on "); ok {
			admin = rest
		}
		if rest, ok := strings.CutPrefix(line, "holdfast: listening on "); ok {
			public = rest
			go io.Copy(io.Discard, out)
			return public, admin, nil
		}
	}
	<-exited
	return "", "", fmt.Errorf("serve %v did not start (%v): %s", extra, waitErr, last)
}

// createShows creates the small shows pool-0 … pool-(n-1) over the admin listener.
func createShows(ctx context.Context, admin, token string, n int) error {
	for i := range n {
		body := `{"seats":["A1","A2","A3","A4","A5"]}`
		if err := adminPut(ctx, admin+"/v1/shows/"+fmt.Sprintf("pool-%d", i), token, body); err != nil {
			return err
		}
	}
	return nil
}

func adminPut(ctx context.Context, url, token, body string) error {
	req, _ := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("PUT %s: %d", url, resp.StatusCode)
	}
	return nil
}

// onlyList splits --only into its words.
func onlyList(s string) []string {
	var out []string
	for _, w := range strings.Split(s, ",") {
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}
