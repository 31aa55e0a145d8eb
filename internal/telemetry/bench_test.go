package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discard is an exporter that drops everything: the "on" benchmarks measure
// celflow's side of tracing (span creation, attributes, batching), not a
// network export.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// fakeNodes is the E/P/D workflow's node list.
var fakeNodes = []string{"fetch_media", "render", "try_decode", "encode", "prefill", "decode"}

// fakeRequest is one request's tracing work as the front and scheduler do
// it: the server span, a span per node with provenance attributes (built
// only when recording), the leg's traceparent, the end of every span.
func fakeRequest(r *http.Request, start func(context.Context, string) (context.Context, trace.Span)) {
	ctx, server := StartRequest(r.Context(), r, "/v1/chat/completions")
	for _, id := range fakeNodes {
		nctx, span := start(ctx, id)
		if span.IsRecording() {
			span.SetAttributes(
				attribute.String("celflow.workflow.name", "epd"),
				attribute.String("celflow.node.id", id),
				attribute.String("celflow.node.outcome", "succeeded"),
				attribute.Int("http.response.status_code", 200),
			)
		}
		_ = LegTrace(nctx)
		span.End()
	}
	EndRequest(server, 200, "")
}

func benchRequest(b *testing.B, start func(context.Context, string) (context.Context, trace.Span)) {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	b.ReportAllocs()
	for b.Loop() {
		fakeRequest(r, start)
	}
}

// viaGlobal starts node spans the plain way, otel.Tracer on the global
// provider, whatever is installed there.
func viaGlobal(ctx context.Context, name string) (context.Context, trace.Span) {
	return otel.Tracer(ScopeName).Start(ctx, name)
}

func viaStart(ctx context.Context, name string) (context.Context, trace.Span) {
	return Start(ctx, name)
}

// BenchmarkSpanOff: tracing off, node spans through the global provider
// (otel's no-op). Compare with BenchmarkSpanOn; no timing assertion.
func BenchmarkSpanOff(b *testing.B) {
	installed.Store(nil)
	otel.SetTracerProvider(noop.NewTracerProvider())
	defer Install(memTP)
	benchRequest(b, viaGlobal)
}

// BenchmarkSpanOffGuarded: tracing off, node spans through telemetry.Start,
// which skips even the no-op tracer's per-span context.
func BenchmarkSpanOffGuarded(b *testing.B) {
	installed.Store(nil)
	otel.SetTracerProvider(noop.NewTracerProvider())
	defer Install(memTP)
	benchRequest(b, viaStart)
}

// BenchmarkSpanOn: tracing on with the SDK's batch processor and a
// discarding exporter, every span sampled.
func BenchmarkSpanOn(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer func() { _ = tp.Shutdown(context.Background()); Install(memTP) }()
	Install(tp)
	benchRequest(b, viaGlobal)
}
