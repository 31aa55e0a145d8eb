package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/celflow/celflow/schema"
)

// The editor bundle is self-contained (it compiles alone, with a plain
// draft 2020-12 compiler and no celflow extension, as an editor would), it
// accepts every shipped workflow, and it checks each node's params against
// that node type's schema (issue 13).
func TestEditorSchema(t *testing.T) {
	code, out, errs := runCmd(schemaC, "editor")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("editor.json", strings.NewReader(out)); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("editor.json")
	if err != nil {
		t.Fatalf("the bundle does not compile on its own: %v", err)
	}
	check := func(name string, yaml []byte) error {
		doc, ds := schema.LoadYAML(name, yaml)
		if doc == nil {
			t.Fatalf("%s: %s", name, ds)
		}
		return sch.Validate(doc.Root)
	}
	files, _ := filepath.Glob("../../workflows/*.yaml")
	if len(files) < 5 {
		t.Fatalf("only %d shipped workflows", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(f, b); err != nil {
			t.Errorf("%s does not validate against the editor schema: %v", f, err)
		}
	}
	base, _ := os.ReadFile("../../workflows/decode-only.yaml")
	for _, bad := range []struct{ from, to, want string }{
		{"type: decode", "type: decode\n    params: {ttfb_timout: 5s}", "ttfb_timout"}, // unknown param of decode
		{"type: decode", "type: decode\n    params: {aggregated: yes please}", "boolean"},
		{"type: decode", "type: decod", "decod"}, // completes from the known types
	} {
		y := bytes.Replace(base, []byte(bad.from), []byte(bad.to), 1)
		err := check("bad.yaml", y)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: got %v, want an error naming %q", bad.to, err, bad.want)
		}
	}
}
