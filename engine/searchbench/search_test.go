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

// BenchmarkCounterexampleSearch times the load-time search of each
// shipped workflow (Workflow.Search: the search alone, not the rest of
// the load), with the requests it evaluates as a metric.
func BenchmarkCounterexampleSearch(b *testing.B) {
	for _, name := range workflows.Names() {
		data, err := workflows.FS.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		w, ds := engine.Load(name, data, engine.LoadOptions{})
		if w == nil {
			b.Fatal(ds)
		}
		b.Run(strings.TrimSuffix(name, ".yaml"), func(b *testing.B) {
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				var failing int
				if n, failing = w.Search(); failing > 0 {
					b.Fatalf("%d expressions fail", failing)
				}
			}
			b.ReportMetric(float64(n), "requests")
		})
	}
}
