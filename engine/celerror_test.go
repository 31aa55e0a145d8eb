package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// Issue 18: a CEL expression that fails at run time (here int() of a model
// name that is no number: it validates, and fails on every request) is
// read as its safe value under defaults.on_cel_error: safe
// and fails the request with a 500 naming the node under fail. Either way
// the outcome records the event by a stable name, never the expression.
func TestCELErrorPolicy(t *testing.T) {
	const bad = `int(request.model) > 3`
	tests := []struct {
		kind     string
		body     string // nodes
		node     string // the node whose outcome records the error
		expr     string
		safe     string // statuses under safe
		failNode string // the node the 500 names under fail
	}{
		{"guard", `
  - {id: gate, type: t-noop, when: '` + bad + `'}
  - {id: decode, type: t-decode, needs: [gate]}`,
			"gate", "guard", "gate=skipped decode=succeeded", "gate"},
		{"edge", `
  - {id: probe, type: t-cond-decode, params: {status: 412}}
  - {id: fallback, type: t-decode, needs: [{node: probe, if: 'response.status == 412 && ` + bad + `'}]}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status == 412'}]}`,
			"probe", "edge:probe->fallback", "probe=failed fallback=omitted decode=succeeded", "probe"},
		{"target", `
  - {id: d, type: k-pool, target: [{if: '` + bad + `', pool: big}, {pool: small}]}`,
			"d", "target[0].if", "d=succeeded", "d"},
		{"retry", `
  - {id: p, type: t-fail, params: {status: 503}, retry: {attempts: 3, backoff: 1ms, if: '` + bad + `'}}
  - {id: decode, type: t-decode, needs: [p]}`,
			"p", "retry.if", "p=failed decode=skipped", "p"},
	}
	for _, tc := range tests {
		for _, policy := range []string{"", "safe", "fail"} {
			t.Run(tc.kind+"/"+policy, func(t *testing.T) {
				// The expression fails for every request on purpose: the
				// load-time search's finding is accepted (allow:).
				at := map[string]string{"guard": "nodes[0].when", "edge": "nodes[1].needs[0].if",
					"target": "nodes[0].target[0].if", "retry": "nodes[0].retry.if"}[tc.kind]
				doc := "allow: [{rule: cel/may-fail, at: '" + at + "'}]\nnodes:" + tc.body + "\n"
				if policy != "" {
					doc = "defaults: {on_cel_error: " + policy + "}\n" + doc
				}
				w := load(t, doc)
				if want := map[string]string{"": "fail"}[policy]; w.OnCELError() != policy && w.OnCELError() != want {
					t.Fatalf("policy %q", w.OnCELError())
				}
				r := serve(t, w, context.Background(), engine.RouteChat, `{"model":"m"}`)
				o := outcome(r.rep, tc.node)
				if len(o.CELErrors) == 0 || o.CELErrors[0].Expr != tc.expr || !strings.Contains(o.CELErrors[0].Error, "string") {
					t.Fatalf("cel errors %+v", o.CELErrors)
				}
				if policy != "safe" { // fail, the default
					e := r.rep.Err
					if e == nil || e.HTTPStatus() != 500 || e.Node != tc.failNode {
						t.Fatalf("err %v (%s)", e, statuses(r.rep))
					}
					msg := e.ClientMessage("r1")
					if strings.Contains(msg, "int(") || !strings.Contains(msg, tc.failNode) {
						t.Errorf("client message %q", msg)
					}
					if !strings.Contains(e.Error(), bad) {
						t.Errorf("the log lacks the expression: %q", e.Error())
					}
					return
				}
				if got := statuses(r.rep); got != tc.safe {
					t.Fatalf("got  %s\nwant %s (err %v)", got, tc.safe, r.rep.Err)
				}
				switch tc.kind {
				case "retry": // no retry: the attempt's own 503 stands
					if o.Attempt != 1 || r.rep.Err == nil || r.rep.Err.HTTPStatus() == 500 {
						t.Fatalf("attempts %d err %v", o.Attempt, r.rep.Err)
					}
				case "guard":
					if !strings.HasPrefix(o.Reason, "guard error, read as false") || r.rep.Err != nil {
						t.Fatalf("reason %q err %v", o.Reason, r.rep.Err)
					}
				case "target": // the rule did not match: the next one chose
					if o.Target == nil || o.Target.Pool != "small" {
						t.Fatalf("target %+v", o.Target)
					}
				default:
					if r.rep.Err != nil {
						t.Fatal(r.rep.Err)
					}
				}
			})
		}
	}
}

// A bad on_cel_error value is a load error at its position.
func TestCELErrorPolicyValue(t *testing.T) {
	_, ds := engine.Load("t.yaml", []byte(head+"defaults: {on_cel_error: maybe}\nnodes:\n  - {id: decode, type: t-decode}\n"), engine.LoadOptions{})
	if s := ds.String(); !strings.Contains(s, "t.yaml:4:") || !strings.Contains(s, "on_cel_error") {
		t.Fatalf("%s", s)
	}
}

// explain runs the policy on the serve path and says what it did.
func TestCELErrorExplain(t *testing.T) {
	const doc = `
allow:
  - {rule: cel/may-fail, at: "nodes[0].when", why: the run-time policy is what this test shows}
  - {rule: cel/may-fail, at: "nodes[2].needs[0].if"}
nodes:
  - {id: gate, type: t-noop, when: 'int(request.model) > 3'}
  - {id: probe, type: t-cond-decode, needs: [gate]}
  - {id: fallback, type: t-decode, needs: [{node: probe, if: 'response.status == 412 && 10 / size(media) > 1'}]}
  - {id: decode, type: t-decode, needs: [{node: probe, if: 'response.status == 412'}]}
`
	probe := engine.Probe{Route: engine.RouteChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)}
	assume := map[string]engine.Assumption{}
	a, err := engine.ParseAssumption("412")
	if err != nil {
		t.Fatal(err)
	}
	assume["probe"] = a
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"safe", []string{
			"gate      skipped    guard error, read as false (on_cel_error: safe)",
			"CEL error in guard (",
			"read as false: the node is skipped (on_cel_error: safe)",
			"CEL error in edge:probe->fallback (division by zero): read as false: the edge does not hold (on_cel_error: safe)",
			"fallback  omitted",
			"result: answered by decode",
		}},
		{"fail", []string{
			"CEL error in guard (",
			"the request fails with 500 (on_cel_error: fail)",
			"result: HTTP 500 internal_error",
		}},
	} {
		w := load(t, "defaults: {on_cel_error: "+tc.policy+"}\n"+doc)
		rep, err := w.Explain(context.Background(), probe, assume)
		if err != nil {
			t.Fatal(err)
		}
		out := engine.FormatReport(rep)
		for _, s := range tc.want {
			if !strings.Contains(out, s) {
				t.Errorf("%s: explain lacks %q:\n%s", tc.policy, s, out)
			}
		}
	}
}
