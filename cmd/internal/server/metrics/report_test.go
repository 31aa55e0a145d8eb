package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// A fan-out type with no items left in its outcome: isFanOut must learn it
// from the registry.
func init() {
	engine.Register(engine.NodeType{
		Name: "metrics-test-fanout", FanOut: true,
		Build: func(*engine.BuildContext, json.RawMessage) (engine.Node, error) { return nil, nil },
	})
}

const wf = "epd"

func item(i int) engine.Outcome {
	return engine.Outcome{Node: "encode", Type: "encode", Status: engine.StatusSucceeded, Duration: time.Millisecond, Attempt: 1}
}

// epdMiss is the E/P/D chat with one image and a 412 (PROTOCOL 11).
func epdMiss() *engine.Report {
	return &engine.Report{Workflow: wf, Answered: true, Duration: 80 * time.Millisecond, Outcomes: []engine.Outcome{
		{Node: "fetch", Type: "fetch-media", Status: engine.StatusSucceeded, Duration: 2 * time.Millisecond},
		{Node: "render", Type: "render", Status: engine.StatusSucceeded, HTTPStatus: 200, Duration: 5 * time.Millisecond},
		{Node: "try_decode", Type: "conditional-decode", Status: engine.StatusFailed, HTTPStatus: 412,
			Err: &engine.Error{Kind: engine.KindUpstreamRejected, Status: 412}, Duration: time.Millisecond},
		{Node: "encode", Type: "encode", Status: engine.StatusSucceeded, Duration: 9 * time.Millisecond,
			Items: []engine.Outcome{item(0), item(1)}},
		{Node: "prefill", Type: "prefill", Status: engine.StatusSucceeded, HTTPStatus: 200, Duration: 20 * time.Millisecond},
		{Node: "decode", Type: "decode", Status: engine.StatusSucceeded, HTTPStatus: 200, Responded: true, Duration: 40 * time.Millisecond,
			Outputs: map[string]any{"handover": 150 * time.Microsecond}},
	}}
}

func TestObserveReport(t *testing.T) {
	m := New()
	route := "/v1/chat/completions"
	m.ObserveReport(route, 200, epdMiss(), nil)

	// A hit: decode answered on the fast path, the full path was skipped.
	hit := &engine.Report{Workflow: wf, Answered: true, Duration: 30 * time.Millisecond, Outcomes: []engine.Outcome{
		{Node: "render", Type: "render", Status: engine.StatusSucceeded, Duration: time.Millisecond},
		{Node: "try_decode", Type: "conditional-decode", Status: engine.StatusSucceeded, HTTPStatus: 200, Responded: true, Duration: 25 * time.Millisecond},
		{Node: "encode", Type: "metrics-test-fanout", Status: engine.StatusSkipped, Reason: "ended"},
		{Node: "prefill", Type: "prefill", Status: engine.StatusSkipped, Reason: "ended"},
		{Node: "decode", Type: "decode", Status: engine.StatusOmitted, Reason: "no incoming edge fired"},
	}}
	m.ObserveReport(route, 200, hit, nil)

	// Text only, aggregated fallback after prefill failed, client left.
	run := engine.NewRun(context.Background(), &engine.Request{}, httptest.NewRecorder())
	run.Abandon()
	agg := &engine.Report{Workflow: wf, Duration: time.Second, Err: &engine.Error{Kind: engine.KindCancelled}, Outcomes: []engine.Outcome{
		{Node: "encode", Type: "metrics-test-fanout", Status: engine.StatusSkipped, Reason: "no items"},
		{Node: "prefill", Type: "prefill", Status: engine.StatusFailed, HTTPStatus: 503, Err: &engine.Error{Kind: engine.KindUpstreamRejected, Status: 503}},
		{Node: "fallback", Type: "decode", Status: engine.StatusCancelled, Outputs: map[string]any{"aggregated": true},
			Err: &engine.Error{Kind: engine.KindCancelled}},
		{Node: "never", Type: "decode", Status: engine.StatusPending},
	}}
	m.ObserveReport(route, 499, agg, run)
	m.ObserveReport("unmatched", 404, nil, nil)

	fams := scrape(t, m)
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"celflow_requests_total", map[string]string{"route": route, "workflow": wf, "code": "200"}, 2},
		{"celflow_requests_total", map[string]string{"route": route, "workflow": wf, "code": "499"}, 1},
		{"celflow_requests_total", map[string]string{"route": "unmatched", "workflow": "", "code": "404"}, 1},
		{"celflow_request_duration_seconds", map[string]string{"route": route, "workflow": wf}, 3},
		{"celflow_conditional_decode_total", map[string]string{"result": "miss"}, 1},
		{"celflow_conditional_decode_total", map[string]string{"result": "hit"}, 1},
		{"celflow_conditional_decode_total", map[string]string{"result": "error"}, 0},
		{"celflow_node_outcomes_total", map[string]string{"node": "try_decode", "status": "failed", "reason": "upstream_rejected"}, 1},
		{"celflow_node_outcomes_total", map[string]string{"node": "prefill", "status": "skipped", "reason": "ended"}, 1},
		{"celflow_node_outcomes_total", map[string]string{"node": "decode", "status": "omitted", "reason": "no_edge"}, 1},
		{"celflow_node_outcomes_total", map[string]string{"node": "encode", "status": "skipped", "reason": "no_items"}, 1},
		{"celflow_node_outcomes_total", map[string]string{"node": "prefill", "status": "failed", "reason": "bad_gateway"}, 1},
		{"celflow_node_outcomes_total", map[string]string{"node": "fallback", "status": "cancelled", "reason": "client_closed_request"}, 1},
		{"celflow_node_outcomes_total", map[string]string{"node": "decode", "type": "decode", "status": "succeeded", "reason": ""}, 1},
		// Skipped and omitted nodes have no duration; every node that ran has one.
		{"celflow_node_duration_seconds", map[string]string{"node": "prefill"}, 2},
		{"celflow_node_duration_seconds", map[string]string{"node": "decode"}, 1},
		{"celflow_node_duration_seconds", map[string]string{"node": "fallback"}, 1},
		// Fan-out: 2 items on the miss, 0 on the text-only request, nothing when ended.
		{"celflow_fanout_items", map[string]string{"workflow": wf, "node": "encode"}, 2},
		{"celflow_aggregated_fallback_total", nil, 1},
		{"celflow_handover_seconds", nil, 1},
		{"celflow_prefill_abandoned_total", nil, 1},
	}
	for _, c := range checks {
		if got := value(find(t, fams, c.name, c.labels)); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if h := find(t, fams, "celflow_fanout_items", map[string]string{"node": "encode"}).Histogram; h.GetSampleSum() != 2 {
		t.Errorf("fan-out item sum %v, want 2 (2 + 0)", h.GetSampleSum())
	}
	if n := len(fams["celflow_node_outcomes_total"].Metric); n != 13 {
		t.Errorf("%d outcome series, want 13 (pending nodes are not counted)", n)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		o    engine.Outcome
		want string
	}{
		{engine.Outcome{Status: engine.StatusSucceeded, Reason: "whatever"}, ""},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "guard false"}, ReasonGuardFalse},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "guard_false: request.model == 'x'"}, ReasonGuardFalse},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "when: false"}, ReasonGuardFalse},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "ended"}, ReasonEnded},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "ended by decode"}, ReasonEnded},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "no items"}, ReasonNoItems},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "foreach list is empty"}, ReasonNoItems},
		{engine.Outcome{Status: engine.StatusSkipped, Reason: "req-7f3a weird free text"}, ReasonOther},
		{engine.Outcome{Status: engine.StatusOmitted, Reason: "no incoming edge fired"}, ReasonNoEdge},
		{engine.Outcome{Status: engine.StatusOmitted}, ReasonNoEdge},
		{engine.Outcome{Status: engine.StatusFailed, Err: engine.Errorf(engine.KindInternal, "guard errored")}, "internal_error"},
		{engine.Outcome{Status: engine.StatusFailed, Err: &engine.Error{Kind: engine.KindUpstreamRejected, Status: 429}}, "upstream_rejected"},
		{engine.Outcome{Status: engine.StatusTimedOut, Err: engine.Errorf(engine.KindUpstreamTimeout, "ttfb")}, "upstream_timeout"},
		{engine.Outcome{Status: engine.StatusTimedOut}, ReasonTimeout},
		{engine.Outcome{Status: engine.StatusCancelled, Reason: "sibling failed"}, ReasonCancelled},
		{engine.Outcome{Status: engine.StatusFailed, Reason: "boom"}, ReasonOther},
	}
	for _, tc := range tests {
		if got := Reason(&tc.o); got != tc.want {
			t.Errorf("Reason(%v %q %v) = %q, want %q", tc.o.Status, tc.o.Reason, tc.o.Err, got, tc.want)
		}
	}
}

func TestLegErrorKind(t *testing.T) {
	tests := []struct {
		status int
		err    error
		want   string
	}{
		{200, nil, ""},
		{412, nil, ""}, // conditional decode's miss is an answer, not an error
		{429, nil, KindStatus4xx},
		{503, nil, KindStatus5xx},
		{0, &upstream.TransportError{Err: errors.New("connection refused")}, KindTransport},
		{0, &upstream.TimeoutError{After: time.Second}, KindTimeout},
		{0, context.Canceled, KindCancelled},
		{0, fmt.Errorf("leg: %w", context.DeadlineExceeded), KindDeadline},
		{0, errors.New("odd"), KindTransport},
	}
	for _, tc := range tests {
		if got := LegErrorKind(tc.status, tc.err); got != tc.want {
			t.Errorf("LegErrorKind(%d, %v) = %q, want %q", tc.status, tc.err, got, tc.want)
		}
	}
}

func TestUpstreamHook(t *testing.T) {
	m := New()
	hook := m.UpstreamHook()
	hook(upstream.RolePrefill, 200, 10*time.Millisecond, nil)
	hook(upstream.RolePrefill, 503, 10*time.Millisecond, nil)
	hook(upstream.RoleDecode, 412, time.Millisecond, nil)
	hook("", 0, time.Second, &upstream.TimeoutError{After: time.Second})
	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"celflow_upstream_leg_duration_seconds", map[string]string{"role": "prefill"}, 2},
		{"celflow_upstream_leg_duration_seconds", map[string]string{"role": "decode"}, 1},
		{"celflow_upstream_leg_duration_seconds", map[string]string{"role": "render"}, 1},
		{"celflow_upstream_errors_total", map[string]string{"role": "prefill", "kind": KindStatus5xx}, 1},
		{"celflow_upstream_errors_total", map[string]string{"role": "render", "kind": KindTimeout}, 1},
	} {
		if got := value(find(t, fams, c.name, c.labels)); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := len(fams["celflow_upstream_errors_total"].Metric); n != 2 {
		t.Errorf("%d error series, want 2 (a 412 is not an error)", n)
	}
}

// The hook's signature is the upstream client's OnLeg field.
var _ = func(m *Metrics) { c := &upstream.Client{}; c.OnLeg = m.UpstreamHook() }

func BenchmarkObserveReport(b *testing.B) {
	m := New()
	rep := epdMiss()
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveReport("/v1/chat/completions", 200, rep, nil)
	}
}

// The front's hook: its own duration, the route's name as label (never a
// path), TTFT for streams only.
func TestObserveFront(t *testing.T) {
	m := New()
	m.Observe(&front.Observation{Route: engine.RouteChat, Status: 200, Duration: 2 * time.Second,
		Report: epdMiss(), Stream: true, FirstByte: 50 * time.Millisecond})
	m.Observe(&front.Observation{Route: engine.RouteCompletions, Status: 200, Duration: time.Second,
		FirstByte: 10 * time.Millisecond}) // not a stream: no TTFT
	m.Observe(&front.Observation{Status: 404, Duration: time.Millisecond})
	fams := scrape(t, m)
	d := find(t, fams, "celflow_request_duration_seconds", map[string]string{"route": "/v1/chat/completions", "workflow": wf}).Histogram
	if d.GetSampleCount() != 1 || d.GetSampleSum() != 2 {
		t.Errorf("chat duration count %d sum %v, want 1 and 2s (the front's duration)", d.GetSampleCount(), d.GetSampleSum())
	}
	if v := value(find(t, fams, "celflow_requests_total", map[string]string{"route": RouteUnmatched, "code": "404"})); v != 1 {
		t.Errorf("unmatched 404 = %v", v)
	}
	if v := value(find(t, fams, "celflow_conditional_decode_total", map[string]string{"result": "miss"})); v != 1 {
		t.Errorf("miss = %v", v)
	}
	if n := len(fams["celflow_stream_ttft_seconds"].Metric); n != 1 {
		t.Fatalf("%d TTFT series, want 1", n)
	}
	ttft := find(t, fams, "celflow_stream_ttft_seconds", map[string]string{"route": "/v1/chat/completions"}).Histogram
	if ttft.GetSampleCount() != 1 || ttft.GetSampleSum() != 0.05 {
		t.Errorf("ttft count %d sum %v", ttft.GetSampleCount(), ttft.GetSampleSum())
	}
}
