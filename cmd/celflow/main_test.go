package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/celflow/celflow/nodes/nodetest"
)

func init() { nodetest.Register() }

const (
	validEPD = "../../testdata/workflows/valid/epd.yaml"
	invalid  = "../../testdata/workflows/invalid/several_errors.yaml"
)

func runCmd(f func([]string, *bytes.Buffer, *bytes.Buffer) int, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := f(args, &out, &errb)
	return code, out.String(), errb.String()
}

func validate(args []string, o, e *bytes.Buffer) int { return runValidate(args, o, e) }
func graphC(args []string, o, e *bytes.Buffer) int   { return runGraph(args, o, e) }
func explainC(args []string, o, e *bytes.Buffer) int { return runExplain(args, o, e) }
func schemaC(args []string, o, e *bytes.Buffer) int  { return runSchema(args, o, e) }
func testC(args []string, o, e *bytes.Buffer) int    { return runTest(args, o, e) }

// ACCEPTANCE 30, 32 (for the files in testdata; workflows/ is validated in CI).
func TestValidate(t *testing.T) {
	valid, _ := filepath.Glob("../../testdata/workflows/valid/*.yaml")
	if len(valid) == 0 {
		t.Fatal("no valid workflows")
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
	}{
		{"valid", valid, 0, []string{"epd.yaml: ok (6 nodes, 5 tests)"}},
		{"invalid text", []string{invalid}, 1, []string{
			`several_errors.yaml:4:1: pipline: unknown field "pipline"`,
			`several_errors.yaml:15:65: nodes[2].needs[0].if: undefined field "shrt" (did you mean "short"?)`}},
		{"github", []string{"--format", "github", invalid}, 1, []string{
			`::error file=../../testdata/workflows/invalid/several_errors.yaml,line=4,col=1,title=schema/unknown-field::pipline: unknown field "pipline"`}},
		{"json", []string{invalid, "--format=json"}, 1, []string{`"message": "unknown field \"pipline\""`}},
		{"no files", nil, 2, nil},
		{"bad format", []string{"--format", "xml", validEPD}, 2, nil},
		{"missing file", []string{"nope.yaml"}, 2, []string{"nope.yaml: cannot read workflow"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runCmd(validate, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", code, tc.code, out)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			if tc.name == "json" {
				var ds []map[string]any
				if err := json.Unmarshal([]byte(out), &ds); err != nil || len(ds) != 4 {
					t.Fatalf("json: %v %d", err, len(ds))
				}
			}
		})
	}
}

// A failing tests: block makes validate (and test) fail.
func TestValidateRunsTests(t *testing.T) {
	src, _ := os.ReadFile(validEPD)
	broken := strings.Replace(string(src), "skipped: [encode]\n", "skipped: [prefill]\n", 1)
	f := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(f, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCmd(validate, f)
	if code != 1 || !strings.Contains(out, `test "text miss takes the full path": skipped: got [encode], want [prefill]`) {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if code, out, _ := runCmd(testC, f); code != 1 || !strings.Contains(out, "FAIL") {
		t.Fatalf("test: exit %d\n%s", code, out)
	}
	if code, out, _ := runCmd(testC, validEPD); code != 0 || !strings.Contains(out, "ok   ") {
		t.Fatalf("test: exit %d\n%s", code, out)
	}
}

func TestGraph(t *testing.T) {
	code, out, _ := runCmd(graphC, validEPD)
	for _, s := range []string{"flowchart TD", "request --> fetch", `try_decode -- "response.status == 412" --> encode`,
		"foreach: media (max 4)", `when: request.format == #quot;chat#quot;`, `decode(["decode<br/>t-decode"])`} {
		if !strings.Contains(out, s) {
			t.Errorf("mermaid lacks %q:\n%s", s, out)
		}
	}
	if code != 0 {
		t.Fatal(code)
	}
	code, out, _ = runCmd(graphC, "--format", "dot", validEPD)
	if code != 0 || !strings.Contains(out, `"try_decode" -> "encode" [label="response.status == 412"];`) {
		t.Fatalf("dot:\n%s", out)
	}
}

// The 412 path and the hit path of the same request.
func TestExplain(t *testing.T) {
	req := filepath.Join(t.TempDir(), "req.json")
	os.WriteFile(req, []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}]}`), 0o644)
	code, out, errs := runCmd(explainC, validEPD, "--request", req, "--assume", "try_decode=412")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"try_decode  ran        failed, HTTP 412", "encode      ran        succeeded; 1 items; via try_decode[response.status == 412]",
		"decode      ran        answered the client, HTTP 200", "result: answered by decode"} {
		if !strings.Contains(out, s) {
			t.Errorf("412 path lacks %q:\n%s", s, out)
		}
	}
	_, out, _ = runCmd(explainC, validEPD, "--request", req, "--assume", "try_decode=200")
	for _, s := range []string{"encode      skipped    ended", "result: answered by try_decode"} {
		if !strings.Contains(out, s) {
			t.Errorf("hit path lacks %q:\n%s", s, out)
		}
	}
	if code, _, _ := runCmd(explainC, validEPD, "--request", req, "--assume", "nope=1"); code != 2 {
		t.Fatalf("bad assume: exit %d", code)
	}
	if code, _, _ := runCmd(explainC, validEPD); code != 2 {
		t.Fatalf("no request: exit %d", code)
	}
}

func TestSchema(t *testing.T) {
	code, out, _ := runCmd(schemaC)
	if code != 0 || !strings.Contains(out, `"$id": "https://celflow.dev/schema/workflow.json"`) {
		t.Fatalf("workflow schema: %d\n%s", code, out)
	}
	code, out, _ = runCmd(schemaC, "node", "t-render")
	if code != 0 || !strings.Contains(out, `"address"`) {
		t.Fatalf("node schema: %d\n%s", code, out)
	}
	if code, _, errs := runCmd(schemaC, "node", "nope"); code != 1 || !strings.Contains(errs, "t-render") {
		t.Fatalf("unknown type: %d %s", code, errs)
	}
}
