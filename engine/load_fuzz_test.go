package engine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/celflow/celflow/engine"
)

// FuzzLoad: the whole load path (YAML, schema, typed decoding, CEL checks
// and lints, the ending proof, diagnostics with carets, SARIF) never
// panics, and returns a workflow or an error, on any input. Seeded with
// every workflow in testdata: go test ./engine/ -run '^$' -fuzz FuzzLoad.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"valid", "invalid"} {
		files, _ := filepath.Glob(filepath.Join("../testdata/workflows", dir, "*.yaml"))
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, ds := engine.Load("f.yaml", data, engine.LoadOptions{})
		if w == nil && !ds.HasErrors() {
			t.Fatalf("no workflow and no error:\n%s", ds)
		}
		_ = ds.Pretty()
		_ = ds.SARIF("dev")
	})
}
