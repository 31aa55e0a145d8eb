package leg

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/telemetry"
)

// TraceHeaders returns traceparent (and tracestate) naming the node's span
// as parent, when tracing is on: the span context is valid and the span is
// sampled or recording. Otherwise nil, and the client's own headers are
// forwarded unchanged (none is invented: docs/protocol.md, Client headers
// on render and worker legs).
func TraceHeaders(x *engine.Exec) http.Header {
	if x == nil || x.Span == nil {
		return nil
	}
	sc := x.Span.SpanContext()
	if !sc.IsValid() || !(sc.IsSampled() || x.Span.IsRecording()) {
		return nil
	}
	h := telemetry.LegTrace(trace.ContextWithSpanContext(context.Background(), sc))
	if len(h) == 0 {
		return nil
	}
	return h
}
