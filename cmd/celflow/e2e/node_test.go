//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestNodeOpenAIClient runs the npm `openai` client script
// (testdata/e2e/node/run.mjs, openai 6.49.0 from its lockfile) against a
// stack in gateway mode; its last line must report 0 failed. It skips when
// the node modules are not installed (`npm ci --prefix testdata/e2e/node`)
// or node is not on PATH. ACCEPTANCE 8, 9, 192 through a second SDK.
func TestNodeOpenAIClient(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "..", "testdata", "e2e", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skip("testdata/e2e/node/node_modules/openai is not installed: run `npm ci --prefix testdata/e2e/node`")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	st := startStack(t, stackOpts{gateway: true})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "run.mjs")
	cmd.Dir = dir
	cmd.Env = append(childEnv(), "CELFLOW_URL="+st.url)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^(\d+) passed, (\d+) failed$`).FindStringSubmatch(last)
	if err != nil || m == nil || m[2] != "0" || m[1] == "0" {
		t.Fatalf("node run.mjs (err %v); last line %q; output:\n%s", err, last, out)
	}
	t.Logf("node client: %s", last)
}
