// Command celflow coordinates disaggregated LLM inference through a
// declarative per-request DAG, and ships the tools that go with it.
//
// Each subcommand lives in its own file (cmd/celflow/<name>.go) and is
// listed in commands below, one line each.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"

	_ "github.com/celflow/celflow/nodes/all" // every shipped node type
)

// command is one subcommand: a one-line summary for the usage text, and
// its entry point (arguments after the subcommand name; returns the exit code).
type command struct {
	Summary string
	Run     func(args []string) int
}

// commands maps subcommand names to their implementation. Add one line per subcommand.
var commands = map[string]command{
	"validate": {"check workflow files: schema, CEL, graph, dataflow, and their tests: blocks", cmdValidate},
	"graph":    {"print a workflow as a Mermaid or DOT graph", cmdGraph},
	"explain":  {"show each node's run/skip/omit decision for one request and assumed upstream answers", cmdExplain},
	"schema":   {"print the JSON Schema of workflows or of a node type's params", cmdSchema},
	"test":     {"run the tests: blocks of workflow files", cmdTest},
	"serve":    {"serve OpenAI-compatible traffic through a workflow (--config FILE)", cmdServe},
	"bench":    {"load benchmark: worker, bare proxy and celflow side by side; writes docs/benchmarks.md", cmdBench},
	"demo":     {"run simulated workers + celflow on 127.0.0.1 and show four requests' paths (--serve keeps it up)", cmdDemo},
	"sim":      {"run a simulated vLLM worker; `sim gateway` runs an Inference Gateway + EPP stand-in (tests, demo)", cmdSim},
}

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "celflow: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.Run(args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: celflow <command> [arguments]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(w, "\nRun `celflow <command> -h` for a command's flags.")
}
