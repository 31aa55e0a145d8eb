package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/nodetest"
)

// Every complete YAML example of docs/workflow-reference.md loads (with the
// real node types linked into this binary, stand-ins for any missing) and
// passes its tests: block.
func TestWorkflowReferenceExamples(t *testing.T) {
	nodetest.RegisterStandIns()
	doc, err := os.ReadFile("../../docs/workflow-reference.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		block = block[:strings.Index(block, "```")]
		if !strings.HasPrefix(block, "apiVersion:") {
			continue
		}
		n++
		w, ds := engine.Load("example", []byte(block), engine.LoadOptions{})
		if w == nil {
			t.Errorf("example %d does not load:\n%s", i+1, ds)
			continue
		}
		if len(ds) > 0 { // an example validates with no warning either
			t.Errorf("example %d (%s) warns:\n%s", i+1, w.Name(), ds)
		}
		if w.TestCount() == 0 {
			t.Errorf("example %d (%s) has no tests", i+1, w.Name())
		}
		if ds := w.RunTests(context.Background()); len(ds) > 0 {
			t.Errorf("example %d (%s) tests fail:\n%s", i+1, w.Name(), ds)
		}
	}
	if n < 3 {
		t.Fatalf("only %d complete examples found", n)
	}
}
