package engine

import (
	"errors"

	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// takeAllConns takes every connection of the pool until the test ends (or release).
func takeAllConns(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	var conns []*pgxpool.Conn
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	done := false
	release = func() {
		if !done {
			done = true
			for _, c := range conns {
				c.Release()
			}
		}
	}
	t.Cleanup(release)
	return release
}

// poolOf is a pool of n connections on a new database of the test's own.
func poolOf(t *testing.T, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testsvc.Database(t).Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = n
	pool, err := pgxNewPool(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestAdmissionRefusesWhatCannotFinish: a confirmation that would get a connection
// only after its hold expires is refused (ErrHoldLost) by the hold's end, without a
// statement run; one that would wait with the queue full is refused at once
// (ErrOverloaded), and its hold confirms later. Neither writes anything.
func TestAdmissionRefusesWhatCannotFinish(t *testing.T) {
	t.Parallel()
	pool := poolOf(t, 2)
	v := newEnvWith(t, pool, testsvc.Redis(t), func(c *Config) { c.MaxConfirmQueue, c.ConfirmConns = 1, 1 })
	v.show("adm", seatNames(4)...)
	h := v.hold("adm", 400*time.Millisecond, "", "S000")
	release := takeAllConns(t, pool)

	start := time.Now()
	_, err := v.e.Confirm(t.Context(), h, ConfirmOptions{})
	took := time.Since(start)
	if !errors.Is(err, ErrHoldLost) {
		t.Fatalf("confirm with no connection for its hold's life: %v after %v", err, took)
	}
	// Refused by its hold's end: waiting for a connection, it would wait until release
	// below. A loaded machine's timers fire late (88 ms once in CI), hence the margin.
	if late := time.Since(h.ExpiresAt); late > 500*time.Millisecond {
		t.Fatalf("refused %v after the hold's expiry", late)
	}
	if n := testutil.ToFloat64(v.e.m.admissionRefusals.WithLabelValues("too_late")); n != 1 {
		t.Fatalf("%v too_late refusals counted", n)
	}

	// One committer, busy with h2 (it waits for a connection); the queue holds one
	// more (h3); a third waiter (h4) is refused at once.
	h2 := v.hold("adm", time.Minute, "", "S001")
	waits := sampleCount(t, v.e.m.confirmQueueWait)
	answers := make(chan error, 2)
	go func() {
		_, err := v.e.Confirm(t.Context(), h2, ConfirmOptions{})
		answers <- err
	}()
	for sampleCount(t, v.e.m.confirmQueueWait) == waits { // until the committer took h2
		time.Sleep(time.Millisecond)
	}
	h3 := v.hold("adm", time.Minute, "", "S002")
	go func() {
		_, err := v.e.Confirm(t.Context(), h3, ConfirmOptions{})
		answers <- err
	}()
	for len(v.e.gc.queue) == 0 {
		time.Sleep(time.Millisecond)
	}
	h4 := v.hold("adm", time.Minute, "", "S003")
	start = time.Now()
	if _, err := v.e.Confirm(t.Context(), h4, ConfirmOptions{}); !errors.Is(err, ErrOverloaded) || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("confirm with the queue full: %v after %v", err, time.Since(start))
	}
	release()
	for range 2 {
		if err := <-answers; err != nil {
			t.Fatalf("a waiting confirmation: %v", err)
		}
	}
	// Refused confirmations wrote nothing, and their holds still confirm.
	if n := v.bookings("adm"); n != 2 {
		t.Fatalf("%d bookings after two refusals and two confirmations", n)
	}
	if _, err := v.e.Confirm(t.Context(), h4, ConfirmOptions{}); err != nil {
		t.Fatalf("the hold refused for overload confirms later: %v", err)
	}
}

// sampleCount is how many observations h has.
func sampleCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
