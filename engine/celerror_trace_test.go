package engine_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/engine"
)

// A run-time CEL error is a "cel_error" span event on the node's span: a
// guard's, a target or retry rule's, and an edge condition about a failed
// node (evaluated before its span ends, to know whether an edge handles
// the failure). An edge condition about a succeeded node is evaluated once
// its span has ended: the event goes on the request's span, naming the node.
func TestCELErrorSpanEvents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	w := load(t, `
defaults: {on_cel_error: safe}
nodes:
  - {id: pre, type: t-noop}
  - {id: side, type: t-noop, needs: [{node: pre, if: 'request.model.size() / (size(media) * 0) > 1'}]}
  - {id: gate, type: t-noop, needs: [pre], when: 'int(request.model) > 3'}
  - {id: probe, type: t-cond-decode, needs: [gate], params: {status: 412}}
  - {id: fallback, type: t-decode, needs: [{node: probe, if: 'response.status == 412 && 10 / size(media) > 1'}]}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status == 412'}]}
`)
	ctx, root := tp.Tracer("test").Start(context.Background(), "POST /v1/chat/completions")
	r := serve(t, w, ctx, engine.RouteChat, `{"model":"m"}`)
	root.End()
	if r.rep.Err != nil {
		t.Fatal(r.rep.Err)
	}
	events := map[string]map[string]string{} // span → expr → node (or "")
	for _, s := range rec.Ended() {
		for _, ev := range s.Events() {
			if ev.Name != "cel_error" {
				continue
			}
			var expr, node, errText string
			for _, kv := range ev.Attributes {
				switch kv.Key {
				case engine.AttrCELExpr:
					expr = kv.Value.AsString()
				case engine.AttrNodeID:
					node = kv.Value.AsString()
				case engine.AttrCELError:
					errText = kv.Value.AsString()
				}
			}
			if errText == "" {
				t.Errorf("%s: event without its error: %v", s.Name(), ev.Attributes)
			}
			if events[s.Name()] == nil {
				events[s.Name()] = map[string]string{}
			}
			events[s.Name()][expr] = node
		}
	}
	if _, ok := events["gate"]["guard"]; !ok || len(events["gate"]) != 1 {
		t.Errorf("gate's span events: %v", events)
	}
	if _, ok := events["probe"]["edge:probe->fallback"]; !ok || len(events["probe"]) != 1 {
		t.Errorf("probe's span events: %v", events)
	}
	if node, ok := events["POST /v1/chat/completions"]["edge:pre->side"]; !ok || node != "pre" {
		t.Errorf("request span events: %v", events)
	}
	if len(events) != 3 {
		t.Errorf("events on %d spans: %v", len(events), events)
	}
}
