package main

import (
	"bufio"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The server's garbage collector. A server with a large show (100,000 seats) keeps a
// large heap, and every collection scans all of it: how often one runs, set by GOGC,
// is then a cost of every request, and under a reconnect storm a tail on the honest
// buyers' confirmations (docs/RELIABILITY.md, "The reconnect storm": p99 1.7–4.8× quiet
// at GOGC=100, 1.2–1.8× at 400). serve runs it at --gc-percent (400) instead of Go's
// 100, within a soft memory limit (--memory-limit-mb; by default half of the memory the
// process may use, from its cgroup or the machine) that makes it collect more often
// before the heap outgrows the machine. GOGC and GOMEMLIMIT in the environment, Go's own
// settings, take precedence.

// tuneGC applies --gc-percent and --memory-limit-mb, unless the environment sets GOGC
// or GOMEMLIMIT, and logs what the server runs with.
func tuneGC(gcPercent, memLimitMB int, getenv func(string) string, log *slog.Logger) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		limit := int64(memLimitMB) << 20
		if memLimitMB == 0 {
			limit = availableMemory("/sys/fs/cgroup/memory.max", "/proc/meminfo") / 2
		}
		if limit > 0 {
			debug.SetMemoryLimit(limit)
		}
	}
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	log.Info("garbage collector", "gc_percent", gc, "memory_limit_mb", debug.SetMemoryLimit(-1)>>20)
}

// availableMemory is the memory this process may use, in bytes: the smaller of its
// cgroup's limit (cgroup v2 memory.max; "max" is none) and the machine's MemTotal; 0
// when neither can be read.
func availableMemory(cgroupMax, meminfo string) int64 {
	var total int64
	if f, err := os.Open(meminfo); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err == nil {
					total = kb << 10
				}
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile(cgroupMax); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}
