package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the engine's spans' instrumentation scope.
const tracerName = "github.com/holdfast/holdfast/engine"

// op is one engine operation in flight: its span (Config.TracerProvider) and its
// metrics. Spans carry the show, the number of seats and the outcome — never a token,
// an idempotency key or a holder id.
type op struct {
	e     *Engine
	name  string
	start time.Time
	span  trace.Span
}

// begin starts the operation name on showID's seats. Attributes are built only for a
// span that records: without a TracerProvider this is the hot path's only cost.
func (e *Engine) begin(ctx context.Context, name, showID string, seats int) (context.Context, op) {
	if e.tracer == nil {
		return ctx, op{e: e, name: name, start: time.Now(), span: noSpan}
	}
	spanName, ok := spanNames[name]
	if !ok {
		spanName = "holdfast." + name
	}
	ctx, span := e.tracer.Start(ctx, spanName)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("holdfast.show", showID), attribute.Int("holdfast.seats", seats))
	}
	return ctx, op{e: e, name: name, start: time.Now(), span: span}
}

// end records the outcome (result, or the one err maps to) in the metrics and the span.
func (o op) end(err error, result string) {
	if result == "" {
		result = resultOf(err)
	}
	o.e.m.observe(o.name, o.start, result)
	if !o.span.IsRecording() {
		return
	}
	o.span.SetAttributes(attribute.String("holdfast.result", result))
	if result == "unavailable" || result == "error" {
		o.span.SetStatus(codes.Error, result) // the cause stays in the logs: it may name servers
	}
	o.span.End()
}

// spanNames are the operations' span names, built once (the hot path allocates none).
var spanNames = map[string]string{"hold": "holdfast.hold", "extend": "holdfast.extend", "release": "holdfast.release",
	"shrink": "holdfast.shrink", "confirm": "holdfast.confirm", "cancel": "holdfast.cancel", "resync": "holdfast.resync",
	"reclaim": "holdfast.reclaim", "transfer": "holdfast.transfer", "transfer_booking": "holdfast.transfer_booking",
	"join_waitlist": "holdfast.join_waitlist", "wait_entry": "holdfast.wait_entry"}

// step traces one part of an operation (a Redis check, the transaction, the marker
// write), named in full; the caller ends the span.
func (e *Engine) step(ctx context.Context, spanName string) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, noSpan
	}
	return e.tracer.Start(ctx, spanName)
}

// noSpan stands for a span when the engine has no TracerProvider: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// endStep ends a step's span, marking a failure.
func endStep(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, resultOf(err))
	}
	span.End()
}

// steps starts a span named name in the trace of each confirmation of batch (a batch
// serves several traces).
func (e *Engine) steps(batch []*confirmReq, name string) []trace.Span {
	spans := make([]trace.Span, len(batch))
	for i, r := range batch {
		_, spans[i] = e.step(r.ctx, name)
	}
	return spans
}
