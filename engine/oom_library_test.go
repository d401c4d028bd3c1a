package engine

import (
	"testing"
	"time"
)

// TestReleaseAndConfirmWhenFullAfterLibraryLost: release and a confirmation's reserve
// and mark are allow-oom: they run while Redis is full (TestRedisOutOfMemory), even when
// Redis has also lost the function library, which it will not load while full: the
// engine sends those scripts by EVAL then (lua.Function.Run, runScripts). The hold the
// confirmation booked is sold in Redis too.
func TestReleaseAndConfirmWhenFullAfterLibraryLost(t *testing.T) {
	t.Parallel()
	v, _ := privateEnv(t)
	ctx := t.Context()
	v.show("s1", seatNames(10)...)
	h := v.hold("s1", time.Minute, "", "S000")
	h2 := v.hold("s1", time.Minute, "", "S001")
	if err := v.rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	v.rdb.ConfigSet(ctx, "maxmemory", "1")
	defer v.rdb.ConfigSet(ctx, "maxmemory", "0")
	relErr := v.e.Release(ctx, h)
	_, confErr := v.e.Confirm(ctx, h2, ConfirmOptions{})
	if relErr != nil || confErr != nil {
		t.Fatalf("Redis full, library lost: release: %v; confirm: %v", relErr, confErr)
	}
	if m := v.soldMarkers("s1"); len(m) != 1 || m["S001"] == "" {
		t.Fatalf("sold markers %v, want S001's", m)
	}
	if v.holdValue("s1", "S000") != "" {
		t.Fatal("the released hold is still in Redis")
	}
}
