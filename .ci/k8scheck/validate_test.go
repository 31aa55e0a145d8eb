package k8scheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWorkflowValidates runs `$CELFLOW_BIN validate` on the workflow inline in
// the ConfigMap, with diagnostics mapped back to docs/deploy/configmap.yaml.
func TestWorkflowValidates(t *testing.T) {
	bin := os.Getenv("CELFLOW_BIN")
	if bin == "" {
		t.Skip("CELFLOW_BIN not set: build celflow (make build) and set CELFLOW_BIN=$PWD/bin/celflow to validate the ConfigMap's workflow")
	}
	f := loadFixture(t)
	cfg := f.cm.Data["celflow.yaml"]
	wf, offset, indent, err := ExtractWorkflow([]byte(cfg))
	if err != nil {
		t.Fatalf("ConfigMap celflow.yaml: %v", err)
	}
	tmp := filepath.Join(t.TempDir(), "workflow.yaml")
	if err := os.WriteFile(tmp, wf, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "validate", tmp).CombinedOutput()
	if err != nil {
		keyLine, blockIndent := blockPosition(t, filepath.Join(manifestDir, "configmap.yaml"))
		mapped := mapPositions(string(out), tmp, "docs/deploy/configmap.yaml",
			keyLine+offset, blockIndent+indent)
		t.Fatalf("celflow validate failed (%v):\n%s", err, mapped)
	}
}

// blockPosition finds the `celflow.yaml: |` line (1-based) in the manifest and
// the indentation of the block scalar's content.
func blockPosition(t *testing.T, file string) (line, indent int) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "celflow.yaml: |" && i+1 < len(lines) {
			next := lines[i+1]
			return i + 1, len(next) - len(strings.TrimLeft(next, " "))
		}
	}
	t.Fatalf("%s: no `celflow.yaml: |` block", file)
	return 0, 0
}

// mapPositions rewrites "<from>:L:C" into "<to>:L+dl:C+dc".
func mapPositions(out, from, to string, dl, dc int) string {
	re := regexp.MustCompile(regexp.QuoteMeta(from) + `:(\d+):(\d+)`)
	return re.ReplaceAllStringFunc(out, func(m string) string {
		s := re.FindStringSubmatch(m)
		l, _ := strconv.Atoi(s[1])
		c, _ := strconv.Atoi(s[2])
		return fmt.Sprintf("%s:%d:%d", to, l+dl, c+dc)
	})
}

func TestMapPositions(t *testing.T) {
	got := mapPositions("/tmp/w.yaml:3:5: nodes[0]: bad\nother /tmp/w.yaml:10:1: x", "/tmp/w.yaml", "cm.yaml", 40, 6)
	want := "cm.yaml:43:11: nodes[0]: bad\nother cm.yaml:50:7: x"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestExtractWorkflow(t *testing.T) {
	cases := []struct {
		name, in, want string
		offset         int
		wantErr        string
	}{
		{
			name:   "block between keys, comments kept",
			in:     "server:\n  listen: \":8080\"\nworkflow:\n  # why\n  apiVersion: celflow/v1\n  nodes:\n    - id: a\n\n    - id: b\ntelemetry: {}\n",
			want:   "# why\napiVersion: celflow/v1\nnodes:\n  - id: a\n\n  - id: b\n",
			offset: 3,
		},
		{
			name:   "last key, column-0 comment inside",
			in:     "workflow:\n    kind: Workflow\n# note\n    nodes: []\n",
			want:   "kind: Workflow\n# note\nnodes: []\n\n",
			offset: 1,
		},
		{name: "flow mapping is refused", in: "workflow: {kind: Workflow}\n", wantErr: "no top-level"},
		{name: "path form is refused", in: "workflow: ./epd.yaml\n", wantErr: "no top-level"},
		{name: "nested key is not the top-level one", in: "x:\n  workflow:\n    a: 1\n", wantErr: "no top-level"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, off, _, err := ExtractWorkflow([]byte(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want || off != c.offset {
				t.Fatalf("got offset %d\n%q\nwant offset %d\n%q", off, got, c.offset, c.want)
			}
		})
	}
}

// The shipped ConfigMap's workflow extracts cleanly even when CELFLOW_BIN is
// unset, so the skip above never hides a broken extraction.
func TestConfigMapWorkflowExtracts(t *testing.T) {
	f := loadFixture(t)
	wf, _, _, err := ExtractWorkflow([]byte(f.cm.Data["celflow.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(wf), "apiVersion: celflow/v1\n") {
		t.Fatalf("extracted workflow starts %q", string(wf[:min(len(wf), 40)]))
	}
}
