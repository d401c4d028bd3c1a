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

// TestAvailableMemory: the smallest of the process's cgroup limit — cgroup v2 (its
// memory.max, "max" for none) or v1 (memory.limit_in_bytes), wherever the cgroup sits —
// and MemTotal; files that cannot be read leave the others, or 0.
func TestAvailableMemory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	meminfo := write("meminfo", "MemTotal:        4026532 kB\nMemFree:          100000 kB\n")
	none := filepath.Join(dir, "none")
	write("v2/system.slice/holdfast.service/memory.max", "1073741824\n")
	write("v2/unlimited/memory.max", "max\n")
	write("v1/memory/docker/abc/memory.limit_in_bytes", "536870912\n")
	write("v1/memory/free/memory.limit_in_bytes", "9223372036854771712\n")
	for _, c := range []struct {
		name, cgroup, root, meminfo string
		want                        int64
	}{
		{"v2, a service's cgroup", write("c1", "0::/system.slice/holdfast.service\n"), filepath.Join(dir, "v2"), meminfo, 1 << 30},
		{"v2, no limit", write("c2", "0::/unlimited\n"), filepath.Join(dir, "v2"), meminfo, 4026532 << 10},
		{"v1, a container's cgroup", write("c3", "9:name=systemd:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/\n"), filepath.Join(dir, "v1"), meminfo, 512 << 20},
		{"v1, no limit", write("c4", "4:memory:/free\n"), filepath.Join(dir, "v1"), meminfo, 4026532 << 10},
		{"no cgroup file", none, dir, meminfo, 4026532 << 10},
		{"a limit, no meminfo", write("c5", "0::/system.slice/holdfast.service\n"), filepath.Join(dir, "v2"), none, 1 << 30},
		{"nothing", none, dir, none, 0},
	} {
		if got := availableMemory(c.cgroup, c.root, c.meminfo); got != c.want {
			t.Errorf("%s: availableMemory = %d, want %d", c.name, got, c.want)
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
