package schema

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestLoadYAMLRejects(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"duplicate key", "a: 1\nb: 2\na: 3\n", "f.yaml:3:1: a: duplicate key \"a\" (first at line 1) [yaml/duplicate-key]"},
		{"alias", "a: &x 1\nb: *x\n", "f.yaml:1:4: a: YAML anchors are not supported (&x) [yaml/anchor]\nf.yaml:2:4: b: YAML aliases are not supported (*x) [yaml/anchor]"},
		{"merge", "a: {x: 1}\nb:\n  <<: {y: 2}\n", "f.yaml:3:3: b: merge keys (<<) is not supported [yaml/anchor]"},
		{"int key", "1: a\n", "f.yaml:1:1: a non-string key is not supported [yaml/non-string-key]"},
		{"two docs", "a: 1\n---\nb: 2\n", "f.yaml:2:1: only one YAML document per file is allowed [yaml/multiple-documents]"},
		{"syntax", "a: [1\n", "f.yaml:1:4: invalid YAML: did not find expected ',' or ']' [yaml/syntax]"},
		{"nan", "a: .nan\n", "f.yaml:1:4: a: .nan is not a finite number [yaml/scalar]"},
		{"empty", "", "f.yaml:1:1: empty document [yaml/syntax]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ds := LoadYAML("f.yaml", []byte(tc.src))
			if got := strings.TrimSpace(ds.Sort().String()); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestValuesAndPositions(t *testing.T) {
	src := "top:\n  int: 5\n  float: 5.0\n  half: 4.5\n  big: 1e19\n  hex: 0x10\n  str: \"5\"\n  list: [a, {b: c}]\n  \"odd/key\": x\n"
	d, ds := LoadYAML("f.yaml", []byte(src))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	want := `{"top":{"big":1e+19,"float":5,"half":4.5,"hex":16,"int":5,"list":["a",{"b":"c"}],"odd/key":"x","str":"5"}}`
	if got := string(d.JSON("")); got != want {
		t.Fatalf("json %s", got)
	}
	for _, tc := range []struct {
		ptr       string
		line, col int
		path      string
	}{
		{"/top/int", 2, 8, "top.int"},
		{"/top/list/1/b", 8, 17, "top.list[1].b"},
		{"/top/odd~1key", 9, 14, `top["odd/key"]`},
		{"/top/missing", 2, 3, "top.missing"}, // falls back to the parent mapping
	} {
		l, c := d.Pos(tc.ptr)
		if l != tc.line || c != tc.col || d.Path(tc.ptr) != tc.path {
			t.Errorf("%s: %d:%d %s", tc.ptr, l, c, d.Path(tc.ptr))
		}
	}
	if l, c := d.KeyPos("/top/int"); l != 2 || c != 3 {
		t.Errorf("key pos %d:%d", l, c)
	}
	sub, ok := d.Sub("/top")
	if !ok || sub.Path("/int") != "top.int" || string(sub.JSON("/int")) != "5" {
		t.Fatalf("sub %v", sub)
	}
	if l, _ := sub.Pos("/half"); l != 4 {
		t.Fatalf("sub pos %d", l)
	}
}

// CEL positions inside scalars map to the file (ACCEPTANCE 44).
func TestScalarPos(t *testing.T) {
	src := strings.Join([]string{
		`plain: abc == = d`,
		`dq: "x \"y\" == = d"`,
		`sq: 'it''s == = d'`,
		`lit: |`,
		`  first line`,
		`    second = x`,
		`fold: >`,
		`  one two`,
		`  three = x`,
		`multi: abc`,
		`  def = x`,
	}, "\n")
	d, ds := LoadYAML("f.yaml", []byte(src))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	for _, tc := range []struct {
		ptr               string
		line, col         int // CEL position: 1-based line, 0-based col
		wantLine, wantCol int
	}{
		{"/plain", 1, 7, 1, 15},
		{"/dq", 1, 9, 2, 17}, // value `x "y" == = d`: escapes are two source columns
		{"/sq", 1, 8, 3, 15}, // value `it's == = d`: '' is one

		{"/lit", 2, 9, 6, 12},
		{"/fold", 1, 16, 9, 11},
		{"/multi", 1, 8, 11, 7},
	} {
		l, c := d.ScalarPos(tc.ptr, tc.line, tc.col)
		if l != tc.wantLine || c != tc.wantCol {
			v, _ := d.Value(tc.ptr)
			t.Errorf("%s (%q) @%d:%d → %d:%d, want %d:%d", tc.ptr, v, tc.line, tc.col, l, c, tc.wantLine, tc.wantCol)
		}
	}
}

const testSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object", "additionalProperties": false, "required": ["name"],
  "properties": {
    "name": {"type": "string"},
    "n": {"type": "integer", "minimum": 1},
    "t": {"$ref": "defs.json#/$defs/duration"},
    "on": {"type": "boolean"},
    "mode": {"enum": ["a", "b"]}
  }
}`

// ACCEPTANCE 21, 22, 23, 24 at the schema level.
func TestValidate(t *testing.T) {
	if err := Register(Base+"test.json", []byte(testSchema)); err != nil {
		t.Fatal(err)
	}
	if err := Register(Base+"test.json", []byte(testSchema)); err != nil {
		t.Fatal("re-registering the same bytes must be a no-op:", err)
	}
	if err := Register(Base+"test.json", []byte(`{}`)); err == nil {
		t.Fatal("different bytes under one id accepted")
	}
	tests := []struct{ src, want string }{
		{"name: x\nn: 5.0\nt: 30s\non: true\nmode: a", ""},
		{"name: x\nn: 4.5", "f.yaml:2:4: n: expected integer, got 4.5 [schema/wrong-type]"},
		{"name: x\nn: \"5\"", `f.yaml:2:4: n: expected integer, got "5" [schema/wrong-type]`},
		{"name: x\nn: true", "f.yaml:2:4: n: expected integer, got true [schema/wrong-type]"},
		{"name: x\nn: 1e19", "f.yaml:2:4: n: expected integer, got 1e+19 (out of the 64-bit range) [schema/range]"},
		{"name: x\nn: 0", "f.yaml:2:4: n: must be >= 1, got 0 [schema/range]"},
		{"name: x\nt: \"30\"", `f.yaml:2:4: t: invalid duration "30" (want a non-negative Go duration such as "30s" or "1m30s") [schema/duration]`},
		{"name: x\nt: abc", `f.yaml:2:4: t: invalid duration "abc" (want a non-negative Go duration such as "30s" or "1m30s") [schema/duration]`},
		{"name: x\nt: -1s", `f.yaml:2:4: t: invalid duration "-1s" (want a non-negative Go duration such as "30s" or "1m30s") [schema/duration]`},
		// A number where a duration belongs is the duration rule, as the
		// rules table says (30 and "30" alike), not a wrong type (issue 18).
		{"name: x\nt: 30", `f.yaml:2:4: t: invalid duration 30 (want a non-negative Go duration such as "30s" or "1m30s") [schema/duration]`},
		{"name: x\non: \"true\"", `f.yaml:2:5: on: expected boolean, got "true" [schema/wrong-type]`},
		{"name: x\non: 1", "f.yaml:2:5: on: expected boolean, got 1 [schema/wrong-type]"},
		{"name: 42", "f.yaml:1:7: name: expected string, got 42 [schema/wrong-type]"},
		{"name: x\nmode: c", `f.yaml:2:7: mode: must be one of "a", "b", got "c" [schema/enum]`},
		{"n: 1", `f.yaml:1:1: missing required field "name" [schema/missing-field]`},
		{"name: x\nendpoint: y\nport: 1", "f.yaml:2:1: endpoint: unknown field \"endpoint\" [schema/unknown-field]\nf.yaml:3:1: port: unknown field \"port\" [schema/unknown-field]"},
	}
	for _, tc := range tests {
		d, ds := LoadYAML("f.yaml", []byte(tc.src))
		if len(ds) != 0 {
			t.Fatal(ds)
		}
		got := strings.TrimSpace(Validate(d, Base+"test.json", "").String())
		if got != tc.want {
			t.Errorf("%q:\ngot  %s\nwant %s", tc.src, got, tc.want)
		}
	}
}

func TestDiagnosticsOutput(t *testing.T) {
	ds := Diagnostics{
		{File: "b.yaml", Line: 2, Col: 1, Path: "x", Msg: "second"},
		{File: "a.yaml", Line: 9, Col: 3, Path: "nodes[0].id", Msg: "bad, really: 100%"},
		{File: "a.yaml", Line: 1, Col: 1, Msg: "w", Severity: Warning},
	}.Sort()
	if ds[0].Line != 1 || ds[2].File != "b.yaml" || ds.HasErrors() != true {
		t.Fatalf("%v", ds)
	}
	if got := ds[0].String(); got != "a.yaml:1:1: warning: w" {
		t.Fatalf("%q", got)
	}
	if got := ds[1].String(); got != "a.yaml:9:3: nodes[0].id: bad, really: 100%" {
		t.Fatalf("%q", got)
	}
	gh := ds.GitHub()
	if !strings.Contains(gh, "::error file=a.yaml,line=9,col=3::nodes[0].id: bad, really: 100%25\n") ||
		!strings.Contains(gh, "::warning file=a.yaml,line=1,col=1::w") {
		t.Fatalf("github:\n%s", gh)
	}
	var back []map[string]any
	if err := json.Unmarshal(ds.JSON(), &back); err != nil || back[1]["severity"] != "error" || back[1]["line"] != float64(9) {
		t.Fatalf("json %s %v", ds.JSON(), err)
	}
	if (Diagnostics{{Severity: Warning}}).Err() != nil {
		t.Fatal("warnings are not errors")
	}
}

// Every rule has a fix, and every diagnostic with a rule prints one: its
// own hint, else the rule's (issue 18: fix lines printed for some rules only).
func TestEveryRulePrintsAFix(t *testing.T) {
	for _, r := range Rules() {
		if r.Fix == "" {
			t.Errorf("rule %s has no fix", r.ID)
		}
		d := Diagnostic{File: "f.yaml", Line: 1, Col: 1, Msg: "m", Rule: r.ID, Source: "x: 1"}
		if !strings.Contains(d.Pretty(), "  = fix: "+r.Fix+"\n") {
			t.Errorf("rule %s: no fix line:\n%s", r.ID, d.Pretty())
		}
		d.Source = ""
		if !strings.Contains(d.Pretty(), "  = fix: "+r.Fix+"\n") {
			t.Errorf("rule %s without source: no fix line:\n%s", r.ID, d.Pretty())
		}
	}
	d := Diagnostic{File: "f.yaml", Line: 1, Col: 1, Msg: "m", Rule: RuleWrongType, Hint: "own", Source: "x: 1"}
	if p := d.Pretty(); !strings.Contains(p, "= fix: own\n") || strings.Count(p, "fix:") != 1 {
		t.Errorf("a hint replaces the rule's fix:\n%s", p)
	}
}

// A YAML syntax error's caret sits on the offending line and token, not at
// column 1 of the line yaml.v3 names (the enclosing block's start).
func TestYAMLSyntaxPosition(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"a:\n  b: 1\n  c: x: y\n", "f.yaml:3:7: invalid YAML: mapping values are not allowed in this context"},
		{"when: request.model == \"a\": \"b\"\n", "f.yaml:1:27: invalid YAML: mapping values are not allowed in this context"},
		{"when: 'a: b': c\n", "f.yaml:1:13: invalid YAML: mapping values are not allowed in this context"},
		{"nodes:\n  - id: a\n   type: t\n", "f.yaml:3:4: invalid YAML: did not find expected '-' indicator"},
		{"a: 1\n\tb: 2\n", "f.yaml:2:1: invalid YAML: found a tab character that violates indentation"},
		{"a: [1,\nb: 2\n", "f.yaml:2:1: invalid YAML: did not find expected ',' or ']'"},
		{"server:\n  listen: [\n", "f.yaml:2:11: invalid YAML: did not find expected node content"},
		{"a: \"x\n", "f.yaml:1:4: invalid YAML: found unexpected end of stream"},
	} {
		_, ds := LoadYAML("f.yaml", []byte(c.src))
		if len(ds) != 1 || !strings.HasPrefix(ds[0].String(), c.want) {
			t.Errorf("%q: got %v, want %s", c.src, ds, c.want)
		}
	}
}

// The offending line of a long document is found by bisecting prefixes:
// a few parses, not one per line (a 5000-line file stays fast).
func TestYAMLSyntaxPositionLongFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("vars:\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "  v%d: %d\n", i, i)
	}
	b.WriteString("  bad: x: y\n")
	_, ds := LoadYAML("f.yaml", []byte(b.String()))
	if len(ds) != 1 || !strings.HasPrefix(ds[0].String(), "f.yaml:5002:9: invalid YAML: mapping values") {
		t.Fatalf("got %v", ds)
	}
}
