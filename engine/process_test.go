package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestMain lets the test binary be a second engine process: TestChaosEngineProcessPaused
// runs it again with HOLDFAST_HELPER_ENGINE set.
func TestMain(m *testing.M) {
	// Tests stop, freeze and restart Redis on purpose; go-redis's own "failed to dial"
	// lines would only bury the test output.
	redis.SetLogger(quietRedis{})
	if os.Getenv("HOLDFAST_HELPER_ENGINE") != "" {
		engineProcess()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// engineProcess starts an engine, says STARTED, reads the hold to confirm from stdin
// (so its start-up time, slow under the race detector, does not eat the hold's TTL),
// and confirms it, stopping between its Redis check and its write until a line arrives
// on stdin; it prints READY there and RESULT at the end.
func engineProcess() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("HOLDFAST_HELPER_DB"))
	if err != nil {
		fmt.Println("RESULT", err)
		return
	}
	defer pool.Close()
	rdb, err := testsvc.NewRedisClient()
	if err != nil {
		fmt.Println("RESULT", err)
		return
	}
	e, err := New(pool, rdb, &Config{KeyPrefix: os.Getenv("HOLDFAST_HELPER_PREFIX")})
	if err != nil {
		fmt.Println("RESULT", err)
		return
	}
	// Warm the connections so that the confirmation below does only its own work.
	if err := pool.Ping(context.Background()); err != nil {
		fmt.Println("RESULT", err)
		return
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		fmt.Println("RESULT", err)
		return
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("STARTED")
	raw, err := in.ReadString('\n')
	if err != nil {
		fmt.Println("RESULT no hold:", err)
		return
	}
	var h Hold
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		fmt.Println("RESULT bad hold:", err)
		return
	}
	e.hooks.beforeWrite = func(context.Context) {
		fmt.Println("READY") // the parent stops this process now, then lets it go on
		_, _ = in.ReadString('\n')
	}
	_, err = e.Confirm(context.Background(), h, ConfirmOptions{IdempotencyKey: "paused"})
	fmt.Println("RESULT", err)
}

// TestChaosEngineProcessPaused: an engine process is frozen (SIGSTOP) between its Redis
// check and its COMMIT for longer than the hold's TTL while a second engine sells the
// seat; resumed, its confirmation is refused and the seat has one booking.
func TestChaosEngineProcessPaused(t *testing.T) {
	v := newEnv(t)
	v.show("s1", "A1")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HOLDFAST_HELPER_ENGINE=1",
		"HOLDFAST_HELPER_DB="+v.pool.Config().ConnString(), "HOLDFAST_HELPER_PREFIX="+v.cfg.KeyPrefix)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var said []string
	waitFor := func(prefix string) string {
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the engine process ended before %q; it said %q", prefix, said)
				}
				said = append(said, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-timeout:
				t.Fatalf("the engine process never said %q; it said %q", prefix, said)
			}
		}
	}
	waitFor("STARTED")
	// The hold is taken only now, the process being ready to confirm it at once: its
	// TTL is what the process is frozen past, not its start-up.
	h := v.hold("s1", 2*time.Second, "alice", "A1")
	raw, _ := json.Marshal(h)
	fmt.Fprintf(stdin, "%s\n", raw)
	waitFor("READY")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// While it is frozen, its hold expires and another engine sells the seat.
	v.waitExpired(h)
	h2 := v.hold("s1", time.Minute, "bob", "A1")
	b2, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{})
	if err != nil {
		t.Fatalf("second engine: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin)
	res := waitFor("RESULT")
	if !strings.Contains(res, ErrStaleGeneration.Error()) && !strings.Contains(res, ErrHoldLost.Error()) {
		t.Fatalf("the resumed process: %q, want a stale generation or a lost hold", res)
	}
	_ = cmd.Wait()
	if n := v.bookings("s1"); n != 1 || v.claims("s1")["A1"] != b2.ID.String() {
		t.Fatalf("%d bookings; claim %v, want only %s", n, v.claims("s1"), b2.ID)
	}
	t.Logf("resumed process answered %q", strings.TrimPrefix(res, "RESULT "))
}
