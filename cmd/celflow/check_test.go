package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const checkWorkflow = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: pd, version: "1"}
routes: [chat]
nodes:
  - id: prefill
    type: prefill
  - id: decode
    type: decode
    needs: [prefill]
`

// validate --config loads the serve config, its environment and its
// workflow together and reports every problem in one run (issue 13).
func TestCheckServe(t *testing.T) {
	dir := t.TempDir()
	wf := writeFile(t, dir, "pd.yaml", checkWorkflow)
	cases := []struct {
		name    string
		config  string
		environ []string
		want    []string // substrings, each must appear
		ok      bool
	}{
		{
			name:   "clean direct config",
			config: "upstream: {pools: {prefill: [http://127.0.0.1:9], decode: [http://127.0.0.1:9]}}\nworkflow: pd.yaml\n",
			ok:     true,
		},
		{
			name:    "misspelt variable",
			config:  "upstream: {gateway: http://127.0.0.1:9}\nworkflow: pd.yaml\n",
			environ: []string{"CELFLOW_SERVER_LISTN=:1", "CELFLOW_BIN=/x", "HOME=/root"},
			want:    []string{"CELFLOW_SERVER_LISTN: unknown variable: no config key is named CELFLOW_SERVER_LISTN (did you mean CELFLOW_SERVER_LISTEN?)"},
		},
		{
			name:   "role with no pool",
			config: "upstream: {pools: {decode: [http://127.0.0.1:9]}}\nworkflow: pd.yaml\n",
			want:   []string{"pd.yaml:6:5: nodes[0].params: no prefill target: the upstream section has neither a gateway nor a prefill pool"},
		},
		{
			name: "config error does not hide the inline workflow's errors",
			config: `server: {read_timeout: 5 parsecs}
upstream: {gateway: http://127.0.0.1:9}
workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: x, version: "1"}
  routes: [chat]
  nodes:
    - id: decode
      type: decod
`,
			environ: []string{"CELFLOW_UPSTREAM_PICKR=least-in-flight"},
			want: []string{
				"serve.yaml:1:24: server.read_timeout: invalid duration",
				`serve.yaml:10:13: workflow.nodes[0].type: unknown node type "decod" (did you mean "decode"?)`,
				"CELFLOW_UPSTREAM_PICKR: unknown variable",
				"did you mean CELFLOW_UPSTREAM_PICKER?",
			},
		},
		{
			name:   "a broken upstream section still checks the workflow (validate-only)",
			config: "upstream: {mode: direct, gateway: http://127.0.0.1:9, picker: fastest}\nworkflow: pd.yaml\n",
			want:   []string{"upstream.picker:", "serve.yaml"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, dir, "serve.yaml", tc.config)
			ds, summary := checkServe(cfg, func(string) string { return "" }, tc.environ, true)
			out := ds.String()
			if ds.HasErrors() == tc.ok {
				t.Fatalf("errors=%v, want ok=%v:\n%s", ds.HasErrors(), tc.ok, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
			if tc.ok && !strings.Contains(summary, "upstream direct") {
				t.Errorf("summary %q", summary)
			}
		})
	}
	_ = wf
}

// serve --check exits 0 or 1 without listening, printing what validate prints.
func TestServeCheck(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pd.yaml", checkWorkflow)
	good := writeFile(t, dir, "good.yaml", "server: {listen: '127.0.0.1:1'}\nupstream: {gateway: http://127.0.0.1:9}\nworkflow: pd.yaml\n")
	bad := writeFile(t, dir, "bad.yaml", "upstream: {pools: {decode: [http://127.0.0.1:9]}}\nworkflow: pd.yaml\n")
	for _, tc := range []struct {
		cfg  string
		code int
		want string
	}{
		{good, 0, "good.yaml: ok (workflow pd, 2 nodes, 0 tests, upstream gateway)"},
		{bad, 1, "no prefill target"},
	} {
		var stderr bytes.Buffer
		code := runServe(context.Background(), []string{"--config", tc.cfg, "--check"}, &stderr, func(string) string { return "" }, nil)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", filepath.Base(tc.cfg), code, tc.code, stderr.String())
		}
	}
}

// Direct-mode conditional decode in predicted mode with no render before it
// can never predict a hit on chat or completions: validate --config warns
// (issue 12); gateway mode and worker mode do not.
func TestCheckServeConditionalDecodeWithoutTokens(t *testing.T) {
	dir := t.TempDir()
	wf := writeFile(t, dir, "cd.yaml", `apiVersion: celflow/v1
kind: Workflow
metadata: {name: cd, version: "1"}
routes: [chat, generate]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: try_decode
    type: conditional-decode
  - id: prefill
    type: prefill
    needs: [{node: try_decode, if: response.status == 412}]
  - id: decode
    type: decode
    needs: [prefill]
`)
	_ = wf
	direct := writeFile(t, dir, "direct.yaml", "upstream: {pools: {prefill: [http://127.0.0.1:9], decode: [http://127.0.0.1:9]}}\nworkflow: cd.yaml\n")
	ds, _ := checkServe(direct, func(string) string { return "" }, nil, false)
	if out := ds.String(); ds.HasErrors() || !strings.Contains(out, `warning: node "try_decode" has no tokens on the chat route(s)`) || !strings.Contains(out, "[dataflow/never-provided]") {
		t.Fatalf("direct mode: want the warning on chat only (generate brings its tokens):\n%s", out)
	}
	gateway := writeFile(t, dir, "gateway.yaml", "upstream: {gateway: http://127.0.0.1:9}\nworkflow: cd.yaml\n")
	if ds, _ := checkServe(gateway, func(string) string { return "" }, nil, false); len(ds) != 0 {
		t.Fatalf("gateway mode: want no diagnostics:\n%s", ds)
	}
}

// The complete example of docs/configuration.md passes validate --config
// with the workflow it names (found in review: it lacked upstream.render).
func TestConfigurationDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A complete example\n\n```yaml\n")
	if !ok {
		t.Fatal("no complete example")
	}
	example := rest[:strings.Index(rest, "```")]
	dir := t.TempDir()
	wf, err := os.ReadFile("../../workflows/epd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "workflows"), 0o755)
	writeFile(t, filepath.Join(dir, "workflows"), "epd.yaml", string(wf))
	cfg := writeFile(t, dir, "serve.yaml", example)
	if ds, _ := checkServe(cfg, func(string) string { return "" }, nil, true); ds.HasErrors() {
		t.Fatalf("the documented example does not validate:\n%s", ds)
	}
}
