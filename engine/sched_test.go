package engine_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/nodetest"
)

const head = "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: t, version: \"2\"}\n"

func load(t testing.TB, body string) *engine.Workflow {
	t.Helper()
	w, ds := engine.Load("t.yaml", []byte(head+body), engine.LoadOptions{})
	if w == nil {
		t.Fatalf("load:\n%s", ds)
	}
	return w
}

type result struct {
	rep    *engine.Report
	rec    *httptest.ResponseRecorder
	events []string
	run    *engine.Run
}

func serve(t testing.TB, w *engine.Workflow, ctx context.Context, route engine.Route, body string) result {
	t.Helper()
	rec := httptest.NewRecorder()
	req := &engine.Request{ID: "r1", Route: route, Header: http.Header{"X-Tenant": {"acme"}}, Body: []byte(body), Model: "m"}
	run := engine.NewRun(ctx, req, rec)
	rep := w.Serve(run)
	return result{rep: rep, rec: rec, events: nodetest.Events(run), run: run}
}

func outcome(rep *engine.Report, id string) engine.Outcome {
	for _, o := range rep.Outcomes {
		if o.Node == id {
			return o
		}
	}
	return engine.Outcome{}
}

func statuses(rep *engine.Report) string {
	var b []string
	for _, o := range rep.Outcomes {
		b = append(b, o.Node+"="+o.Status.String())
	}
	return strings.Join(b, " ")
}

const epd = `
nodes:
  - {id: fetch, type: t-fetch, when: 'request.format == "chat"'}
  - {id: render, type: t-render, needs: [fetch], params: {address: "http://r"}}
  - {id: try_decode, type: t-cond-decode, needs: [render], params: {status: %STATUS%}}
  - id: encode
    type: t-encode
    foreach: media
    needs: [{node: try_decode, if: "response.status == 412"}]
  - {id: prefill, type: t-prefill, needs: [encode]}
  - {id: decode, type: t-decode, needs: [prefill]}
`

const imageChat = `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}},{"type":"image_url","image_url":{"url":"http://x/b.png"}}]}]}`

// ACCEPTANCE 36, 37, 53 (with stand-in nodes): the E/P/D paths.
func TestEPDPaths(t *testing.T) {
	tests := []struct {
		name, status, body string
		want               string
		events             []string
		answer             string
	}{
		{"miss with images", "412", imageChat,
			"fetch=succeeded render=succeeded try_decode=failed encode=succeeded prefill=succeeded decode=succeeded",
			[]string{"start fetch", "end fetch", "start render", "end render", "start try_decode", "end try_decode"}, "decode"},
		{"hit", "200", imageChat,
			"fetch=succeeded render=succeeded try_decode=succeeded encode=skipped prefill=skipped decode=skipped",
			nil, "try_decode"},
		{"text miss", "412", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			"fetch=succeeded render=succeeded try_decode=failed encode=skipped prefill=succeeded decode=succeeded",
			nil, "decode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := load(t, strings.ReplaceAll(epd, "%STATUS%", tc.status))
			r := serve(t, w, context.Background(), engine.RouteChat, tc.body)
			if got := statuses(r.rep); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if r.rep.Err != nil || !r.rep.Answered {
				t.Fatalf("err %v answered %v", r.rep.Err, r.rep.Answered)
			}
			if !strings.Contains(r.rec.Body.String(), `"answered_by":"`+tc.answer+`"`) {
				t.Fatalf("body %s", r.rec.Body)
			}
			if tc.events != nil && !slices.Equal(r.events[:len(tc.events)], tc.events) {
				t.Fatalf("events %v", r.events)
			}
			if tc.status == "200" {
				for _, id := range []string{"encode", "prefill", "decode"} {
					if o := outcome(r.rep, id); o.Reason != "ended" {
						t.Errorf("%s reason %q, want ended", id, o.Reason)
					}
				}
			}
			if strings.Contains(tc.name, "text") {
				if o := outcome(r.rep, "encode"); o.Reason != "no items" {
					t.Errorf("encode reason %q", o.Reason)
				}
			}
			if tc.name == "miss with images" {
				enc := outcome(r.rep, "encode")
				if len(enc.Items) != 2 || enc.Outputs["items"] != int64(2) || enc.Edge != "try_decode[response.status == 412]" {
					t.Fatalf("encode %+v", enc)
				}
				// ACCEPTANCE 36: encode, prefill and decode run in that order.
				order := []string{}
				for _, e := range r.events {
					if strings.HasPrefix(e, "start ") {
						order = append(order, strings.TrimPrefix(e, "start "))
					}
				}
				want := []string{"fetch", "render", "try_decode", "encode[0]", "encode[1]", "prefill", "decode"}
				a, b := slices.Clone(order), slices.Clone(want)
				slices.Sort(a[3:5])
				if !slices.Equal(a, b) {
					t.Fatalf("order %v", order)
				}
			}
		})
	}
}

// ACCEPTANCE 38: a 5xx routed by an edge to the full path.
func TestFailureHandledByEdge(t *testing.T) {
	w := load(t, `
nodes:
  - {id: try_decode, type: t-cond-decode, params: {status: 503}}
  - {id: prefill, type: t-prefill, needs: [{node: try_decode, if: "response.status >= 500"}]}
  - {id: decode, type: t-decode, needs: [prefill]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if r.rep.Err != nil || statuses(r.rep) != "try_decode=failed prefill=succeeded decode=succeeded" {
		t.Fatalf("%s %v", statuses(r.rep), r.rep.Err)
	}
}

// ACCEPTANCE 35: an unhandled failure: no dependent runs, mapped status.
func TestUnhandledFailure(t *testing.T) {
	w := load(t, `
nodes:
  - {id: a, type: t-noop}
  - {id: prefill, type: t-fail, needs: [a], params: {kind: rejected, status: 422}}
  - {id: decode, type: t-decode, needs: [prefill]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	e := r.rep.Err
	if e == nil || e.HTTPStatus() != 422 || e.Code() != "upstream_rejected" || e.Node != "prefill" {
		t.Fatalf("err %+v", e)
	}
	if !strings.HasPrefix(e.ClientMessage("r1"), "prefill rejected the request: HTTP 422") {
		t.Fatalf("msg %q", e.ClientMessage("r1"))
	}
	if slices.Contains(r.events, "start decode") || outcome(r.rep, "decode").Status != engine.StatusSkipped {
		t.Fatalf("decode ran: %v %s", r.events, statuses(r.rep))
	}
}

// ACCEPTANCE 33, 34: order, outputs readable downstream, a false guard skips
// with a reason and is transparent to dependents.
func TestGuardSkipAndOutputs(t *testing.T) {
	w := load(t, `
vars: {limit: 3}
nodes:
  - {id: a, type: t-noop, params: {outputs: {n: 5}}}
  - {id: b, type: t-noop, needs: [a], when: 'request.format == "completions"'}
  - id: c
    type: t-noop
    needs: [b]
    when: nodes.a.outputs.n > config.limit && nodes.b.status == "skipped" && request.headers[?"x-tenant"].orValue("") == "acme"
  - {id: decode, type: t-decode, needs: [c]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if statuses(r.rep) != "a=succeeded b=skipped c=succeeded decode=succeeded" {
		t.Fatalf("%s", statuses(r.rep))
	}
	if o := outcome(r.rep, "b"); o.Reason != `guard false: request.format == "completions"` || slices.Contains(r.events, "start b") {
		t.Fatalf("b %+v %v", o, r.events)
	}
	want := []string{"start a", "end a", "start c", "end c", "start decode", "end decode"}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events %v", r.events)
	}
}

// Omission propagates; join any runs when one need fired.
func TestOmitAndJoin(t *testing.T) {
	w := load(t, `
nodes:
  - {id: probe, type: t-cond-decode, params: {status: 412}}
  - {id: fast, type: t-noop, needs: [{node: probe, if: "response.status == 200"}]}
  - {id: after_fast, type: t-noop, needs: [fast]}
  - {id: full, type: t-noop, needs: [{node: probe, if: "response.status == 412"}]}
  - {id: both, type: t-noop, needs: [after_fast, full]}
  - {id: decode, type: t-decode, needs: [after_fast, full], join: any}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	want := "probe=failed fast=omitted after_fast=omitted full=succeeded both=omitted decode=succeeded"
	if statuses(r.rep) != want || r.rep.Err != nil {
		t.Fatalf("%s %v", statuses(r.rep), r.rep.Err)
	}
	if o := outcome(r.rep, "fast"); o.Reason != "no incoming edge fired: probe[response.status == 200]" {
		t.Fatalf("reason %q", o.Reason)
	}
	if o := outcome(r.rep, "both"); !strings.Contains(o.Reason, "after_fast") {
		t.Fatalf("reason %q", o.Reason)
	}
}

// ACCEPTANCE 39: an already-cancelled context runs nothing.
func TestCancelledContext(t *testing.T) {
	w := load(t, strings.ReplaceAll(epd, "%STATUS%", "412"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := serve(t, w, ctx, engine.RouteChat, imageChat)
	if len(r.events) != 0 || r.rep.Err == nil || r.rep.Err.Kind != engine.KindCancelled {
		t.Fatalf("events %v err %v", r.events, r.rep.Err)
	}
	for _, o := range r.rep.Outcomes {
		if o.Status != engine.StatusCancelled {
			t.Fatalf("%s", statuses(r.rep))
		}
	}
}

// Cancelling mid-run cancels running nodes and starts nothing more.
func TestCancelMidRun(t *testing.T) {
	w := load(t, `
nodes:
  - {id: slow, type: t-noop, params: {delay: 5s}}
  - {id: decode, type: t-decode, needs: [slow]}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := serve(t, w, ctx, engine.RouteChat, `{}`)
	if time.Since(start) > 2*time.Second || slices.Contains(r.events, "start decode") {
		t.Fatalf("took %v, events %v", time.Since(start), r.events)
	}
	if r.rep.Err == nil {
		t.Fatal("no error")
	}
}

// ACCEPTANCE 49: a guard that errors at run time fails the request, under
// defaults.on_cel_error: fail (the default, safe, skips the node, counted
// and logged: TestCELErrorPolicy).
func TestGuardRuntimeError(t *testing.T) {
	w := load(t, `
defaults: {on_cel_error: fail}
vars: {m: {a: x}}
allow: [{rule: vars/invalid-use, at: vars.m, why: the run-time error is what this test shows}]
nodes:
  - {id: gate, type: t-noop, when: 'config.m["missing"] == "x"'}
  - {id: decode, type: t-decode, needs: [gate]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if r.rep.Err == nil || r.rep.Err.HTTPStatus() != 500 || r.rep.Err.Code() != "internal_error" || len(r.events) != 0 {
		t.Fatalf("err %v events %v", r.rep.Err, r.events)
	}
	if o := outcome(r.rep, "gate"); o.Status != engine.StatusFailed || !strings.HasPrefix(o.Reason, "guard error") {
		t.Fatalf("%+v", o)
	}
}

// ACCEPTANCE 200: a panic is an internal error, and the next request works.
func TestPanic(t *testing.T) {
	w := load(t, `
nodes:
  - {id: boom, type: t-panic, when: 'request.model == "boom"'}
  - {id: decode, type: t-decode, needs: [boom]}
`)
	rec := httptest.NewRecorder()
	run := engine.NewRun(context.Background(), &engine.Request{ID: "p", Route: engine.RouteChat, Model: "boom", Body: []byte(`{}`)}, rec)
	rep := w.Serve(run)
	if rep.Err == nil || rep.Err.Code() != "internal_error" || rep.Err.Node != "boom" {
		t.Fatalf("err %+v", rep.Err)
	}
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if r.rep.Err != nil || !r.rep.Answered {
		t.Fatalf("second request: %v", r.rep.Err)
	}
}

// ACCEPTANCE 52: a node timeout clipped by the request deadline is the deadline.
func TestDeadlineClipsTimeout(t *testing.T) {
	w := load(t, `
request_timeout: 200ms
nodes:
  - {id: wait, type: t-noop, params: {delay: 150ms}}
  - {id: hang, type: t-noop, needs: [wait], timeout: 5s, params: {delay: 10s}}
  - {id: decode, type: t-decode, needs: [hang]}
`)
	start := time.Now()
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	el := time.Since(start)
	if el < 150*time.Millisecond || el > 2*time.Second {
		t.Fatalf("took %v", el)
	}
	e := r.rep.Err
	if e == nil || e.Kind != engine.KindDeadline || e.HTTPStatus() != 504 || e.Code() != "deadline_exceeded" {
		t.Fatalf("err %+v", e)
	}
	if o := outcome(r.rep, "hang"); o.Status != engine.StatusTimedOut || o.Duration > time.Second {
		t.Fatalf("%+v", o)
	}
}

// An unclipped node timeout is an upstream timeout.
func TestNodeTimeout(t *testing.T) {
	w := load(t, `
nodes:
  - {id: hang, type: t-noop, timeout: 20ms, params: {delay: 10s}}
  - {id: decode, type: t-decode, needs: [hang]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if e := r.rep.Err; e == nil || e.Kind != engine.KindUpstreamTimeout || e.Code() != "upstream_timeout" {
		t.Fatalf("err %+v", e)
	}
}

// Retries: default predicate retries 5xx, not 4xx; a CEL predicate decides.
func TestRetries(t *testing.T) {
	tests := []struct {
		name, node string
		attempts   int
	}{
		{"5xx retried", `{id: p, type: t-fail, params: {status: 503}, retry: {attempts: 3, backoff: 1ms}}`, 3},
		{"4xx not retried", `{id: p, type: t-fail, params: {kind: rejected, status: 400}, retry: {attempts: 3, backoff: 1ms}}`, 1},
		{"predicate", `{id: p, type: t-fail, params: {kind: rejected, status: 409}, retry: {attempts: 2, backoff: 1ms, if: "response.status == 409 && outcome.attempt < 5"}}`, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := load(t, "nodes:\n  - "+tc.node+"\n  - {id: decode, type: t-decode, needs: [p]}\n")
			r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
			if o := outcome(r.rep, "p"); o.Attempt != tc.attempts || r.rep.Err == nil {
				t.Fatalf("attempts %d err %v", o.Attempt, r.rep.Err)
			}
		})
	}
}

// Fan-out: the cap holds, items stay in order, the first failure beyond
// tolerate cancels the rest. ACCEPTANCE 126: max_parallel 2 over more than
// 5 items never has more than 2 in flight (the cap is the scheduler's, the
// same for the real encode node).
func TestFanOut(t *testing.T) {
	body := `{"messages":[{"content":[` + strings.Repeat(`{"type":"image_url"},`, 5) + `{"type":"image_url"}]}]}`
	w := load(t, `
nodes:
  - {id: fetch, type: t-fetch}
  - {id: encode, type: t-encode, needs: [fetch], foreach: media, max_parallel: 2, params: {delay: 100ms}}
  - {id: decode, type: t-decode, needs: [encode]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, body)
	if r.rep.Err != nil {
		t.Fatal(r.rep.Err)
	}
	inflight, peak := 0, 0
	for _, e := range r.events {
		if strings.HasPrefix(e, "start encode[") {
			inflight++
			peak = max(peak, inflight)
		} else if strings.HasPrefix(e, "end encode[") {
			inflight--
		}
	}
	if peak != 2 {
		t.Fatalf("peak in flight %d, want 2: %v", peak, r.events)
	}
	enc := outcome(r.rep, "encode")
	if len(enc.Items) != 6 {
		t.Fatalf("items %d", len(enc.Items))
	}

	fail := load(t, `
nodes:
  - {id: fetch, type: t-fetch}
  - {id: encode, type: t-encode, needs: [fetch], foreach: media, max_parallel: 2, params: {status: 500}}
  - {id: decode, type: t-decode, needs: [encode]}
`)
	r = serve(t, fail, context.Background(), engine.RouteChat, body)
	if e := r.rep.Err; e == nil || e.Code() != "bad_gateway" || e.Where() == "encode" || !strings.HasPrefix(e.Where(), "encode[") {
		t.Fatalf("err %+v", e)
	}
	started := 0
	for _, e := range r.events {
		if strings.HasPrefix(e, "start encode[") {
			started++
		}
	}
	if started > 3 {
		t.Fatalf("failure did not cancel the rest: %d started", started)
	}

	tol := load(t, `
nodes:
  - {id: fetch, type: t-fetch}
  - {id: encode, type: t-encode, needs: [fetch], foreach: media, tolerate: 6, params: {status: 500}}
  - {id: decode, type: t-decode, needs: [encode]}
`)
	r = serve(t, tol, context.Background(), engine.RouteChat, body)
	if r.rep.Err != nil || outcome(r.rep, "encode").Status != engine.StatusSucceeded {
		t.Fatalf("tolerated: %v %s", r.rep.Err, statuses(r.rep))
	}
}

// Parallel branches run concurrently; a survivor keeps running after the end.
func TestParallelAndSurvivor(t *testing.T) {
	w := load(t, `
nodes:
  - {id: a, type: t-noop, params: {delay: 50ms}}
  - {id: b, type: t-noop, params: {delay: 50ms}}
  - {id: bg, type: t-survivor, params: {delay: 3s}}
  - {id: decode, type: t-decode, needs: [a, b]}
`)
	start := time.Now()
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Serve waited for the survivor: %v", el)
	}
	ia, ib := slices.Index(r.events, "end a"), slices.Index(r.events, "start b")
	ja, jb := slices.Index(r.events, "start a"), slices.Index(r.events, "end b")
	if ia < 0 || ib < 0 || !(ib < ia && ja < jb) { // both started before either ended
		t.Fatalf("a and b not concurrent: %v", r.events)
	}
	if !r.rep.Answered || r.rep.Err != nil {
		t.Fatalf("%v", r.rep.Err)
	}
	if o := outcome(r.rep, "bg"); o.Status != engine.StatusPending || !strings.Contains(o.Reason, "survives") {
		t.Fatalf("survivor %+v", o)
	}
}

// No node answered and no error: an internal error. The ending proof
// rejects every workflow that could end so (TestEndingProof), so only a
// node type that breaks its contract gets here.
func TestNoAnswer(t *testing.T) {
	w := load(t, `
nodes:
  - {id: decode, type: t-mute}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	if r.rep.Err == nil || r.rep.Err.Msg != "no node answered the client" {
		t.Fatalf("%v", r.rep.Err)
	}
}

// Guards that a route decides (literals, request.format) are not
// evaluated, yet read exactly as evaluated: same statuses and reasons, and
// an erroring operand the route does not absorb still fails the run
// (ACCEPTANCE 49, under on_cel_error: fail).
func TestStaticGuards(t *testing.T) {
	w := load(t, `
defaults: {on_cel_error: fail}
vars: {m: {a: x}}
allow: [{rule: vars/invalid-use, at: vars.m, why: the run-time error is what this test shows}]
nodes:
  - {id: lit, type: t-noop, when: "true"}
  - {id: chat, type: t-noop, needs: [lit], when: 'request.format == "chat"'}
  - {id: text, type: t-noop, needs: [chat], when: 'request.format in ["chat", "completions"]'}
  - {id: mixed, type: t-noop, needs: [text], when: 'request.format != "generate" && request.model == "m"'}
  - {id: absorb, type: t-noop, needs: [mixed], when: 'request.format == "chat" || config.m["missing"] == "x"'}
  - {id: decode, type: t-decode, needs: [absorb]}
`)
	tests := []struct {
		route  engine.Route
		want   string
		reason string // of node chat
		fails  bool
	}{
		{engine.RouteChat, "lit=succeeded chat=succeeded text=succeeded mixed=succeeded absorb=succeeded decode=succeeded", "", false},
		{engine.RouteCompletions, "lit=succeeded chat=skipped text=succeeded mixed=succeeded absorb=failed decode=skipped",
			`guard false: request.format == "chat"`, true},
		{engine.RouteGenerate, "lit=succeeded chat=skipped text=skipped mixed=skipped absorb=failed decode=skipped",
			`guard false: request.format == "chat"`, true},
	}
	for _, tc := range tests {
		t.Run(tc.route.String(), func(t *testing.T) {
			for range 2 { // the second run uses the pooled scratch
				r := serve(t, w, context.Background(), tc.route, `{}`)
				if got := statuses(r.rep); got != tc.want {
					t.Fatalf("got  %s\nwant %s", got, tc.want)
				}
				if o := outcome(r.rep, "chat"); o.Reason != tc.reason {
					t.Fatalf("reason %q", o.Reason)
				}
				if fails := r.rep.Err != nil; fails != tc.fails || (fails && r.rep.Err.HTTPStatus() != 500) {
					t.Fatalf("err %v", r.rep.Err)
				}
			}
		})
	}
}

// An edge condition computed to decide whether a failure is handled is
// reused when the edges propagate, except one that reads the reason: that
// changed in between ("handled by an outgoing edge") and is read afresh.
func TestHandledConditionReuse(t *testing.T) {
	w := load(t, `
nodes:
  - {id: probe, type: t-cond-decode, params: {status: 412}}
  - {id: by_reason, type: t-noop, needs: [{node: probe, if: 'outcome.reason.contains("handled")'}]}
  - {id: by_status, type: t-noop, needs: [{node: probe, if: "response.status == 412"}]}
  - {id: hit, type: t-noop, needs: [{node: probe, if: "response.status == 200"}]}
  - {id: decode, type: t-decode, needs: [by_reason, by_status, hit], join: any}
`)
	for range 2 {
		r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
		want := "probe=failed by_reason=succeeded by_status=succeeded hit=omitted decode=succeeded"
		if got := statuses(r.rep); got != want || r.rep.Err != nil {
			t.Fatalf("got  %s (%v)\nwant %s", got, r.rep.Err, want)
		}
		if o := outcome(r.rep, "probe"); !o.Handled || !strings.HasSuffix(o.Reason, "handled by an outgoing edge") {
			t.Fatalf("probe %+v", o)
		}
	}
}

// A fan-out over one item runs it on the scheduler's goroutine, with the
// same outcomes as several: item outcomes, the merge, and a failure that
// names the item.
func TestFanOutOneItem(t *testing.T) {
	one := `{"messages":[{"content":[{"type":"image_url"}]}]}`
	tests := []struct {
		name, params string
		status       engine.Status
		where        string // "" for success
	}{
		{"ok", "{}", engine.StatusSucceeded, ""},
		{"fails", "{status: 502}", engine.StatusFailed, "encode[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := load(t, `
nodes:
  - {id: fetch, type: t-fetch}
  - {id: encode, type: t-encode, needs: [fetch], foreach: media, params: `+tc.params+`}
  - {id: decode, type: t-decode, needs: [encode]}
`)
			r := serve(t, w, context.Background(), engine.RouteChat, one)
			enc := outcome(r.rep, "encode")
			if enc.Status != tc.status || len(enc.Items) != 1 || enc.Items[0].Status != tc.status {
				t.Fatalf("encode %+v", enc)
			}
			if !slices.Contains(r.events, "start encode[0]") {
				t.Fatalf("events %v", r.events)
			}
			if tc.where == "" {
				if r.rep.Err != nil || enc.Outputs["items"] != int64(1) {
					t.Fatalf("err %v outputs %v", r.rep.Err, enc.Outputs)
				}
				return
			}
			if e := r.rep.Err; e == nil || e.Where() != tc.where || e.Code() != "bad_gateway" {
				t.Fatalf("err %+v", e)
			}
		})
	}
}

// Each node that runs reads the clock once, at its end: it starts when
// the walk decided it, and its duration covers its work.
func TestInlineTiming(t *testing.T) {
	w := load(t, `
nodes:
  - {id: a, type: t-noop}
  - {id: slow, type: t-noop, needs: [a], params: {delay: 20ms}}
  - {id: decode, type: t-decode, needs: [slow]}
`)
	before := time.Now()
	r := serve(t, w, context.Background(), engine.RouteChat, `{}`)
	after := time.Now()
	prevEnd := before
	for _, o := range r.rep.Outcomes {
		if o.Start.Before(prevEnd) || o.Duration < 0 || o.Start.Add(o.Duration).After(after) {
			t.Fatalf("%s starts %v lasts %v (previous end %v)", o.Node, o.Start, o.Duration, prevEnd)
		}
		prevEnd = o.Start.Add(o.Duration)
	}
	if d := outcome(r.rep, "slow").Duration; d < 20*time.Millisecond {
		t.Fatalf("slow lasted %v", d)
	}
	if r.rep.Duration < 20*time.Millisecond || r.rep.Duration > after.Sub(before) {
		t.Fatalf("run lasted %v", r.rep.Duration)
	}
}

// A condition that fails at run time fails the run with 500 under
// on_cel_error: fail, and its CEL text stays out of the client's message
// (where it was quoted, then JSON-escaped again): it goes to the log
// through the error's cause.
func TestEdgeConditionErrorKeepsCELFromClient(t *testing.T) {
	w := load(t, `
defaults: {on_cel_error: fail}
allow: [{rule: cel/may-fail, at: "nodes[1].needs[0].if"}]
nodes:
  - {id: probe, type: t-cond-decode, params: {status: 412}}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status == 412 && int(request.model + "x") > 1'}]}
`)
	r := serve(t, w, context.Background(), engine.RouteChat, `{"model":"m"}`)
	e := r.rep.Err
	if e == nil || e.HTTPStatus() != 500 {
		t.Fatalf("err %v", e)
	}
	msg := e.ClientMessage("r1")
	if strings.Contains(msg, "int(") || strings.Contains(msg, `\"`) || !strings.Contains(msg, "edge") {
		t.Errorf("client message %q", msg)
	}
	if !strings.Contains(e.Error(), `int(request.model + "x") > 1`) {
		t.Errorf("the log line lacks the expression: %q", e.Error())
	}
}
