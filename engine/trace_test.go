package engine_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/engine"
)

// ACCEPTANCE 51 (and 34): one span per node with id, type, status, reason
// and duration; zero-length spans for skipped and omitted nodes; one child
// span per fan-out item; provenance attributes on every span.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer otel.SetTracerProvider(prev)

	w := load(t, `
nodes:
  - {id: fetch, type: t-fetch}
  - {id: render, type: t-render, needs: [fetch], params: {address: "http://r"}, when: 'request.format == "completions"'}
  - {id: try_decode, type: t-cond-decode, needs: [render], params: {status: 412}}
  - {id: fast, type: t-noop, needs: [{node: try_decode, if: "response.status == 200"}]}
  - {id: encode, type: t-encode, foreach: media, needs: [{node: try_decode, if: "response.status == 412"}]}
  - {id: decode, type: t-decode, needs: [encode]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, imageChat)
	if r.rep.Err != nil {
		t.Fatal(r.rep.Err)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	attr := func(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
		for _, kv := range s.Attributes() {
			if kv.Key == k {
				return kv.Value
			}
		}
		return attribute.Value{}
	}
	for _, tc := range []struct {
		name, status, reason string
		zero                 bool
	}{
		{"fetch", "succeeded", "", false},
		{"render", "skipped", `guard false: request.format == "completions"`, true},
		{"try_decode", "failed", "", false},
		{"fast", "omitted", "no incoming edge fired: try_decode[response.status == 200]", true},
		{"encode", "succeeded", "", false},
		{"decode", "succeeded", "", false},
	} {
		s, ok := spans[tc.name]
		if !ok {
			t.Fatalf("no span for %s; have %v", tc.name, keys(spans))
		}
		if got := attr(s, engine.AttrNodeStatus).AsString(); got != tc.status {
			t.Errorf("%s status %q", tc.name, got)
		}
		if tc.reason != "" && attr(s, engine.AttrNodeReason).AsString() != tc.reason {
			t.Errorf("%s reason %q", tc.name, attr(s, engine.AttrNodeReason).AsString())
		}
		if attr(s, engine.AttrNodeID).AsString() != tc.name || attr(s, engine.AttrWorkflowName).AsString() != "t" ||
			attr(s, engine.AttrWorkflowHash).AsString() != w.Hash() || attr(s, engine.AttrNodeType).AsString() == "" {
			t.Errorf("%s provenance: %v", tc.name, s.Attributes())
		}
		if tc.zero != s.EndTime().Equal(s.StartTime()) {
			t.Errorf("%s zero-length %v", tc.name, !tc.zero)
		}
	}
	if spans["render"] != nil && attr(spans["render"], engine.AttrGuard).AsBool() {
		t.Error("render guard attribute true")
	}
	if got := attr(spans["try_decode"], engine.AttrHTTPStatus).AsInt64(); got != 412 {
		t.Errorf("try_decode status attr %d", got)
	}
	// The 412 is routed by an edge: a path, not an error.
	if spans["try_decode"].Status().Code == codes.Error || !attr(spans["try_decode"], engine.AttrHandled).AsBool() {
		t.Error("handled failure: span status Error or celflow.handled missing")
	}
	if attr(spans["encode"], engine.AttrEdge).AsString() != "try_decode[response.status == 412]" {
		t.Error("encode edge attribute")
	}
	for _, item := range []string{"encode[0]", "encode[1]"} {
		s, ok := spans[item]
		if !ok {
			t.Fatalf("no item span %s", item)
		}
		if s.Parent().SpanID() != spans["encode"].SpanContext().SpanID() {
			t.Errorf("%s is not a child of encode", item)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// ACCEPTANCE 182 (span side): a client that leaves while a node runs marks
// that node's span cancelled; the node after it is never started.
func TestSpanCancelled(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer otel.SetTracerProvider(prev)

	w := load(t, `
nodes:
  - {id: slow, type: t-noop, params: {delay: 5s}}
  - {id: decode, type: t-decode, needs: [slow]}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel) // the client leaves
	r := serve(t, w, ctx, engine.RouteChat, `{}`)
	if r.rep.Err == nil || r.rep.Err.Kind != engine.KindCancelled {
		t.Fatalf("err %v", r.rep.Err)
	}
	var got string
	for _, s := range rec.Ended() {
		if s.Name() != "slow" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == engine.AttrNodeStatus {
				got = kv.Value.AsString()
			}
		}
	}
	if got != "cancelled" {
		t.Fatalf("slow span status %q, want cancelled", got)
	}
}

// A failure no edge routes fails the run, and its span has status Error.
func TestSpanUnhandledFailureIsError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	defer otel.SetTracerProvider(prev)

	w := load(t, `
nodes:
  - {id: try_decode, type: t-cond-decode, params: {status: 503}}
  - {id: decode, type: t-decode, needs: [{node: try_decode, if: "response.status == 412"}]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, imageChat)
	if r.rep.Err == nil {
		t.Fatal("an unrouted 503 did not fail the run")
	}
	for _, s := range rec.Ended() {
		if s.Name() == "try_decode" {
			if s.Status().Code != codes.Error {
				t.Errorf("unhandled failure: span status %v, want Error", s.Status().Code)
			}
			return
		}
	}
	t.Fatal("no try_decode span")
}
