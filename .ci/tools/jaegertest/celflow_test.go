//go:build jaeger

// The Jaeger end-to-end test of issue 6: real processes (Jaeger, the
// simulators, the simulated gateway, `celflow serve`), one trace read back
// from Jaeger's query API. Run with:
//
//	JAEGER_BIN=$(bash .ci/jaeger.sh) CELFLOW_BIN=$PWD/bin/celflow \
//	  CELFLOW_SIM_BIN=$PWD/bin/celflow-sim sh -c 'cd .ci/tools && go test -count=1 -tags jaeger ./...'

package jaegertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/.ci/tools/jaegertest"
)

// nodeTypes are the nodes of workflows/epd.yaml, in order, with their types.
var nodeTypes = []struct{ id, typ string }{
	{"fetch", "fetch-media"}, {"render", "render"}, {"try_decode", "conditional-decode"},
	{"encode", "encode"}, {"prefill", "prefill"}, {"decode", "decode"},
}

const serverSpan = "POST /v1/chat/completions"

// TestCelflowTrace: an E/P/D image chat through the gateway is one trace in
// Jaeger, continuing the client's traceparent, with one span per node, the
// encode item's child span, the provenance attributes and the 412 edge; every
// worker leg's traceparent names its node's span. The same request again is
// a conditional-decode hit: encode, prefill and decode are zero-length
// skipped spans, reason "ended".
// ACCEPTANCE 51
func TestCelflowTrace(t *testing.T) {
	jaegerBin, celflowBin, simBin := os.Getenv("JAEGER_BIN"), os.Getenv("CELFLOW_BIN"), os.Getenv("CELFLOW_SIM_BIN")
	if jaegerBin == "" || celflowBin == "" || simBin == "" {
		t.Skip("JAEGER_BIN, CELFLOW_BIN and CELFLOW_SIM_BIN must name the jaeger, celflow and celflow-sim binaries " +
			"(JAEGER_BIN=$(bash .ci/jaeger.sh), CELFLOW_BIN=$PWD/bin/celflow, CELFLOW_SIM_BIN=$PWD/bin/celflow-sim after make build)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := startStack(t, ctx, jaegerBin, celflowBin, simBin)

	body, err := json.Marshal(map[string]any{
		"model": "sim-model", "max_tokens": 8,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What colours does this gradient have?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": pngDataURI(t)}},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("miss", func(t *testing.T) {
		traceID, clientSpan := newID(16), newID(8)
		status, reply := st.chat("jaeger-miss", traceparent(traceID, clientSpan), body)
		if status != 200 {
			t.Fatalf("HTTP %d: %s", status, reply)
		}
		tr := st.trace(t, ctx, traceID, 1+len(nodeTypes)+1) // server, nodes, encode[0]
		spans := checkTree(t, st, tr, clientSpan, map[string]string{
			"fetch": "succeeded", "render": "succeeded", "try_decode": "failed",
			"encode": "succeeded", "prefill": "succeeded", "decode": "succeeded",
		})

		td := spans["try_decode"]
		wantTag(t, td, "http.response.status_code", float64(412))
		wantTag(t, td, "celflow.epp_profile", "decode")
		enc := spans["encode"]
		wantTag(t, enc, "celflow.edge", "try_decode[response.status == 412]")
		for id, profile := range map[string]string{"prefill": "prefill", "decode": "decode"} {
			wantTag(t, spans[id], "http.response.status_code", float64(200))
			wantTag(t, spans[id], "celflow.epp_profile", profile)
			wantUpstream(t, spans[id], st.gateway)
		}
		wantUpstream(t, td, st.gateway)
		wantUpstream(t, spans["render"], st.workers["render"])
		wantTag(t, spans["render"], "http.response.status_code", float64(200))
		// Time to first byte on every leg, bytes in on every JSON reply read.
		for _, id := range []string{"render", "try_decode", "prefill", "decode"} {
			wantTagSet(t, spans[id], "celflow.ttfb_ms")
		}
		for _, id := range []string{"render", "prefill"} {
			wantTagSet(t, spans[id], "celflow.bytes_in")
		}
		wantTagSet(t, spans["decode"], "celflow.bytes_relayed")

		item := tr.Find("encode[0]")
		if item == nil {
			t.Fatalf("no encode[0] span; spans: %s", names(tr))
		}
		if item.Parent() != enc.SpanID {
			t.Errorf("encode[0]'s parent is %s, want the encode span %s", item.Parent(), enc.SpanID)
		}
		wantTag(t, item, "celflow.item.index", float64(0))
		wantTag(t, item, "celflow.node.id", "encode")
		wantTag(t, item, "celflow.node.type", "encode")
		wantTag(t, item, "celflow.node.status", "succeeded")
		wantTag(t, item, "celflow.epp_profile", "encode")
		wantTag(t, item, "http.response.status_code", float64(200))
		wantUpstream(t, item, st.gateway)
		wantTagSet(t, item, "celflow.ttfb_ms")
		wantTagSet(t, item, "celflow.bytes_in")

		// Every worker leg, and the gateway's 412, carried the node's span
		// (the item's for encode) as traceparent parent, in the client's trace.
		legParent := map[string]*jaegertest.Span{
			"render": spans["render"], "encode": item, "prefill": spans["prefill"], "decode": spans["decode"],
		}
		for _, role := range roles {
			recs := st.records(st.workers[role], "jaeger-miss")
			if len(recs) != 1 {
				t.Errorf("%s worker received %d legs, want 1", role, len(recs))
				continue
			}
			wantTraceparent(t, role+" leg", recs[0], traceID, legParent[role])
		}
		var gw412 int
		for _, r := range st.records(st.gateway, "jaeger-miss") {
			if r.Status == 412 {
				gw412++
				wantTraceparent(t, "gateway's 412", r, traceID, td)
			}
		}
		if gw412 != 1 {
			t.Errorf("the gateway answered %d 412s, want 1 (the conditional decode)", gw412)
		}
	})

	t.Run("hit", func(t *testing.T) {
		traceID, clientSpan := newID(16), newID(8)
		status, reply := st.chat("jaeger-hit", traceparent(traceID, clientSpan), body)
		if status != 200 {
			t.Fatalf("HTTP %d: %s", status, reply)
		}
		tr := st.trace(t, ctx, traceID, 1+len(nodeTypes))
		spans := checkTree(t, st, tr, clientSpan, map[string]string{
			"fetch": "succeeded", "render": "succeeded", "try_decode": "succeeded",
			"encode": "skipped", "prefill": "skipped", "decode": "skipped",
		})
		wantTag(t, spans["try_decode"], "http.response.status_code", float64(200))
		for _, id := range []string{"encode", "prefill", "decode"} {
			sp := spans[id]
			wantTag(t, sp, "celflow.node.reason", "ended")
			if sp.Duration != 0 {
				t.Errorf("skipped %s lasted %dµs, want a zero-length span", id, sp.Duration)
			}
		}
		if sp := tr.Find("encode[0]"); sp != nil {
			t.Errorf("a skipped encode has an item span")
		}
		// The conditional decode was the only worker leg after render.
		recs := st.records(st.workers["decode"], "jaeger-hit")
		if len(recs) != 1 {
			t.Fatalf("decode worker received %d legs, want 1 (the conditional decode)", len(recs))
		}
		wantTraceparent(t, "conditional decode leg", recs[0], traceID, spans["try_decode"])
		for _, role := range []string{"encode", "prefill"} {
			if n := len(st.records(st.workers[role], "jaeger-hit")); n != 0 {
				t.Errorf("%s worker received %d legs on a hit", role, n)
			}
		}
	})
}

// trace waits (bounded) for the trace to hold n spans and fails on more.
func (st *stack) trace(t *testing.T, ctx context.Context, traceID string, n int) *jaegertest.Trace {
	t.Helper()
	tr, err := st.jaeger.WaitTrace(ctx, traceID, n, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Spans of one request are exported together; give stragglers a moment
	// so an unexpected extra span is seen.
	time.Sleep(300 * time.Millisecond)
	if tr, err = st.jaeger.Trace(ctx, traceID); err != nil {
		t.Fatal(err)
	}
	if len(tr.Spans) != n {
		t.Fatalf("trace has %d spans, want %d: %s", len(tr.Spans), n, names(tr))
	}
	return tr
}

// checkTree asserts the server span (the client's span as parent, service
// celflow) and one span per node under it with the workflow and node
// attributes and the given statuses; it returns the node spans by id.
func checkTree(t *testing.T, st *stack, tr *jaegertest.Trace, clientSpan string, status map[string]string) map[string]*jaegertest.Span {
	t.Helper()
	srv := tr.Find(serverSpan)
	if srv == nil {
		t.Fatalf("no %q span: %s", serverSpan, names(tr))
	}
	if srv.Parent() != clientSpan {
		t.Errorf("server span's parent is %q, want the client's span %s", srv.Parent(), clientSpan)
	}
	wantTag(t, srv, "span.kind", "server")
	wantTag(t, srv, "http.route", "/v1/chat/completions")
	wantTag(t, srv, "http.response.status_code", float64(200))
	for i := range tr.Spans {
		if s := tr.Service(&tr.Spans[i]); s != "celflow" {
			t.Errorf("span %s is from service %q, want celflow", tr.Spans[i].OperationName, s)
		}
	}
	spans := map[string]*jaegertest.Span{}
	for _, n := range nodeTypes {
		var found []*jaegertest.Span
		for i := range tr.Spans {
			if tr.Spans[i].OperationName == n.id {
				found = append(found, &tr.Spans[i])
			}
		}
		if len(found) != 1 {
			t.Errorf("%d spans named %s, want 1", len(found), n.id)
			continue
		}
		sp := found[0]
		spans[n.id] = sp
		if sp.Parent() != srv.SpanID {
			t.Errorf("%s's parent is %s, want the server span %s", n.id, sp.Parent(), srv.SpanID)
		}
		wantTag(t, sp, "celflow.workflow.name", "epd")
		wantTag(t, sp, "celflow.workflow.version", "1")
		wantTag(t, sp, "celflow.workflow.hash", st.hash)
		wantTag(t, sp, "celflow.node.id", n.id)
		wantTag(t, sp, "celflow.node.type", n.typ)
		wantTag(t, sp, "celflow.node.status", status[n.id])
		// Jaeger truncates start and duration to µs each: allow 1µs.
		if sp.StartTime < srv.StartTime || sp.StartTime+sp.Duration > srv.StartTime+srv.Duration+1 {
			t.Errorf("%s [%d+%d] lies outside the server span [%d+%d]", n.id, sp.StartTime, sp.Duration, srv.StartTime, srv.Duration)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return spans
}

func wantTag(t *testing.T, sp *jaegertest.Span, key string, want any) {
	t.Helper()
	got, ok := sp.Tag(key)
	if !ok {
		t.Errorf("%s: no %s (tags: %s)", sp.OperationName, key, tags(sp))
	} else if got != want {
		t.Errorf("%s: %s = %v (%T), want %v (%T)", sp.OperationName, key, got, got, want, want)
	}
}

// wantTagSet: the span has the tag, whatever its value.
func wantTagSet(t *testing.T, sp *jaegertest.Span, key string) {
	t.Helper()
	if _, ok := sp.Tag(key); !ok {
		t.Errorf("%s: no %s (tags: %s)", sp.OperationName, key, tags(sp))
	}
}

// wantUpstream: celflow.upstream.url is on the expected host (the gateway
// for worker legs, the render worker for render).
func wantUpstream(t *testing.T, sp *jaegertest.Span, base string) {
	t.Helper()
	got, ok := sp.Tag("celflow.upstream.url")
	if s, _ := got.(string); !ok || hostOf(s) != base {
		t.Errorf("%s: celflow.upstream.url = %v, want a URL under %s", sp.OperationName, got, base)
	}
}

// wantTraceparent: the record carried exactly one traceparent, in traceID,
// whose parent is the span parent.
func wantTraceparent(t *testing.T, what string, r record, traceID string, parent *jaegertest.Span) {
	t.Helper()
	tps := r.Headers.Values("Traceparent")
	if want := traceparent(traceID, parent.SpanID); len(tps) != 1 || tps[0] != want {
		t.Errorf("%s (%s %s): traceparent %q, want %q (span %s)", what, r.Worker, r.Path, tps, want, parent.OperationName)
	}
}

func traceparent(traceID, spanID string) string { return "00-" + traceID + "-" + spanID + "-01" }

// newID is n random bytes in hex: a trace id (16) or a span id (8).
func newID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func names(tr *jaegertest.Trace) string {
	var out []string
	for _, s := range tr.Spans {
		out = append(out, fmt.Sprintf("%s(%s←%s)", s.OperationName, s.SpanID, s.Parent()))
	}
	return strings.Join(out, " ")
}

func tags(sp *jaegertest.Span) string {
	var out []string
	for _, g := range sp.Tags {
		out = append(out, fmt.Sprintf("%s=%v", g.Key, g.Value))
	}
	return strings.Join(out, " ")
}
