package services

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// TestServicesNeverAdoptAnotherPostgres: services.sh, asked for a port where some
// other PostgreSQL answers, never takes that server for this checkout's — not while
// this checkout's runs on another port (start used to say "already running" and print
// the other server's URL, so that make run migrated and served against it), nor while
// none of its own runs.
func TestServicesNeverAdoptAnotherPostgres(t *testing.T) {
	foreign := testsvc.StartPostgres(t)
	dir, empty := testsvc.ReachableDir(t, "", "holdfast-services-"), testsvc.ReachableDir(t, "", "holdfast-services-")
	ours, redisPort := testsvc.FreePort(t), testsvc.FreePort(t)
	run := func(dir string, pgPort int, action string) (string, error) {
		cmd := exec.Command("./services.sh", action)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "REDIS_URL=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "HOLDFAST_SERVICES_DIR="+dir,
			fmt.Sprintf("HOLDFAST_PG_PORT=%d", pgPort), fmt.Sprintf("HOLDFAST_REDIS_PORT=%d", redisPort))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(dir, ours, "start"); err != nil {
		t.Fatalf("services.sh start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := run(dir, ours, "stop"); err != nil {
			t.Errorf("services.sh stop: %v\n%s", err, out)
		}
	})

	out, err := run(dir, foreign.Port, "start")
	if err == nil || strings.Contains(out, fmt.Sprintf("127.0.0.1:%d/holdfast", foreign.Port)) {
		t.Fatalf("start on the port of another PostgreSQL, this checkout's running on %d: err %v, output:\n%s", ours, err, out)
	}
	if want := fmt.Sprintf("runs on port %d, not %d", ours, foreign.Port); !strings.Contains(out, want) {
		t.Errorf("start's refusal does not say %q:\n%s", want, out)
	}
	out, _ = run(dir, foreign.Port, "status")
	if want := fmt.Sprintf("postgresql: this checkout's runs on 127.0.0.1:%d, not %d", ours, foreign.Port); !strings.Contains(out, want) {
		t.Errorf("status does not say %q:\n%s", want, out)
	}
	out, _ = run(empty, foreign.Port, "status")
	if want := fmt.Sprintf("postgresql: port %d is taken by a PostgreSQL that is not this checkout's", foreign.Port); !strings.Contains(out, want) {
		t.Errorf("status with none of its own running does not say %q:\n%s", want, out)
	}
}
