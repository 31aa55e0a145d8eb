// Command celflow-bench is the load benchmark: a worker, a bare proxy and
// celflow side by side, writing docs/benchmarks.md (`celflow-bench
// [flags]`), and its helper subcommands `worker`, `proxy` and `load`;
// cmd/internal/bench documents them. The celflow processes it measures are
// the celflow binary beside it (--bin names another).
//
// It is a binary of its own so that the serving binary, celflow, carries
// no benchmark tooling.
package main

import (
	"os"

	"github.com/celflow/celflow/cmd/internal/bench"
	"github.com/celflow/celflow/cmd/internal/buildversion"
)

// version is stamped by the Makefile: -X main.version=$(VERSION).
var version string

func main() {
	args := os.Args[1:]
	if buildversion.IsRequest(args) {
		buildversion.Print(os.Stdout, "celflow-bench", buildversion.Resolve(version))
		os.Exit(0)
	}
	os.Exit(bench.Main(args, os.Stdout, os.Stderr))
}
