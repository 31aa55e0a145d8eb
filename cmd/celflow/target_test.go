package main

import (
	"context"
	"strings"
	"testing"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Target rules are checked at load like every other field: where they may
// stand, their order, their headers, their CEL and, when the serve config
// is known, their pools (issue 13).
func TestTargetRuleDiagnostics(t *testing.T) {
	direct, err := upstream.New(upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RoleDecode: {{URL: "http://127.0.0.1:9"}}, upstream.RolePrefill: {{URL: "http://127.0.0.1:9"}},
		"decode-small": {{URL: "http://127.0.0.1:8"}}}})
	if err != nil {
		t.Fatal(err)
	}
	const head = "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: t, version: \"1\"}\nroutes: [chat]\nnodes:\n"
	cases := []struct {
		name  string
		nodes string
		up    *upstream.Client
		want  []string // substrings of the diagnostics; none: loads clean
	}{
		{"valid, validate-only", `
  - id: decode
    type: decode
    target:
      - {if: 'request.model == "a"', pool: decode-big, model: b, headers: {epp-profile: decode-long}}
      - {headers: {x-llm-d-inference-objective: std}}
`, nil, nil},
		{"unknown pool against the serve config", `
  - id: decode
    type: decode
    target: [{if: 'request.model == "a"', pool: decode-smal}]
`, direct, []string{`t.yaml:8:49: nodes[0].target[0].pool: no pool named "decode-smal" in upstream.pools (did you mean "decode-small"?); pools: decode, decode-small, prefill (the decode legs of this node would have nowhere to go)`}},
		{"a named pool that exists", `
  - id: decode
    type: decode
    target: [{if: 'request.model == "a"', pool: decode-small}]
`, direct, nil},
		{"a node without a worker role", `
  - id: fetch
    type: fetch-media
    target: [{model: x}]
  - id: decode
    type: decode
    needs: [fetch]
`, nil, []string{`nodes[0].target: target rules choose where a worker leg goes; node type "fetch-media" sends none`}},
		{"an unconditional rule before others", `
  - id: decode
    type: decode
    target: [{model: x}, {if: 'request.model == "a"', model: y}]
`, nil, []string{"nodes[0].target[0]: a rule without `if` always matches, so the 1 rule(s) after it can never be chosen"}},
		{"capitals and reserved headers", `
  - id: decode
    type: decode
    target: [{headers: {X-Tenant: a, content-length: "5", x-request-id: r, x-celflow-pool: p}}]
`, nil, []string{
			`header names are written in lower case ("x-tenant")`,
			"a target rule cannot set content-length: celflow frames the body",
			"a target rule cannot set x-request-id",
			"a target rule cannot set x-celflow-pool: `pool` sets it"}},
		{"a non-bool condition", `
  - id: decode
    type: decode
    target: [{if: 'request.model', model: x}]
`, nil, []string{"nodes[0].target[0].if:"}},
		{"a read of a node that does not precede", `
  - id: prefill
    type: prefill
  - id: decode
    type: decode
    target: [{if: 'nodes.prefill.status == "succeeded"', model: x}]
`, nil, []string{"nodes[1].target[0].if:", "does not precede"}},
		{"schema: an unknown key and a bad pool name", `
  - id: decode
    type: decode
    target: [{if: 'true', pol: x}, {pool: Big_Pool}]
`, nil, []string{`unknown field "pol"`, "nodes[0].target[1].pool:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, ds := engine.Load("t.yaml", []byte(head+strings.TrimPrefix(tc.nodes, "\n")), engine.LoadOptions{Upstream: tc.up})
			out := ds.String()
			if len(tc.want) == 0 {
				if w == nil || ds.HasErrors() {
					t.Fatalf("want a clean load:\n%s", out)
				}
				return
			}
			if w != nil {
				t.Fatalf("loaded, want errors %q", tc.want)
			}
			for _, s := range tc.want {
				if !strings.Contains(out, s) {
					t.Errorf("missing %q in:\n%s", s, out)
				}
			}
		})
	}
}

// The concurrent kv-sglang prefill shares its endpoint with decode: a pool
// rule on it is refused at load rather than ignored.
func TestTargetPoolOnSharedEndpoint(t *testing.T) {
	wf := `apiVersion: celflow/v1
kind: Workflow
metadata: {name: s, version: "1"}
routes: [chat]
defaults: {kv_connector: kv-sglang}
nodes:
  - id: prefill
    type: prefill
    params: {shape: concurrent}
    target: [{pool: prefill-big}]
  - id: decode
    type: decode
`
	_, ds := engine.Load("s.yaml", []byte(wf), engine.LoadOptions{})
	if !strings.Contains(ds.String(), "s.yaml:10:21: nodes[0].target[0].pool: this prefill node draws its endpoint once per request") {
		t.Fatalf("%s", ds)
	}
}

// tests: blocks pin attempts, per-attempt and per-item assumptions (a
// fan-out node retries as a whole: the second image failing once makes
// encode run twice), and the
// target rule chosen; a wrong expectation is reported with what happened.
func TestTestsBlockAttemptsItemsTargets(t *testing.T) {
	wf := `apiVersion: celflow/v1
kind: Workflow
metadata: {name: t, version: "1"}
routes: [chat]
nodes:
  - id: fetch
    type: fetch-media
  - id: render
    type: render
    needs: [fetch]
    params: {address: "http://127.0.0.1:9"}
  - id: encode
    type: encode
    needs: [render]
    foreach: media
    retry: {attempts: 2, backoff: 1ms}
  - id: prefill
    type: prefill
    needs: [encode]
    retry: {attempts: 3, backoff: 1ms}
  - id: decode
    type: decode
    needs: [prefill]
    target: [{if: 'request.model == "big"', pool: decode-big}]
tests:
  - name: right
    request: {route: chat, body: {model: big, messages: [{role: user, content: [{type: image_url, image_url: {url: "data:image/png;base64,iVBORw0KGgo="}}, {type: image_url, image_url: {url: "data:image/png;base64,iVBORw0KGgo="}}]}]}}
    assume: {prefill: [503, 502, 200], encode: {items: [200, [503, 200]]}}
    expect: {answered_by: decode, attempts: {prefill: 3, encode: 2}, targets: {decode: 0}}
  - name: wrong
    request: {route: chat, body: {model: small, messages: [{role: user, content: hi}]}}
    assume: {prefill: [503, 200]}
    expect: {attempts: {prefill: 3}, targets: {decode: 0}}
`
	w, ds := engine.Load("t.yaml", []byte(wf), engine.LoadOptions{})
	if w == nil {
		t.Fatal(ds)
	}
	got := w.RunTests(context.Background()).String()
	for _, want := range []string{`test "wrong": attempts of prefill: got 2, want 3`, `test "wrong": target of decode: got none, want rule 0`} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"right"`) {
		t.Errorf("the right test failed:\n%s", got)
	}
}

// A guard or target condition reading tokens.count where no node before it
// provides tokens (chat or completions without render) is a warning: it
// reads 0 there and never fires. With render before it, or on generate, it
// is fine; a check of tokens.known is the way to ask, and never warned.
func TestTokenReadsWithoutProvider(t *testing.T) {
	const head = "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: t, version: \"1\"}\n"
	for _, tc := range []struct {
		name, doc string
		warn      bool
	}{
		{"chat without render", head + `routes: [chat, generate]
defaults: {kv_connector: kv-nixl}
nodes:
  - {id: prefill, type: prefill, when: tokens.count > 256}
  - {id: decode, type: decode, needs: [prefill]}
`, true},
		{"target rule without render", head + `routes: [completions]
nodes:
  - id: decode
    type: decode
    target: [{if: tokens.count > 256, headers: {x-long: "1"}}]
`, true},
		{"render first", head + `routes: [chat]
defaults: {kv_connector: kv-nixl}
nodes:
  - {id: render, type: render, params: {address: "http://127.0.0.1:9"}}
  - {id: prefill, type: prefill, needs: [render], when: tokens.count > 256}
  - {id: decode, type: decode, needs: [prefill]}
`, false},
		{"generate only", head + `routes: [generate]
defaults: {kv_connector: kv-nixl}
nodes:
  - {id: prefill, type: prefill, when: tokens.count > 256}
  - {id: decode, type: decode, needs: [prefill]}
`, false},
	} {
		w, ds := engine.Load("t.yaml", []byte(tc.doc), engine.LoadOptions{})
		if w == nil {
			t.Fatalf("%s: %s", tc.name, ds)
		}
		got := strings.Contains(ds.String(), "reads tokens, but no node before")
		if got != tc.warn {
			t.Errorf("%s: warning %v, want %v:\n%s", tc.name, got, tc.warn, ds)
		}
	}
}
