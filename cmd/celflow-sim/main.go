// Command celflow-sim runs a simulated vLLM worker (`celflow-sim [flags]`)
// or an Inference Gateway + EPP stand-in (`celflow-sim gateway [flags]`)
// on loopback, for celflow's tests, benchmarks and demo. docs/simulator.md
// documents the flags; cmd/internal/sim is the simulator.
//
// It is a binary of its own so that the serving binary, celflow, carries
// no test tooling.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/celflow/celflow/cmd/internal/buildversion"
	"github.com/celflow/celflow/cmd/internal/sim"
)

// version is stamped by the Makefile: -X main.version=$(VERSION).
var version string

func main() {
	args := os.Args[1:]
	if buildversion.IsRequest(args) {
		buildversion.Print(os.Stdout, "celflow-sim", buildversion.Resolve(version))
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := sim.Main(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
