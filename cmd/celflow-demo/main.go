// Command celflow-demo runs simulated vLLM workers, a media server and
// celflow on 127.0.0.1 and shows the path four requests take through the
// shipped E/P/D workflow (--serve keeps the stack up). celflow runs
// in-process, through the same front and node packages `celflow serve`
// uses; cmd/internal/demo is the demo.
//
// It is a binary of its own so that the serving binary, celflow, carries
// no demo.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/buildversion"
	"github.com/celflow/celflow/cmd/internal/demo"
	"github.com/celflow/celflow/cmd/internal/server/front"
	_ "github.com/celflow/celflow/nodes/all" // every shipped node type, as celflow serve has them
)

// version is stamped by the Makefile: -X main.version=$(VERSION).
var version string

// `celflow-demo [--serve] [--gateway] [--listen ADDR] [-v N]`.
// Exit 0 when the four demo requests took their expected paths (and, with
// --serve, after SIGINT/SIGTERM), 1 otherwise, 2 on usage errors.
func main() {
	args := os.Args[1:]
	if buildversion.IsRequest(args) {
		buildversion.Print(os.Stdout, "celflow-demo", buildversion.Resolve(version))
		os.Exit(0)
	}
	os.Exit(runDemo(args, os.Stdout, os.Stderr))
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demo.Options
	fs.BoolVar(&o.Serve, "serve", false, "keep the stack up after the four requests and print a curl command")
	fs.BoolVar(&o.Stack.Gateway, "gateway", false, "route worker legs through the simulated Inference Gateway instead of direct pools")
	fs.StringVar(&o.Stack.Listen, "listen", "127.0.0.1:0", "celflow's listen address (port 0: a free port)")
	fs.StringVar(&o.Stack.Workflow, "workflow", "epd.yaml", "the shipped workflow to serve (a file name in workflows/)")
	fs.DurationVar(&o.Stack.TTFT, "ttft", 20*time.Millisecond, "simulated time to first token")
	fs.DurationVar(&o.Stack.ITL, "itl", 15*time.Millisecond, "simulated inter-token latency")
	fs.StringVar(&o.Model, "model", "celflow-sim", "the model name sent")
	verbosity := fs.Int("v", 0, "celflow's logs on stderr: 0 warnings only, 1 info, 2 debug")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "celflow-demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	level := logrus.WarnLevel
	switch {
	case *verbosity >= 2:
		level = logrus.DebugLevel
	case *verbosity == 1:
		level = logrus.InfoLevel
	}
	// Nodes log through logrus's standard logger: the demo's stdout stays
	// the path printout, logs go to stderr.
	log := logrus.StandardLogger()
	if err := front.ConfigureLogger(log, stderr, "text", level); err != nil {
		fmt.Fprintf(stderr, "celflow-demo: %v\n", err)
		return 2
	}
	o.Stack.Log = log
	return demo.Run(o, stdout, stderr)
}
