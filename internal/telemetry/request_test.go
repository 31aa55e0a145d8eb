package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// mem receives every span of this package's tests; TestMain installs it.
var (
	mem   = tracetest.NewInMemoryExporter()
	memTP = sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem))
)

func TestMain(m *testing.M) {
	Install(memTP)
	os.Exit(m.Run())
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

// withTracing switches the helpers on (memTP) or off for one test.
func withTracing(t *testing.T, on bool) {
	t.Helper()
	if on {
		Install(memTP)
	} else {
		installed.Store(nil)
	}
	t.Cleanup(func() { Install(memTP) })
	mem.Reset()
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestStartRequestTraceParent(t *testing.T) {
	tests := []struct {
		name        string
		traceparent string
		continues   bool // the server span joins the client's trace
	}{
		{"valid sampled", "00-" + clientTrace + "-" + clientSpan + "-01", true},
		{"none", "", false},
		{"malformed", "00-xyz-" + clientSpan + "-01", false},
		{"all-zero trace id", "00-00000000000000000000000000000000-" + clientSpan + "-01", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			withTracing(t, true)
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Header.Set("User-Agent", "t/1")
			if tc.traceparent != "" {
				r.Header.Set("Traceparent", tc.traceparent)
			}
			_, span := StartRequest(r.Context(), r, "/v1/chat/completions")
			EndRequest(span, 200, "")

			spans := mem.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.Name != "POST /v1/chat/completions" || s.SpanKind != trace.SpanKindServer {
				t.Errorf("name %q kind %v", s.Name, s.SpanKind)
			}
			got := s.SpanContext.TraceID().String() == clientTrace && s.Parent.SpanID().String() == clientSpan
			if got != tc.continues {
				t.Errorf("continues client trace = %v, want %v (trace %s parent %s)",
					got, tc.continues, s.SpanContext.TraceID(), s.Parent.SpanID())
			}
			if !tc.continues && s.Parent.IsValid() {
				t.Errorf("a new trace must be a root, parent %v", s.Parent)
			}
			a := attrs(s)
			for k, want := range map[attribute.Key]string{
				"http.request.method": "POST", "http.route": "/v1/chat/completions",
				"url.path": "/v1/chat/completions", "user_agent.original": "t/1",
			} {
				if a[k].AsString() != want {
					t.Errorf("%s = %q, want %q", k, a[k].AsString(), want)
				}
			}
			if a["http.response.status_code"].AsInt64() != 200 || s.Status.Code != codes.Unset {
				t.Errorf("status attr %v, span status %v", a["http.response.status_code"], s.Status)
			}
		})
	}
}

func TestEndRequestStatus(t *testing.T) {
	tests := []struct {
		status   int
		code     string
		wantCode codes.Code
	}{
		{200, "", codes.Unset},
		{400, "invalid_json", codes.Unset},
		{499, "client_closed_request", codes.Unset},
		{502, "bad_gateway", codes.Error},
		{504, "upstream_timeout", codes.Error},
	}
	for _, tc := range tests {
		withTracing(t, true)
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
		_, span := StartRequest(r.Context(), r, "/v1/completions")
		EndRequest(span, tc.status, tc.code)
		s := mem.GetSpans()[0]
		a := attrs(s)
		if s.Status.Code != tc.wantCode || a["http.response.status_code"].AsInt64() != int64(tc.status) {
			t.Errorf("%d: span status %v, attr %v", tc.status, s.Status, a["http.response.status_code"])
		}
		if a[AttrErrorCode].AsString() != tc.code || a["error.type"].AsString() != tc.code {
			t.Errorf("%d: error code attrs %v / %v, want %q", tc.status, a[AttrErrorCode], a["error.type"], tc.code)
		}
	}
}

// PROTOCOL 2.2: with tracing on, a leg carries the node span's context
// (the client's trace id, celflow's span as parent), never the client's
// span id; tracestate follows; baggage is not injected (it is forwarded as
// an ordinary client header).
func TestLegTraceOn(t *testing.T) {
	withTracing(t, true)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	r.Header.Set("Tracestate", "vendor=abc")
	r.Header.Set("Baggage", "tenant=t1")
	ctx, server := StartRequest(r.Context(), r, "/v1/chat/completions")
	ctx, node := Start(ctx, "prefill")
	h := LegTrace(ctx)
	node.End()
	EndRequest(server, 200, "")

	want := "00-" + clientTrace + "-" + node.SpanContext().SpanID().String() + "-01"
	if got := h.Get("Traceparent"); got != want {
		t.Errorf("traceparent %q, want %q", got, want)
	}
	if got := h.Get("Tracestate"); got != "vendor=abc" {
		t.Errorf("tracestate %q", got)
	}
	if len(h) != 2 {
		t.Errorf("leg trace headers %v: want traceparent and tracestate only", h)
	}
}

// With tracing off nothing is extracted or invented: the leg forwards the
// client's traceparent itself (LegTrace nil), and the request path neither
// records nor allocates.
func TestTracingOff(t *testing.T) {
	withTracing(t, false)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	ctx := r.Context()
	got, span := StartRequest(ctx, r, "/v1/chat/completions")
	if got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("off: ctx changed or span live: recording=%v valid=%v", span.IsRecording(), span.SpanContext().IsValid())
	}
	if h := LegTrace(got); h != nil {
		t.Errorf("off: LegTrace = %v, want nil", h)
	}
	EndRequest(span, 200, "")
	if n := len(mem.GetSpans()); n != 0 {
		t.Errorf("off: %d spans exported", n)
	}
	allocs := testing.AllocsPerRun(100, func() {
		c, s := StartRequest(ctx, r, "/v1/chat/completions")
		c, n := Start(c, "prefill")
		_ = LegTrace(c)
		n.End()
		EndRequest(s, 200, "")
	})
	if allocs != 0 {
		t.Errorf("off: %v allocations per request, want 0", allocs)
	}
}

func TestLegTraceWithoutSpan(t *testing.T) {
	withTracing(t, true)
	if h := LegTrace(context.Background()); h != nil {
		t.Errorf("no span in ctx: LegTrace = %v, want nil", h)
	}
}
