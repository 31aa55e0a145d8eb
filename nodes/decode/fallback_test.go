package decode_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

const pdRetry = `
apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd, version: "1"}
defaults: {kv_connector: kv-nixl}
nodes:
  - id: prefill
    type: prefill
  - id: decode
    type: decode
    needs: [prefill]
`

// Issue 19: decode re-sends a leg that failed before its first byte twice
// by default (through a gateway: the gateway is asked again), with the
// same kv_transfer_params; a retry: block replaces the default (the node
// gets exactly its attempts); retry: {attempts: 1} turns it off.
func TestDecodeReroutesByDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry string // appended to the decode node
		legs  int    // decode legs for a decode that keeps answering 503
	}{
		{"default", "", 3},
		{"retry block wins", "    retry: {attempts: 2, backoff: 1ms}\n", 2},
		{"defaults.retry wins", "DEFAULTS", 1},
		{"turned off", "    retry: {attempts: 1}\n", 1},
		{"a block without attempts keeps the default", "    retry: {backoff: 1ms}\n", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := pdRetry + tc.retry
			if tc.retry == "DEFAULTS" {
				yaml = strings.Replace(pdRetry, "defaults: {kv_connector: kv-nixl}", "defaults: {kv_connector: kv-nixl, retry: {attempts: 1}}", 1)
			}
			rep, _, g := serve(t, yaml, map[string]func(http.ResponseWriter){
				"prefill": answer(200, "application/json", prefillOK),
				"decode":  answer(503, "application/json", `{}`),
			})
			if rep.Err == nil || rep.Err.Code() != "upstream_unavailable" {
				t.Fatalf("err %v", rep.Err)
			}
			want := "prefill" + strings.Repeat(",decode", tc.legs)
			if g.roles() != want {
				t.Fatalf("legs %s, want %s", g.roles(), want)
			}
			for _, l := range g.legs[1:] {
				if !strings.Contains(string(l.Body), `"remote_engine_id":"e-1"`) {
					t.Fatalf("a re-sent decode lost the KV hand-off: %s", l.Body)
				}
			}
		})
	}
}

// A 503 that a re-send fixes answers the client; the first decode's 503
// never reaches it.
func TestDecodeRerouteAnswers(t *testing.T) {
	n := 0
	rep, rec, g := serve(t, pdRetry, map[string]func(http.ResponseWriter){
		"prefill": answer(200, "application/json", prefillOK),
		"decode": func(w http.ResponseWriter) {
			if n++; n == 1 {
				answer(503, "application/json", `{}`)(w)
				return
			}
			answer(200, "application/json", `{"ok":1}`)(w)
		},
	})
	if rep.Err != nil || rec.Code != 200 || rec.Body.String() != `{"ok":1}` || g.roles() != "prefill,decode,decode" {
		t.Fatalf("err %v status %d body %q legs %s", rep.Err, rec.Code, rec.Body, g.roles())
	}
}

// params.fallback: the pool must exist in the serve config (direct mode)
// and not be decode's own; kv-sglang cannot fall back. Each refusal is
// decode/fallback-pool at the pool's position.
func TestDecodeFallbackValidation(t *testing.T) {
	direct := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: "http://p:8000"}}, upstream.RoleDecode: {{URL: "http://d:8000"}},
		"decode-spare": {{URL: "http://s:8000"}},
	}})
	for _, tc := range []struct {
		name, params string
		up           *upstream.Client
		want         string // "" = loads
		line, col    int
	}{
		{"known pool", "{fallback: {pool: decode-spare}}", direct, "", 0, 0},
		{"unknown pool", "{fallback: {pool: decode-spar}}", direct, `no pool named "decode-spar" in upstream.pools (did you mean "decode-spare"?); pools: decode, decode-spare, prefill`, 12, 31},
		{"own pool", "{fallback: {pool: decode}}", direct, `the fallback pool is the decode role's own pool`, 12, 31},
		{"gateway routes any pool", "{fallback: {pool: anything}}", legtest.Gateway(t, "http://gw:1"), "", 0, 0},
		{"validate without a serve config", "{fallback: {pool: anything}}", nil, "", 0, 0},
		{"kv-sglang", "{kv_connector: kv-sglang, fallback: {pool: decode-spare}}", direct, "kv-sglang pairs the prefill with one decode", 12, 49},
		{"schema: pool required", "{fallback: {}}", nil, `missing required field "pool"`, 12, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := pdRetry + "    params: " + tc.params + "\n"
			opts := engine.LoadOptions{}
			if tc.up != nil {
				opts.Upstream = tc.up
			}
			_, ds := engine.Load("flow.yaml", []byte(yaml), opts)
			if tc.want == "" {
				if ds.HasErrors() {
					t.Fatal(ds)
				}
				return
			}
			if !ds.HasErrors() {
				t.Fatalf("loaded; want %q", tc.want)
			}
			found := false
			for _, d := range ds {
				if strings.Contains(d.Msg, tc.want) && d.Line == tc.line && (tc.col == 0 || d.Col == tc.col) {
					found = true
					if tc.name != "schema: pool required" && d.Rule != engine.RuleDecodeFallback {
						t.Errorf("rule %s, want %s", d.Rule, engine.RuleDecodeFallback)
					}
				}
			}
			if !found {
				t.Fatalf("diagnostics %v; want %q at %d:%d", ds, tc.want, tc.line, tc.col)
			}
		})
	}
}

// explain prints what decode does before its first byte on its line.
func TestDecodeExplainNote(t *testing.T) {
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"default", "", "a leg failing before its first byte (503, connection refused or reset) is sent again up to 2 more times to another endpoint"},
		{"fallback", "    params: {fallback: {pool: decode-spare}}\n", "is sent again up to 2 more times to another endpoint, then to pool decode-spare (2 more there)"},
		{"retry block and fallback", "    retry: {attempts: 3}\n    params: {fallback: {pool: decode-spare}}\n", "a leg failing before its first byte (503, connection refused or reset) on the last of 3 attempts, then to pool decode-spare"},
		{"turned off", "    retry: {attempts: 1}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wf, ds := engine.Load("flow.yaml", []byte(pdRetry+tc.extra), engine.LoadOptions{})
			if ds.HasErrors() {
				t.Fatal(ds)
			}
			rep, err := wf.Explain(context.Background(), engine.Probe{Route: engine.RouteChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			out := engine.FormatReport(rep)
			var line string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "decode") {
					line = l
				}
			}
			if tc.want == "" {
				if strings.Contains(line, "first byte") {
					t.Fatalf("decode line %q mentions re-sends", line)
				}
				return
			}
			if !strings.Contains(line, tc.want) {
				t.Fatalf("decode line %q, want it to contain %q", line, tc.want)
			}
		})
	}
}
