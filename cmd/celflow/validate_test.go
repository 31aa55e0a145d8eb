package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// warnOnly validates with a single warning (the sequential kv-sglang shape).
const warnOnly = `apiVersion: celflow/v1
kind: Workflow
metadata: {name: warn}
routes: [completions]
defaults: {kv_connector: kv-sglang}
nodes:
  - id: prefill
    type: prefill
  - id: decode
    type: decode
`

// Inputs, formats and exit codes of celflow validate (issue 13).
func TestValidateInputs(t *testing.T) {
	dir := t.TempDir()
	warnFile := filepath.Join(dir, "warn.yaml")
	if err := os.WriteFile(warnFile, []byte(warnOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile(validEPD)
	empty := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout []string
	}{
		{"stdin valid", []string{"-"}, string(src), 0, []string{"<stdin>: ok (6 nodes, 5 tests)"}},
		{"stdin invalid", []string{"-"}, "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: x}\nnodez: []\n", 1,
			[]string{"<stdin>:4:1: nodez: unknown field \"nodez\" [schema/unknown-field]\n 4 | nodez: []\n   | ^\n"}},
		{"directory", []string{"../../testdata/workflows/valid"}, "", 0, []string{"valid/epd.yaml: ok", "valid/short-prompt.yaml: ok"}},
		{"directory with invalid files", []string{"../../testdata/workflows/invalid"}, "", 1, []string{"cycle.yaml:"}},
		{"empty directory", []string{empty}, "", 2, []string{"no *.yaml or *.yml files"}},
		{"missing file exits 2", []string{validEPD, "nope.yaml"}, "", 2, []string{"nope.yaml: cannot read workflow", "[input/unreadable]"}},
		{"warning passes", []string{warnFile}, "", 0, []string{"warning: the sequential kv-sglang shape", "[node/params]", "ok (2 nodes, 0 tests, 1 warning(s))"}},
		{"strict fails on a warning", []string{"--strict", warnFile}, "", 1, []string{"warning: the sequential"}},
		{"help", []string{"-h"}, "", 0, []string{"usage: celflow validate", "-strict", "sarif"}},
		{"caret", []string{invalid}, "", 1, []string{
			" 15 |     needs: [{node: render, if: \"response.status == 412 && config.shrt > 1\"}]\n" +
				"    |                                                                 ^\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runValidateIO(tc.args, strings.NewReader(tc.stdin), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

// --format sarif is a SARIF 2.1.0 log: rules in tool.driver.rules, one
// result per diagnostic with its rule id and line/column.
func TestValidateSARIF(t *testing.T) {
	var out bytes.Buffer
	if code := runValidateIO([]string{"--format", "sarif", invalid}, nil, &out, &out); code != 1 {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	var log struct {
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID string `json:"id"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct {
					Text string `json:"text"`
				} `json:"message"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine   int `json:"startLine"`
							StartColumn int `json:"startColumn"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(out.Bytes(), &log); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if log.Version != "2.1.0" || len(log.Runs) != 1 || log.Runs[0].Tool.Driver.Name != "celflow" || len(log.Runs[0].Results) != 4 {
		t.Fatalf("%s", out.String())
	}
	run := log.Runs[0]
	last := run.Results[3]
	loc := last.Locations[0].PhysicalLocation
	if last.RuleID != "cel/undefined-field" || run.Tool.Driver.Rules[last.RuleIndex].ID != last.RuleID || last.Level != "error" ||
		loc.Region.StartLine != 15 || loc.Region.StartColumn != 65 || !strings.HasSuffix(loc.ArtifactLocation.URI, "invalid/several_errors.yaml") {
		t.Fatalf("%+v", last)
	}
}
