package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/engine"
)

// cmdTest: `celflow test FILE...` runs the files' tests: blocks and prints
// one line per file. Exit 0 when all pass, 1 otherwise, 2 on usage errors.
func cmdTest(args []string) int { return runTest(args, os.Stdout, os.Stderr) }

func runTest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "usage: celflow test FILE...")
		return 2
	}
	code := 0
	for _, f := range files {
		// Each test's request goes through the front's own entry, as under serve.
		w, ds := engine.LoadFile(f, engine.LoadOptions{Entry: front.Entry})
		if w == nil {
			fmt.Fprint(stdout, ds.Pretty())
			code = 1
			continue
		}
		fails := w.RunTests(context.Background())
		if len(fails) > 0 {
			fmt.Fprint(stdout, fails.Pretty())
			fmt.Fprintf(stdout, "FAIL %s (%d failures, %d tests)\n", f, len(fails), w.TestCount())
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "ok   %s (%d tests)\n", f, w.TestCount())
	}
	return code
}
