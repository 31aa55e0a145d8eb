package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of celflow's spans.
const ScopeName = "github.com/celflow/celflow"

// Attribute keys celflow sets beside the semantic-convention ones. The node
// span keys (celflow.node.*, celflow.workflow.*) are the scheduler's.
const (
	AttrRequestID = attribute.Key("celflow.request_id")
	AttrErrorCode = attribute.Key("celflow.error.code")
)

// installed holds celflow's tracer from the installed provider; nil while
// tracing is off. One atomic load decides the off path.
var installed atomic.Pointer[tracerBox]

type tracerBox struct{ t trace.Tracer }

var (
	// legProp injects only traceparent/tracestate: baggage is an ordinary
	// client header on legs (docs/protocol.md) and is forwarded as received.
	legProp = propagation.TraceContext{}
	// noopSpan is what StartRequest returns when tracing is off; held as an
	// interface so returning it does not allocate.
	noopSpan trace.Span = noop.Span{}
)

// Install makes tp the global provider, installs the W3C tracecontext and
// baggage propagators, and turns the request helpers on. Setup calls it; a
// test or an embedder with its own SDK setup may call it directly.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{}))
	installed.Store(&tracerBox{t: tp.Tracer(ScopeName)})
}

// Enabled reports whether tracing was installed.
func Enabled() bool { return installed.Load() != nil }

// Start starts a child span of the span in ctx with celflow's tracer. With
// tracing off it returns ctx unchanged and a no-op span without allocating,
// where otel.Tracer(...).Start on the default global provider would still
// allocate a context per span: the scheduler's per-node spans use it.
// Callers guard attribute building with span.IsRecording().
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	b := installed.Load()
	if b == nil {
		return ctx, noopSpan
	}
	return b.t.Start(ctx, name, opts...)
}

// StartRequest starts the server span of one client request, continuing the
// client's trace when it sent a valid traceparent (the span then has the
// client's trace id and the client's span as parent). route is the route
// template ("/v1/chat/completions"), never a raw URL with ids. With tracing
// off it returns ctx unchanged and a no-op span, and allocates nothing.
func StartRequest(ctx context.Context, r *http.Request, route string) (context.Context, trace.Span) {
	b := installed.Load()
	if b == nil {
		return ctx, noopSpan
	}
	ctx = otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(r.Header))
	ctx, span := b.t.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.HTTPRoute(route),
			semconv.URLPath(r.URL.Path),
			semconv.NetworkProtocolVersion(protoVersion(r)),
		)
		if ua := r.UserAgent(); ua != "" {
			span.SetAttributes(semconv.UserAgentOriginal(ua))
		}
	}
	return ctx, span
}

func protoVersion(r *http.Request) string {
	if r.ProtoMajor == 2 {
		return "2"
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// EndRequest records the reply status on the server span and ends it.
// errCode is celflow's error code ("bad_gateway", engine.Error.Code) or ""
// on success. Following the HTTP semantic conventions a server span is an
// error only for 5xx; 499 (client gone) is recorded but not an error.
func EndRequest(span trace.Span, status int, errCode string) {
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if errCode != "" {
			span.SetAttributes(AttrErrorCode.String(errCode), semconv.ErrorTypeKey.String(errCode))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
}

// LegTrace returns the traceparent (and tracestate) to send on a render or
// worker leg started under ctx: the context of the span in ctx, so the
// worker's spans become its children. It returns nil when ctx carries no
// valid span context (tracing off: nothing extracts or starts one), so the
// leg forwards the client's own traceparent unchanged (docs/protocol.md;
// upstream.Leg.Trace). It works with any installed provider, Install's or
// not. Media downloads must not call it.
func LegTrace(ctx context.Context) http.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := make(http.Header, 2)
	legProp.Inject(ctx, propagation.HeaderCarrier(h))
	return h
}
