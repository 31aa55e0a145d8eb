package engine_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/workflows/invalid")

// TestInvalidGolden loads every invalid workflow and compares its
// diagnostics with the .golden file beside it. Run with -update to rewrite.
// ACCEPTANCE 21, 22, 23, 26, 28, 30, 40, 41, 42, 43, 44, 45, 46, 47, 48.
func TestInvalidGolden(t *testing.T) {
	files, err := filepath.Glob("../testdata/workflows/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid workflows: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			w, ds := engine.Load(filepath.Base(f), data, engine.LoadOptions{})
			got := ds.Pretty()
			if w != nil {
				got += "(loaded)\n"
				// A file whose only problems are in its tests: block is invalid too.
				got += w.RunTests(t.Context()).Pretty()
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestInvalidGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("diagnostics differ\n--- got\n%s--- want\n%s", got, want)
			}
			// The same input always gives the same text (ACCEPTANCE 40).
			_, again := engine.Load(filepath.Base(f), data, engine.LoadOptions{})
			if again.String() != ds.String() {
				t.Errorf("second load differs:\n%s", again)
			}
		})
	}
}
