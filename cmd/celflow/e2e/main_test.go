//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bin is the celflow binary under test.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin = os.Getenv("CELFLOW_BIN")
	if bin == "" {
		// `go test -tags e2e ./cmd/celflow/e2e` without make: build one.
		dir, err := os.MkdirTemp("", "celflow-e2e-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "celflow")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/celflow/celflow/cmd/celflow")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building celflow: %v\n", err)
			return 1
		}
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, "CELFLOW_BIN: %v\n", err)
		return 1
	}
	return m.Run()
}
