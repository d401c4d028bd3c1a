package engine

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestHealthGauges: the background probe says each backend is up, and Redis down
// within a probe of it stopping; the outbox gauges read the table.
func TestHealthGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	v, srv := privateEnv(t, func(c *Config) { c.Registerer = reg })
	up := func(backend string) float64 { return testutil.ToFloat64(v.e.m.backendUp.WithLabelValues(backend)) }
	waitFor(t, "both backends probed up", 3*healthProbeEvery, func() bool { return up("postgres") == 1 && up("redis") == 1 })
	if n := testutil.ToFloat64(v.e.m.outboxRows); n != 0 {
		t.Fatalf("outbox rows %v on a fresh database", n)
	}
	srv.Stop()
	waitFor(t, "Redis probed down", 3*healthProbeEvery, func() bool { return up("redis") == 0 })
	if up("postgres") != 1 {
		t.Fatal("PostgreSQL probed down while only Redis stopped")
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}
