package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guard over tokens.count on generate sees the body's own token_ids, and
// an edge whose predecessor was skipped says it was not evaluated (issue 13).
const explainGenerateWF = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: gen, version: "1"}
routes: [generate]
defaults: {kv_connector: kv-nixl}
nodes:
  - id: try_decode
    type: conditional-decode
    when: tokens.count > 4
  - id: prefill
    type: prefill
    needs: [{node: try_decode, if: response.status == 412}]
  - id: decode
    type: decode
    needs: [prefill]
`

func TestExplainGenerateAndSkippedEdge(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "gen.yaml")
	os.WriteFile(wf, []byte(explainGenerateWF), 0o644)
	short := filepath.Join(dir, "short.json")
	os.WriteFile(short, []byte(`{"model":"m","token_ids":[1,2,3]}`), 0o644)
	long := filepath.Join(dir, "long.json")
	os.WriteFile(long, []byte(`{"model":"m","token_ids":[1,2,3,4,5,6]}`), 0o644)
	none := filepath.Join(dir, "none.json")
	os.WriteFile(none, []byte(`{"model":"m","prompt":"hi"}`), 0o644)

	// --tokens 100 must not matter: generate's T is its token_ids.
	code, out, errs := runCmd(explainC, wf, "--route", "generate", "--request", short, "--tokens", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"try_decode  skipped    guard false: tokens.count > 4",
		"prefill     ran        succeeded; via try_decode (skipped: edge not evaluated)"} {
		if !strings.Contains(out, s) {
			t.Errorf("short prompt lacks %q:\n%s", s, out)
		}
	}
	code, out, errs = runCmd(explainC, wf, "--route", "generate", "--request", long, "--tokens", "1", "--assume", "try_decode=412")
	if code != 0 || !strings.Contains(out, "via try_decode[response.status == 412]") {
		t.Errorf("long prompt: exit %d %s\n%s", code, errs, out)
	}
	code, _, errs = runCmd(explainC, wf, "--route", "generate", "--request", none)
	if code != 2 || !strings.Contains(errs, "needs token_ids") {
		t.Errorf("no token_ids: exit %d: %s", code, errs)
	}
}

// explain --trace prints the server span and a span per node with the
// provenance attributes serve exports.
func TestExplainTrace(t *testing.T) {
	req := filepath.Join(t.TempDir(), "req.json")
	os.WriteFile(req, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}]}`), 0o644)
	code, out, errs := runCmd(explainC, validEPD, "--request", req, "--assume", "try_decode=412", "--trace")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	_, spans, _ := strings.Cut(out, "\nspans:\n")
	for _, s := range []string{
		"POST /v1/chat/completions\n",
		"\n  try_decode\n",
		"celflow.handled = true",
		"celflow.edge = try_decode[response.status == 412]",
		"\n    encode[0]\n", // the item span under its node
		"http.response.status_code = 200",
	} {
		if !strings.Contains(spans, s) {
			t.Errorf("spans lack %q:\n%s", s, spans)
		}
	}
}
