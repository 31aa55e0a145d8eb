// Command celflow coordinates disaggregated LLM inference through a
// declarative per-request DAG. It is the serving binary: the simulator, the
// load benchmark and the demo are commands of their own (cmd/celflow-sim,
// cmd/celflow-bench, cmd/celflow-demo), so none of that tooling ships in it.
//
// Each subcommand lives in its own file (cmd/celflow/<name>.go) and is
// listed in commands below, one line each.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/celflow/celflow/cmd/internal/buildversion"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	_ "github.com/celflow/celflow/nodes/all" // every shipped node type
)

// version is stamped by the Makefile (-X main.version=$(VERSION), from git
// describe); celflowVersion falls back to the build's VCS revision, then "dev".
var version string

// celflowVersion is what --version prints, celflow_build_info carries and
// SARIF names as the driver version.
func celflowVersion() string { return buildversion.Resolve(version) }

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
	"version":  {"print the version celflow was built from (also --version)", cmdVersion},
}

// tools are the former subcommands that are binaries of their own now; the
// usage text and an attempt to run one say where they went.
var tools = map[string]string{
	"sim":   "celflow-sim",
	"bench": "celflow-bench",
	"demo":  "celflow-demo",
}

func main() {
	// celflow_build_info of every metrics registry serve builds carries the
	// stamped version; the value is fixed for the life of the process.
	metrics.Version = celflowVersion()
	os.Exit(run(os.Args[1:], os.Stderr))
}

func cmdVersion(args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "celflow version: unexpected argument %q\n", args[0])
		return 2
	}
	buildversion.Print(os.Stdout, "celflow", celflowVersion())
	return 0
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		return cmdVersion(nil)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if bin, moved := tools[args[0]]; !ok && moved {
		fmt.Fprintf(stderr, "celflow: %q is a binary of its own now: run `%s %s` (make build puts it in bin/)\n",
			args[0], bin, joinArgs(args[1:]))
		return 2
	}
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
	fmt.Fprintln(w, "\nRun `celflow <command> -h` for a command's flags, `celflow --version` for the version.")
	fmt.Fprintln(w, "\nThe test and demo tools are binaries of their own (make build puts them in bin/):")
	fmt.Fprintln(w, "  celflow-sim     a simulated vLLM worker; `celflow-sim gateway`: an Inference Gateway + EPP stand-in")
	fmt.Fprintln(w, "  celflow-bench   the load benchmark: worker, bare proxy and celflow side by side")
	fmt.Fprintln(w, "  celflow-demo    simulated workers + celflow on 127.0.0.1, four requests' paths")
}

// joinArgs is args for a hint line, with nothing but the text itself.
func joinArgs(args []string) string {
	if len(args) == 0 {
		return "..."
	}
	return strings.Join(args, " ")
}
