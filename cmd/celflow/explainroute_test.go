package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/celflow/celflow/workflows"
)

// explain --config says how the serve config's upstream picks workers:
// the picker, and for cache-aware its weights, load source and truth check.
func TestExplainRouting(t *testing.T) {
	dir := t.TempDir()
	wf, err := workflows.FS.ReadFile("decode-only.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wfPath := writeFile(t, dir, "wf.yaml", string(wf))
	req := writeFile(t, dir, "req.json", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		name, upstream string
		code           int
		want           []string
	}{
		{"cache-aware", "upstream: {pools: {decode: [\"http://d1:8000\"]}, picker: cache-aware, routing: {cache_weight: 2, load_weight: 0.5, metrics_interval: 250ms}}\n", 0,
			[]string{"routing: direct mode, picker cache-aware on the decode and named pools: score = 2 × cached share of the prompt − 0.5 × load",
				"/metrics, every 250ms at most", "prefill and encode least-in-flight", "< 0.5 of the predicted cached tokens over 32 predicted hits", "set aside for 30s"}},
		{"round-robin", "upstream: {pools: {decode: [\"http://d1:8000\"]}}\n", 0, []string{"routing: direct mode, picker round-robin\n"}},
		{"gateway", "upstream: {gateway: \"http://gw:80\"}\n", 0, []string{"routing: gateway mode"}},
		{"invalid", "upstream: {pools: {decode: [\"http://d1:8000\"]}, picker: cache-aware, routing: {cache_weight: -2}}\n", 1,
			[]string{"serve.yaml:1:94: upstream.routing.cache_weight: must be a number ≥ 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeFile(t, dir, "serve.yaml", tc.upstream+"workflow: wf.yaml\n")
			var o, e bytes.Buffer
			code := runExplain([]string{wfPath, "--request", req, "--config", cfg}, &o, &e)
			out := o.String() + e.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
