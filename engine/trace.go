package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation name of the engine's spans.
const TracerName = "github.com/celflow/celflow/engine"

// The provider otel hands out before anyone installs one: with it (or an
// explicit no-op provider) tracing is off and the walk builds no spans,
// attributes or contexts at all.
var unsetProvider = otel.GetTracerProvider()

var noopSpan = trace.SpanFromContext(context.Background())

func tracer() (trace.Tracer, bool) {
	tp := otel.GetTracerProvider()
	if tp == unsetProvider {
		return nil, false
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil, false
	}
	return tp.Tracer(TracerName), true
}

// Span attribute keys: every span's provenance (docs/operations.md, The span
// tree).
const (
	AttrWorkflowName    = attribute.Key("celflow.workflow.name")
	AttrWorkflowVersion = attribute.Key("celflow.workflow.version")
	AttrWorkflowHash    = attribute.Key("celflow.workflow.hash")
	AttrNodeID          = attribute.Key("celflow.node.id")
	AttrNodeType        = attribute.Key("celflow.node.type")
	AttrNodeStatus      = attribute.Key("celflow.node.status")
	AttrNodeReason      = attribute.Key("celflow.node.reason")
	AttrGuard           = attribute.Key("celflow.guard")
	AttrEdge            = attribute.Key("celflow.edge")
	AttrTarget          = attribute.Key("celflow.target")  // the target rule that chose the legs (LegTarget.Desc)
	AttrHandled         = attribute.Key("celflow.handled") // a failure routed by an outgoing edge
	AttrAttempt         = attribute.Key("celflow.attempt")
	AttrItemIndex       = attribute.Key("celflow.item.index")
	AttrHTTPStatus      = attribute.Key("http.response.status_code")
)

// startSpan opens a node's span (or, with item >= 0, a fan-out item's).
func (rs *run) startSpan(ctx context.Context, n *cnode, item int, at time.Time) (context.Context, trace.Span) {
	if rs.tracer == nil {
		return ctx, noopSpan
	}
	name := n.id
	attrs := []attribute.KeyValue{
		AttrWorkflowName.String(rs.w.name), AttrWorkflowVersion.String(rs.w.version), AttrWorkflowHash.String(rs.w.hash),
		AttrNodeID.String(n.id), AttrNodeType.String(n.typ),
	}
	if item >= 0 {
		name = fmt.Sprintf("%s[%d]", n.id, item)
		attrs = append(attrs, AttrItemIndex.Int(item))
	}
	return rs.tracer.Start(ctx, name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
}

// endSpan records an outcome on a span and ends it at start+duration, so
// skipped and omitted nodes get zero-length spans.
func endSpan(sp trace.Span, o *Outcome, attrs map[string]any) {
	if !sp.IsRecording() {
		return
	}
	kv := []attribute.KeyValue{AttrNodeStatus.String(o.Status.String()), AttrAttempt.Int(o.Attempt)}
	if o.Reason != "" {
		kv = append(kv, AttrNodeReason.String(o.Reason))
	}
	if o.Edge != "" {
		kv = append(kv, AttrEdge.String(o.Edge))
	}
	if o.Target != nil {
		kv = append(kv, AttrTarget.String(o.Target.Desc))
	}
	if o.HTTPStatus != 0 {
		kv = append(kv, AttrHTTPStatus.Int(o.HTTPStatus))
	}
	if len(o.Retries) > 0 {
		kv = append(kv, AttrAttemptFailures.StringSlice(retryReasons(o)))
	}
	for k, v := range attrs {
		kv = append(kv, anyAttr(k, v))
	}
	if o.Handled {
		// A failure an edge routes (a prefix miss's 412) is a path, not an
		// error: the span keeps status unset and says so.
		kv = append(kv, AttrHandled.Bool(true))
	}
	sp.SetAttributes(kv...)
	for _, ce := range o.CELErrors {
		sp.AddEvent("cel_error", trace.WithAttributes(AttrCELExpr.String(ce.Expr), AttrCELError.String(ce.Error)))
	}
	if (o.Status == StatusFailed || o.Status == StatusTimedOut) && !o.Handled {
		msg := o.Reason
		if o.Err != nil {
			msg = o.Err.Error()
		}
		sp.SetStatus(codes.Error, msg)
	}
	sp.End(trace.WithTimestamp(o.Start.Add(o.Duration)))
}

func anyAttr(k string, v any) attribute.KeyValue {
	switch x := v.(type) {
	case string:
		return attribute.String(k, x)
	case bool:
		return attribute.Bool(k, x)
	case int:
		return attribute.Int(k, x)
	case int64:
		return attribute.Int64(k, x)
	case float64:
		return attribute.Float64(k, x)
	case time.Duration:
		return attribute.String(k, x.String())
	case []string:
		return attribute.StringSlice(k, x)
	case fmt.Stringer:
		return attribute.String(k, x.String())
	}
	return attribute.String(k, strings.TrimSpace(fmt.Sprint(v)))
}
