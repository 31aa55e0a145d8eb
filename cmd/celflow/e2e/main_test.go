//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bin is the celflow binary under test; simBin the celflow-sim binary that
// plays the workers and the gateway.
var bin, simBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var tmp string
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	// resolve is env's binary, or (`go test -tags e2e ./cmd/celflow/e2e`
	// without make) one built from pkg into a temporary directory.
	resolve := func(env, name, pkg string) (string, error) {
		if p := os.Getenv(env); p != "" {
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%s: %w", env, err)
			}
			return p, nil
		}
		if tmp == "" {
			var err error
			if tmp, err = os.MkdirTemp("", "celflow-e2e-bin"); err != nil {
				return "", err
			}
		}
		p := filepath.Join(tmp, name)
		cmd := exec.Command("go", "build", "-o", p, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("building %s: %w", name, err)
		}
		return p, nil
	}
	var err error
	if bin, err = resolve("CELFLOW_BIN", "celflow", "github.com/celflow/celflow/cmd/celflow"); err == nil {
		simBin, err = resolve("CELFLOW_SIM_BIN", "celflow-sim", "github.com/celflow/celflow/cmd/celflow-sim")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
