package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The whole benchmark in --quick mode against the built binary: worker,
// bare proxy and three celflow processes start, every cell completes
// requests, and the report is written with its targets. Runs only when
// CELFLOW_BIN names the celflow binary and CELFLOW_BENCH_BIN the
// celflow-bench binary that runs the worker and proxy children (make
// test-e2e sets both), and not with -short.
func TestQuickBench(t *testing.T) {
	bin, tools := os.Getenv("CELFLOW_BIN"), os.Getenv("CELFLOW_BENCH_BIN")
	if bin == "" || tools == "" || testing.Short() {
		t.Skip("set CELFLOW_BIN and CELFLOW_BENCH_BIN to the built celflow and celflow-bench binaries (make build; and drop -short) to run the quick benchmark")
	}
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--quick", "--bin", bin, "--tools-bin", tools, "--out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Targets", "## Concurrency 1", "## Concurrency 16", "## Streaming",
		"| celflow prefill→decode | 2 |", "| celflow E/P/D (text, cond-decode miss) | 3 |", goBenchBegin} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The overload cell (issue 12) ran and accounted for every request: no
	// reply other than 200 or 429 with Retry-After, none lost or hung.
	if !bytes.Contains(doc, []byte("## Overload (admission control)")) {
		t.Error("report lacks the overload cell")
	}
	if !strings.Contains(stderr.String(), "overload bound ") || !strings.Contains(stderr.String(), " 0 other") {
		t.Errorf("overload cell: no line, or replies other than 200/429:\n%s", stderr.String())
	}
	// Every cell of the small body completed requests without errors: a
	// benchmark of error replies measures nothing.
	for _, ln := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(ln, " small ") && (strings.Contains(ln, "errors;") || strings.Contains(ln, "     0 req/s")) {
			t.Errorf("cell failed: %s", ln)
		}
	}
}
