package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/schema"
)

// cmdSchema: `celflow schema [workflow | editor | defs | node TYPE | types]`
// prints a JSON Schema (workflow is the default; editor is the workflow
// bundled with every node type's params, for editors).
func cmdSchema(args []string) int { return runSchema(args, os.Stdout, os.Stderr) }

func runSchema(args []string, stdout, stderr io.Writer) int {
	what := "workflow"
	if len(args) > 0 {
		what = args[0]
	}
	var id string
	switch {
	case what == "workflow" && len(args) <= 1:
		id = schema.WorkflowID
	case what == "defs" && len(args) == 1:
		id = schema.DefsID
	case what == "editor" && len(args) == 1:
		b, err := editorSchema()
		if err != nil {
			fmt.Fprintf(stderr, "celflow schema: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, string(b))
		return 0
	case what == "types" && len(args) == 1:
		for _, n := range engine.TypeNames() {
			t, _ := engine.LookupType(n)
			fmt.Fprintf(stdout, "%-20s %s\n", n, t.Doc)
		}
		return 0
	case what == "node" && len(args) == 2:
		t, ok := engine.LookupType(args[1])
		if !ok {
			fmt.Fprintf(stderr, "celflow schema: unknown node type %q (known: %s)\n", args[1], strings.Join(engine.TypeNames(), ", "))
			return 1
		}
		if len(t.Schema) == 0 {
			fmt.Fprintln(stdout, `{"type":"object","additionalProperties":false}`)
			return 0
		}
		fmt.Fprintln(stdout, strings.TrimSpace(string(t.Schema)))
		return 0
	default:
		fmt.Fprintln(stderr, "usage: celflow schema [workflow | editor | defs | types | node TYPE]")
		return 2
	}
	b, _ := schema.Source(id)
	fmt.Fprintln(stdout, strings.TrimSpace(string(b)))
	return 0
}

// editorSchema bundles the workflow schema with every registered node
// type's params schema.
func editorSchema() ([]byte, error) {
	params := map[string][]byte{}
	for _, n := range engine.TypeNames() {
		t, _ := engine.LookupType(n)
		params[n] = t.Schema
	}
	return schema.EditorBundle(params)
}
