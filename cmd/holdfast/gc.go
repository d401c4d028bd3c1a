package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// The server's garbage collector. A server with a large show (100,000 seats) keeps a
// large heap, and every collection scans all of it: how often one runs, set by GOGC,
// is then a cost of every request, and under a reconnect storm a tail on the honest
// buyers' confirmations (docs/RELIABILITY.md, "The reconnect storm"). serve runs it at
// --gc-percent (400) instead of Go's 100, within a soft memory limit (--memory-limit-mb;
// by default nine tenths of the memory the process may use, from its cgroup or the
// machine) past which it collects as often as it must to stay under it: so a heap that
// would outgrow the machine at 400 is collected more often instead, as late as Go's
// default would have run out. GOGC and GOMEMLIMIT in the environment, Go's own settings,
// take precedence.

// tuneGC applies --gc-percent and --memory-limit-mb, unless the environment sets GOGC
// or GOMEMLIMIT, and logs what the server runs with.
func tuneGC(gcPercent, memLimitMB int, getenv func(string) string, log *slog.Logger) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		limit := int64(memLimitMB) << 20
		if memLimitMB == 0 {
			limit = availableMemory("/proc/self/cgroup", "/sys/fs/cgroup", "/proc/meminfo") / 10 * 9
		}
		if limit > 0 {
			debug.SetMemoryLimit(limit)
		}
	}
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	log.Info("garbage collector", "gc_percent", gc, "memory_limit_mb", debug.SetMemoryLimit(-1)>>20)
}

// availableMemory is the memory this process may use, in bytes: the smallest of its
// cgroup's limit (the cgroup named in cgroupFile, under cgroupRoot: v2 memory.max, "max"
// is none; v1 memory/…/memory.limit_in_bytes) and the machine's MemTotal (meminfo); 0
// when none can be read.
func availableMemory(cgroupFile, cgroupRoot, meminfo string) int64 {
	var least int64
	take := func(n int64) {
		if n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	if b, err := os.ReadFile(meminfo); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				take(kb << 10)
			}
		}
	}
	b, _ := os.ReadFile(cgroupFile)
	for _, line := range strings.Split(string(b), "\n") {
		// "0::/path" (v2), "4:memory:/path" (v1)
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[1] == "" && parts[0] == "0":
			file = filepath.Join(cgroupRoot, parts[2], "memory.max")
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join(cgroupRoot, "memory", parts[2], "memory.limit_in_bytes")
		default:
			continue
		}
		if v, err := os.ReadFile(file); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64) // "max": none
			take(n)
		}
	}
	return least
}
