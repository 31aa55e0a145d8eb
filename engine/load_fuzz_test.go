package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// FuzzLoad: the workflow loader takes any bytes (YAML, JSON, garbage) and
// never panics: it returns a Workflow, or diagnostics with at least one
// error, each naming the file and its rule; rendering them (carets, SARIF)
// never panics either. Seeds: every workflow under testdata (valid and
// invalid) plus testdata/fuzz/FuzzLoad/.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("../testdata/workflows/*/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, ds := engine.Load("fuzz.yaml", data, engine.LoadOptions{})
		if w == nil && !ds.HasErrors() {
			t.Fatalf("no workflow and no error:\n%s", ds)
		}
		if w != nil && ds.HasErrors() {
			t.Fatalf("a workflow despite errors:\n%s", ds)
		}
		for _, d := range ds {
			if d.File != "fuzz.yaml" || strings.TrimSpace(d.Msg) == "" || d.Rule == "" {
				t.Fatalf("diagnostic without file, message or rule: %+v", d)
			}
		}
		_ = ds.Pretty()
		_ = ds.SARIF("dev")
	})
}
