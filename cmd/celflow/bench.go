package main

import (
	"os"

	"github.com/celflow/celflow/cmd/internal/bench"
)

// cmdBench runs `celflow bench` (the load benchmark against a bare proxy,
// writing docs/benchmarks.md) and its helpers `bench worker`, `bench proxy`
// and `bench load`; cmd/internal/bench documents them.
func cmdBench(args []string) int { return bench.Main(args, os.Stdout, os.Stderr) }
