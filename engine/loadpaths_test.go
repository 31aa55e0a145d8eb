package engine_test

import (
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// The ending proof (issue 13): every way a run can end reaches an answer or
// a declared failure. Shapes that must load cleanly, and shapes that must
// not, with the rule id of their first diagnostic.
func TestEndingProof(t *testing.T) {
	tests := []struct {
		name, routes, nodes string
		rule                string // "" loads without diagnostics
		msg                 string // substring of the diagnostic
	}{
		{"decode alone", "[chat]", `
  - {id: decode, type: t-decode}`, "", ""},
		{"concurrent prefill beside decode (sglang)", "[chat]", `
  - {id: prefill, type: t-prefill}
  - {id: decode, type: t-decode}`, "", ""},
		{"a miss no edge handles is a declared failure", "[chat]", `
  - {id: probe, type: t-cond-decode}`, "", ""},
		{"join any: the 412 path and the 5xx path both reach decode", "[chat]", `
  - {id: probe, type: t-cond-decode}
  - {id: prefill, type: t-prefill, needs: [{node: probe, if: response.status == 412}]}
  - {id: decode, type: t-decode, needs: [prefill, {node: probe, if: response.status >= 500}], join: any}`, "", ""},
		{"a fallback for a failed prefill", "[chat]", `
  - {id: prefill, type: t-prefill}
  - {id: direct, type: t-noop, needs: [{node: prefill, if: 'outcome.status == "failed"'}]}
  - {id: decode, type: t-decode, needs: [prefill, direct], join: any}`, "", ""},
		{"an undecidable condition is taken both ways, and its no is a declared failure", "[chat]", `
  - {id: probe, type: t-cond-decode}
  - {id: by_reason, type: t-noop, needs: [{node: probe, if: 'outcome.reason.contains("x")'}]}
  - {id: decode, type: t-decode, needs: [by_reason]}`, "", ""},
		{"edges that split on outcome.duration exclude each other: no race, no unanswered path", "[chat]", `
  - {id: prefill, type: t-prefill}
  - {id: fast, type: t-decode, needs: [{node: prefill, if: 'outcome.status == "succeeded" && outcome.duration < duration("2s")'}]}
  - {id: slow, type: t-decode, needs: [{node: prefill, if: 'outcome.status == "succeeded" && outcome.duration >= duration("2s")'}]}`, "", ""},
		{"edges on outcome.duration that overlap still race", "[chat]", `
  - {id: prefill, type: t-prefill}
  - {id: fast, type: t-decode, needs: [{node: prefill, if: 'outcome.status == "succeeded" && outcome.duration <= duration("2s")'}]}
  - {id: slow, type: t-decode, needs: [{node: prefill, if: 'outcome.status == "succeeded" && outcome.duration >= duration("2s")'}]}`,
			"graph/racing-responders", `responders "fast" and "slow" can run at the same time`},
		{"the 412 path ends in prefill", "[chat]", `
  - {id: probe, type: t-cond-decode}
  - {id: prefill, type: t-prefill, needs: [{node: probe, if: response.status == 412}]}`,
			"graph/path-without-answer", `when probe fails with 412: the path request → probe (412) → prefill ends at "prefill"`},
		{"the only responder guarded off on one route", "[chat, completions]", `
  - {id: render, type: t-render, params: {address: "http://r"}}
  - {id: decode, type: t-decode, needs: [render], when: 'request.format == "chat"'}`,
			"graph/path-without-answer", `on the completions route: the path request → render → decode (skipped) ends at "decode"`},
		{"a fallback that ends nowhere", "[chat]", `
  - {id: prefill, type: t-prefill}
  - {id: direct, type: t-noop, needs: [{node: prefill, if: 'outcome.status == "failed"'}]}
  - {id: decode, type: t-decode, needs: [prefill]}`,
			"graph/path-without-answer", `when prefill fails without an HTTP answer: the path request → prefill (failed) → direct ends at "direct"`},
		{"two unordered responders race", "[chat]", `
  - {id: a, type: t-decode}
  - {id: b, type: t-decode}`, "graph/racing-responders", `responders "a" and "b" can run at the same time`},
		{"exclusive guards: one model to its own decode", "[chat]", `
  - {id: mine, type: t-decode, when: 'request.model == "x"'}
  - {id: rest, type: t-decode, when: 'request.model != "x"'}`, "", ""},
		{"exclusive guards through vars: long prompts to P/D, short ones decode alone", "[chat]", `
  - {id: render, type: t-render, params: {address: "http://r"}}
  - {id: prefill, type: t-prefill, needs: [render], when: tokens.count > config.long}
  - {id: pd, type: t-decode, needs: [prefill], when: tokens.count > config.long}
  - {id: alone, type: t-decode, needs: [render], when: tokens.count <= config.long}`, "", ""},
		{"a skipped prefill is transparent: the P/D decode races the short one", "[chat]", `
  - {id: render, type: t-render, params: {address: "http://r"}}
  - {id: prefill, type: t-prefill, needs: [render], when: tokens.count > config.long}
  - {id: pd, type: t-decode, needs: [prefill]}
  - {id: alone, type: t-decode, needs: [render], when: tokens.count <= config.long}`,
			"graph/racing-responders", `responders "pd" and "alone" can run at the same time`},
		{"the only responder guarded by model", "[chat]", `
  - {id: decode, type: t-decode, when: 'request.model == "x"'}`,
			"graph/path-without-answer", `on the chat route for a request where request.model is none of "x": the path request → decode (skipped)`},
		{"exclusive edges do not race", "[chat]", `
  - {id: probe, type: t-cond-decode}
  - {id: a, type: t-decode, needs: [{node: probe, if: response.status == 412}]}
  - {id: b, type: t-decode, needs: [{node: probe, if: response.status == 503}]}`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: p}\nvars: {long: 1024}\nroutes: " + tc.routes + "\nnodes:" + tc.nodes + "\n"
			_, ds := engine.Load("p.yaml", []byte(src), engine.LoadOptions{})
			if tc.rule == "" {
				if len(ds) != 0 {
					t.Fatalf("diagnostics:\n%s", ds)
				}
				return
			}
			if len(ds) == 0 || ds[0].Rule != tc.rule || !strings.Contains(ds[0].Msg, tc.msg) {
				t.Fatalf("want %s %q, got:\n%s", tc.rule, tc.msg, ds)
			}
		})
	}
}
