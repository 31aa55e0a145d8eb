package engine_test

import (
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// ACCEPTANCE 48: a tokens-in prefill with no render fails to load when the
// workflow serves chat, and loads when it serves only completions and
// generate (exempt: tokens-in does not change completions legs, and
// generate brings its own tokens). The failing cases' exact text is pinned
// by testdata/workflows/invalid/dataflow*.golden.
func TestTokensInExemptRoutes(t *testing.T) {
	const doc = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: df}
routes: ROUTES
defaults: {format: tokens-in}
nodes:
  - {id: prefill, type: t-prefill}
  - {id: decode, type: t-decode, needs: [prefill]}
`
	for _, tc := range []struct {
		routes string
		ok     bool
	}{
		{"[completions, generate]", true},
		{"[completions]", true},
		{"[generate]", true},
		{"[chat]", false},
		{"[chat, completions, generate]", false},
	} {
		w, ds := engine.Load("df.yaml", []byte(strings.Replace(doc, "ROUTES", tc.routes, 1)), engine.LoadOptions{})
		if tc.ok != (w != nil) {
			t.Errorf("routes %s: loaded %v, want %v:\n%s", tc.routes, w != nil, tc.ok, ds)
			continue
		}
		if !tc.ok && !strings.Contains(ds.String(), `df.yaml:7:25: nodes[0].type: node "prefill" needs tokens on the chat route`) {
			t.Errorf("routes %s: diagnostics\n%s", tc.routes, ds)
		}
	}
}

// ACCEPTANCE 19 (workflow level): a foreach node without max_parallel gets
// the documented default of 8; with no defaults: block, nodes build with
// the OpenAI format (a tokens-in t-prefill would need render on chat, see
// above) and empty connector names, which mean the shared-storage
// connectors (connectors/kv and connectors/ec TestLookup, prefill
// TestBuildDefaults).
func TestWorkflowDefaults(t *testing.T) {
	w, ds := engine.Load("d.yaml", []byte(`apiVersion: celflow/v1
kind: Workflow
metadata: {name: d}
nodes:
  - {id: fetch, type: t-fetch}
  - {id: encode, type: t-encode, needs: [fetch], foreach: media}
  - {id: prefill, type: t-prefill, needs: [encode]}
  - {id: decode, type: t-decode, needs: [prefill]}
`), engine.LoadOptions{})
	if w == nil {
		t.Fatalf("load:\n%s", ds)
	}
	if ns := w.Nodes(); ns[1].ID != "encode" || ns[1].MaxParallel != engine.DefaultMaxParallel || engine.DefaultMaxParallel != 8 {
		t.Fatalf("encode max_parallel %d, want 8", ns[1].MaxParallel)
	}
}
