package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/celflow/celflow/internal/telemetry"
)

// startTracing installs tracing from the standard OTEL_* variables, exactly
// as `celflow serve` does (docs/operations.md): off unless one of them turns
// it on. The returned stop flushes the spans still batched; call it after
// the stack has stopped, so that every server span has ended.
func startTracing(stderr io.Writer) (stop func(), err error) {
	shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{})
	if err != nil {
		return func() {}, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			fmt.Fprintf(stderr, "celflow-demo: tracing: flush at exit: %v\n", err)
		}
	}, nil
}

// clientSpan starts the demo client's span of one request, so that the
// whole request is one trace rooted at the client, as it is for a real
// instrumented client. With tracing off it is a no-op span and ctx is
// returned unchanged.
func clientSpan(ctx context.Context, title string) (context.Context, trace.Span) {
	return telemetry.Start(ctx, "celflow demo: "+title, trace.WithSpanKind(trace.SpanKindClient))
}

// injectTrace sets traceparent (and tracestate) from the span in ctx; with
// no valid span in ctx (tracing off) it sets nothing.
func injectTrace(ctx context.Context, h http.Header) {
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// traceID is the id of the span's trace, "" when tracing is off.
func traceID(sp trace.Span) string {
	if sc := sp.SpanContext(); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}
