package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/schema"
)

const validateUsage = `usage: celflow validate [flags] FILE|DIR|- ...
       celflow validate [flags] --config SERVE.yaml [FILE|DIR|- ...]

Checks workflows with the same load path as serve, then runs their tests:
blocks. A directory is walked for *.yaml and *.yml files; - reads stdin.
With --config, also the serve config, its CELFLOW_* variables (an unknown
one is an error) and its workflow, checked against the config's pools.

Exit status: 0 every file valid (warnings allowed unless --strict), 1 some
file invalid or a test failed, 2 usage error or unreadable input.

Flags:
`

// cmdValidate: `celflow validate [--format text|json|github|sarif] [--strict] FILE|DIR|-...`.
func cmdValidate(args []string) int { return runValidate(args, os.Stdout, os.Stderr) }

func runValidate(args []string, stdout, stderr io.Writer) int {
	return runValidateIO(args, os.Stdin, stdout, stderr)
}

func runValidateIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("celflow validate", flag.ContinueOnError)
	fset.SetOutput(stderr)
	format := fset.String("format", "text", "output format: text (with source lines and carets), json, github (workflow commands for GitHub Actions) or sarif (SARIF 2.1.0 for code scanning)")
	noTests := fset.Bool("no-tests", false, "do not run the files' tests: blocks")
	strict := fset.Bool("strict", false, "fail (exit 1) on warnings too")
	cfgPath := fset.String("config", "", "also check this serve config, its CELFLOW_* environment and its workflow, as serve loads them (the workflow against the real pools)")
	fset.Usage = func() {
		fmt.Fprint(fset.Output(), validateUsage)
		fset.PrintDefaults()
	}
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" { // help goes to stdout, once
			fset.SetOutput(stdout)
			fset.Usage()
			return 0
		}
	}
	args, err := parseInterspersed(fset, args)
	if errors.Is(err, flag.ErrHelp) {
		fset.SetOutput(stdout)
		fset.Usage()
		return 0
	}
	if err != nil {
		return 2
	}
	if len(args) == 0 && *cfgPath == "" {
		fset.Usage()
		return 2
	}
	if !slices.Contains([]string{"text", "json", "github", "sarif"}, *format) {
		fmt.Fprintf(stderr, "celflow validate: unknown --format %q (text, json, github, sarif)\n", *format)
		return 2
	}
	files, unreadable := expandInputs(args)
	all := unreadable
	if *cfgPath != "" {
		ds, summary := checkServe(*cfgPath, os.Getenv, os.Environ(), !*noTests)
		all = append(all, ds...)
		if *format == "text" && !failed(ds, *strict) {
			fmt.Fprintf(stdout, "%s: ok (%s)\n", *cfgPath, summary)
		}
	}
	for _, f := range files {
		ds, summary := validateInput(f, stdin, !*noTests)
		all = append(all, ds...)
		if *format == "text" && !failed(ds, *strict) {
			name := f
			if f == "-" {
				name = "<stdin>"
			}
			fmt.Fprintf(stdout, "%s: ok (%s)\n", name, summary)
		}
	}
	switch *format {
	case "json":
		fmt.Fprintln(stdout, string(all.JSON()))
	case "github":
		fmt.Fprint(stdout, all.GitHub())
	case "sarif":
		fmt.Fprintln(stdout, string(all.SARIF(celflowVersion())))
	default:
		fmt.Fprint(stdout, all.Pretty())
	}
	switch {
	case len(unreadable) > 0 || slices.ContainsFunc(all, func(d schema.Diagnostic) bool { return d.Rule == schema.RuleInput }):
		return 2
	case failed(all, *strict):
		return 1
	}
	return 0
}

func failed(ds schema.Diagnostics, strict bool) bool {
	return ds.HasErrors() || (strict && ds.HasWarnings())
}

// expandInputs turns the arguments into files: a directory becomes its
// *.yaml and *.yml files (recursively, sorted), "-" stays stdin. Paths that
// cannot be read are returned as input/unreadable diagnostics.
func expandInputs(args []string) ([]string, schema.Diagnostics) {
	var files []string
	var ds schema.Diagnostics
	for _, a := range args {
		if a == "-" {
			files = append(files, a)
			continue
		}
		st, err := os.Stat(a)
		if err != nil || !st.IsDir() {
			files = append(files, a) // LoadFile reports a missing file
			continue
		}
		n := 0
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				ds = append(ds, schema.Diagnostic{File: p, Msg: "cannot read: " + err.Error(), Rule: schema.RuleInput})
				return nil
			}
			if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				files = append(files, p)
				n++
			}
			return nil
		})
		if err == nil && n == 0 && len(ds) == 0 {
			ds = append(ds, schema.Diagnostic{File: a, Msg: "no *.yaml or *.yml files in the directory", Rule: schema.RuleInput})
		}
	}
	return files, ds
}

// validateInput runs the same load path as `serve` (without an upstream
// client), then the file's tests: block. "-" reads stdin, named <stdin>.
func validateInput(path string, stdin io.Reader, tests bool) (schema.Diagnostics, string) {
	name, data, err := path, []byte(nil), error(nil)
	if path == "-" {
		name = "<stdin>"
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		// The same text as the serve path's LoadFile.
		return schema.Diagnostics{{File: name, Msg: "cannot read workflow: " + err.Error(), Rule: schema.RuleInput}}, ""
	}
	w, ds := engine.Load(name, data, engine.LoadOptions{Entry: front.Entry}) // tests: run through the front's entry
	if w == nil {
		return ds, ""
	}
	if tests {
		ds = append(ds, w.RunTests(context.Background()).WithSource(name, data)...)
	}
	summary := fmt.Sprintf("%d nodes, %d tests", len(w.Nodes()), w.TestCount())
	if n := len(ds); n > 0 {
		summary += fmt.Sprintf(", %d warning(s)", n)
	}
	return ds, summary
}
