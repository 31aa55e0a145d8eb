package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/schema"
)

// cmdValidate: `celflow validate [--format text|json|github] FILE...`.
// Exit 0 when every file is valid and its tests pass, 1 otherwise, 2 on usage errors.
func cmdValidate(args []string) int { return runValidate(args, os.Stdout, os.Stderr) }

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "text", "output format: text, json or github (workflow commands for GitHub Actions)")
	noTests := fs.Bool("no-tests", false, "do not run the files' tests: blocks")
	cfgPath := fs.String("config", "", "also check this serve config, its CELFLOW_* environment and its workflow, as serve loads them")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(files) == 0 && *cfgPath == "" {
		fmt.Fprintln(stderr, "usage: celflow validate [--format text|json|github] [--config SERVE.yaml] FILE...")
		return 2
	}
	if *format != "text" && *format != "json" && *format != "github" {
		fmt.Fprintf(stderr, "celflow validate: unknown --format %q (text, json, github)\n", *format)
		return 2
	}
	var all schema.Diagnostics
	if *cfgPath != "" {
		ds, summary := checkServe(*cfgPath, os.Getenv, os.Environ(), !*noTests)
		all = append(all, ds...)
		if *format == "text" && !ds.HasErrors() {
			fmt.Fprintf(stdout, "%s: ok (%s)\n", *cfgPath, summary)
		}
	}
	for _, f := range files {
		ds, summary := validateFile(f, !*noTests)
		all = append(all, ds...)
		if *format == "text" && !ds.HasErrors() {
			fmt.Fprintf(stdout, "%s: ok (%s)\n", f, summary)
		}
	}
	switch *format {
	case "json":
		fmt.Fprintln(stdout, string(all.JSON()))
	case "github":
		fmt.Fprint(stdout, all.GitHub())
	default:
		fmt.Fprint(stdout, all.String())
	}
	if all.HasErrors() {
		return 1
	}
	return 0
}

// validateFile runs the same load path as `serve` (without an upstream
// client), then the file's tests: block.
func validateFile(path string, tests bool) (schema.Diagnostics, string) {
	w, ds := engine.LoadFile(path, engine.LoadOptions{})
	if w == nil {
		return ds, ""
	}
	if tests {
		ds = append(ds, w.RunTests(context.Background())...)
	}
	return ds, fmt.Sprintf("%d nodes, %d tests", len(w.Nodes()), w.TestCount())
}
