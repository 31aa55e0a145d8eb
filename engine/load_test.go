package engine_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/nodetest"
)

func init() { nodetest.Register(); registerBench() }

// Every valid workflow in testdata loads without diagnostics and passes its
// tests: block (ACCEPTANCE 32 for testdata; workflows/ has its own test).
func TestLoadValid(t *testing.T) {
	files, _ := filepath.Glob("../testdata/workflows/valid/*.yaml")
	if len(files) < 2 {
		t.Fatalf("valid workflows: %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			w, ds := engine.LoadFile(f, engine.LoadOptions{})
			if w == nil || len(ds) != 0 {
				t.Fatalf("load:\n%s", ds)
			}
			if w.TestCount() == 0 {
				t.Fatal("no tests: block")
			}
			if ds := w.RunTests(context.Background()); len(ds) != 0 {
				t.Fatalf("tests failed:\n%s", ds)
			}
		})
	}
}

// The compiled workflow exposes what tools need.
func TestWorkflowInfo(t *testing.T) {
	w, _ := engine.LoadFile("../testdata/workflows/valid/epd.yaml", engine.LoadOptions{})
	if w.Name() != "epd-test" || w.Version() != "1" || len(w.Hash()) != 64 || !w.Serves(engine.RouteGenerate) {
		t.Fatalf("%s %s %s", w.Name(), w.Version(), w.Hash())
	}
	ns := w.Nodes()
	if len(ns) != 6 || ns[3].ID != "encode" || ns[3].ForEach != "media" || ns[3].MaxParallel != 4 ||
		ns[3].Needs[0].If != "response.status == 412" || !ns[5].Contract.Terminal || ns[4].Attempts != 2 {
		t.Fatalf("%+v", ns)
	}
}
