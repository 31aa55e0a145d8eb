// Package searchbench_test measures the load-time counterexample search
// (engine/search.go) on the shipped workflows, with the real node types
// (apart from the engine's own tests, which use stand-ins).
package searchbench_test

import (
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/all"
	"github.com/celflow/celflow/workflows"
)

// Every shipped workflow validates with no diagnostic at all, and the
// search stays far below its bound.
func TestSearchShippedClean(t *testing.T) {
	for _, name := range workflows.Names() {
		data, err := workflows.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		w, ds := engine.Load(name, data, engine.LoadOptions{})
		if w == nil || len(ds) > 0 {
			t.Fatalf("%s:\n%s", name, ds)
		}
		n := w.SearchCount()
		if n > 8000 {
			t.Errorf("%s: %d requests searched", name, n)
		}
		t.Logf("%s: %d requests searched", name, n)
	}
}

// BenchmarkCounterexampleSearch loads each shipped workflow, search
// included (validate's and serve's load).
func BenchmarkCounterexampleSearch(b *testing.B) {
	for _, name := range workflows.Names() {
		data, err := workflows.FS.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(strings.TrimSuffix(name, ".yaml"), func(b *testing.B) {
			n := 0
			for b.Loop() {
				w, ds := engine.Load(name, data, engine.LoadOptions{})
				if w == nil {
					b.Fatal(ds)
				}
				n = w.SearchCount()
			}
			b.ReportMetric(float64(n), "requests")
		})
	}
}
