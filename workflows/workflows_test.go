package workflows_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/all"
	"github.com/celflow/celflow/workflows"
)

// The shipped set, as issues 3 and 4 and docs/workflows.md list it.
var shipped = []string{
	"cd-pd.yaml", "decode-only.yaml", "epd-async.yaml", "epd-tokens-in.yaml", "epd.yaml",
	"pd-aggregated.yaml", "pd-routed.yaml", "pd-worker-decided.yaml", "pd.yaml", "sglang-concurrent.yaml",
}

// ACCEPTANCE 32: every shipped workflow loads (the same path as `celflow
// validate` and `serve`), and its tests: block passes.
func TestShippedWorkflowsLoadAndPassTheirTests(t *testing.T) {
	if got := workflows.Names(); !slices.Equal(got, shipped) {
		t.Fatalf("embedded workflows %v, want %v", got, shipped)
	}
	for _, name := range shipped {
		t.Run(name, func(t *testing.T) {
			data, err := workflows.FS.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			w, ds := engine.Load(name, data, engine.LoadOptions{})
			if w == nil {
				t.Fatalf("load failed:\n%s", ds.String())
			}
			// A shipped workflow is an example too: no warning either.
			if len(ds) > 0 {
				t.Errorf("loads with warnings:\n%s", ds.String())
			}
			if w.TestCount() == 0 {
				t.Errorf("%s has no tests: block pinning its paths", name)
			}
			if ds := w.RunTests(context.Background()); len(ds) > 0 {
				t.Errorf("tests: block failed:\n%s", ds.String())
			}
		})
	}
}

// docs/workflows.md describes every shipped workflow.
func TestEveryWorkflowIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "workflows.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range shipped {
		if !slices.Contains(headings(string(doc)), name) {
			t.Errorf("docs/workflows.md has no `## %s` section", name)
		}
	}
}

// headings returns the first `code span` of every "## " heading.
func headings(doc string) []string {
	var out []string
	for _, line := range strings.Split(doc, "\n") {
		rest, ok := strings.CutPrefix(line, "## ")
		if !ok {
			continue
		}
		if _, after, ok := strings.Cut(rest, "`"); ok {
			if name, _, ok := strings.Cut(after, "`"); ok {
				out = append(out, name)
			}
		}
	}
	return out
}
