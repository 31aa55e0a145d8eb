package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// celflow-bench measures the celflow binary beside it (make build puts both
// in bin/), else celflow on PATH, else says how to name one.
func TestCelflowBeside(t *testing.T) {
	write := func(path string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	withSib, alone, onPath := t.TempDir(), t.TempDir(), t.TempDir()
	write(filepath.Join(withSib, "celflow"), 0o755)
	write(filepath.Join(onPath, "celflow"), 0o755)
	write(filepath.Join(alone, "celflow"), 0o644) // not executable: ignored

	t.Setenv("PATH", onPath)
	for _, tc := range []struct {
		name, tools, want string
	}{
		{"beside", filepath.Join(withSib, "celflow-bench"), filepath.Join(withSib, "celflow")},
		{"on PATH", filepath.Join(alone, "celflow-bench"), filepath.Join(onPath, "celflow")},
	} {
		if got, err := celflowBeside(tc.tools); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := celflowBeside(filepath.Join(alone, "celflow-bench")); err == nil || !strings.Contains(err.Error(), "--bin") {
		t.Errorf("nothing found: %v, want an error naming --bin", err)
	}
}
