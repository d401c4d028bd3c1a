package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestAvailableMemory: the smaller of the cgroup's limit and MemTotal; a cgroup
// without a limit ("max") or files that cannot be read leave the other, or 0.
func TestAvailableMemory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meminfo := write("meminfo", "MemTotal:        4026532 kB\nMemFree:          100000 kB\n")
	for _, c := range []struct {
		cgroup, meminfo string
		want            int64
	}{
		{write("small", "1073741824\n"), meminfo, 1 << 30},
		{write("max", "max\n"), meminfo, 4026532 << 10},
		{write("large", "17179869184\n"), meminfo, 4026532 << 10},
		{filepath.Join(dir, "none"), meminfo, 4026532 << 10},
		{write("only", "536870912\n"), filepath.Join(dir, "none"), 512 << 20},
		{filepath.Join(dir, "none"), filepath.Join(dir, "none"), 0},
	} {
		if got := availableMemory(c.cgroup, c.meminfo); got != c.want {
			t.Errorf("availableMemory(%s, %s) = %d, want %d", filepath.Base(c.cgroup), filepath.Base(c.meminfo), got, c.want)
		}
	}
}

// TestTuneGC: serve's --gc-percent and --memory-limit-mb are applied, GOGC and
// GOMEMLIMIT in the environment win, and the values are logged.
func TestTuneGC(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	none := func(string) string { return "" }
	tuneGC(400, 300, none, log)
	if got := debug.SetGCPercent(100); got != 400 {
		t.Errorf("GC percent %d, want 400", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("memory limit %d, want 300 MiB", got)
	}
	if !strings.Contains(logs.String(), "gc_percent=400") || !strings.Contains(logs.String(), "memory_limit_mb=300") {
		t.Errorf("log: %s", logs.String())
	}
	env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(1 << 30)
	tuneGC(400, 300, func(k string) string { return env[k] }, log)
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("with GOGC=150 in the environment: GC percent %d", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("with GOMEMLIMIT in the environment: memory limit %d", got)
	}
}
