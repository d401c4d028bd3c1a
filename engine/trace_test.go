package engine

import (
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTracing: every operation emits a span with its outcome, a confirmation has its
// Redis checks, transaction and marker write as children, and no span carries a token,
// an idempotency key or a holder id.
func TestTracing(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	v := newEnv(t, func(c *Config) { c.TracerProvider = tp })
	v.show("s1", "A1", "A2")
	h := v.hold("s1", time.Minute, "alice@example.com", "A1")
	if _, err := v.e.Hold(t.Context(), HoldRequest{ShowID: "s1", SeatIDs: []string{"A1"}}); err == nil {
		t.Fatal("a second hold on A1")
	}
	b, err := v.e.Confirm(t.Context(), h, ConfirmOptions{IdempotencyKey: "order-secret-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.e.Cancel(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if err := v.e.Resync(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	results := map[string][]string{}
	var confirm tracetest.SpanStub
	for _, s := range spans {
		for _, a := range s.Attributes {
			val := a.Value.Emit()
			if a.Key == "holdfast.result" {
				results[s.Name] = append(results[s.Name], val)
			}
			for _, secret := range []string{h.Token, "order-secret-1", "alice@example.com"} {
				if strings.Contains(val, secret) {
					t.Fatalf("span %s carries a secret in %s", s.Name, a.Key)
				}
			}
		}
		if s.Name == "holdfast.confirm" {
			confirm = s
		}
	}
	for name, want := range map[string]string{"holdfast.hold": "ok taken", "holdfast.confirm": "ok", "holdfast.cancel": "ok", "holdfast.resync": "ok"} {
		if got := strings.Join(results[name], " "); got != want {
			t.Errorf("%s results %q, want %q", name, got, want)
		}
	}
	// The confirmation's descendants: the transaction (with the Redis check inside it:
	// the hold has a minute left, so nothing checks it before) and the marker write.
	inConfirm := map[string]bool{confirm.SpanContext.SpanID().String(): true}
	descendants := map[string]int{}
	for changed := true; changed; {
		changed = false
		for _, s := range spans {
			id := s.SpanContext.SpanID().String()
			if !inConfirm[id] && inConfirm[s.Parent.SpanID().String()] {
				inConfirm[id], changed = true, true
				descendants[s.Name]++
			}
		}
	}
	if descendants["holdfast.confirm.verify"] != 1 || descendants["holdfast.confirm.transaction"] != 1 || descendants["holdfast.markers"] != 1 {
		t.Fatalf("confirm's spans %v, want one Redis check, a transaction and a marker write", descendants)
	}
}
