package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/celflow/celflow/engine"
)

// cmdGraph: `celflow graph [--format mermaid|dot] FILE` prints the DAG with
// guards, fan-out lists and edge conditions as labels.
func cmdGraph(args []string) int { return runGraph(args, os.Stdout, os.Stderr) }

func runGraph(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow graph", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "mermaid", "mermaid or dot")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(files) != 1 || (*format != "mermaid" && *format != "dot") {
		fmt.Fprintln(stderr, "usage: celflow graph [--format mermaid|dot] FILE")
		return 2
	}
	w, ds := engine.LoadFile(files[0], engine.LoadOptions{})
	if w == nil {
		fmt.Fprint(stderr, ds.Pretty())
		return 1
	}
	if *format == "dot" {
		fmt.Fprint(stdout, dot(w))
	} else {
		fmt.Fprint(stdout, mermaid(w))
	}
	return 0
}

// nodeLines are the lines of a node's label: id, type, guard, fan-out.
func nodeLines(n engine.NodeInfo) []string {
	l := []string{n.ID, n.Type}
	if n.When != "" {
		l = append(l, "when: "+n.When)
	}
	if n.ForEach != "" {
		l = append(l, fmt.Sprintf("foreach: %s (max %d)", n.ForEach, n.MaxParallel))
	}
	if n.JoinAny {
		l = append(l, "join: any")
	}
	return l
}

func mermaid(w *engine.Workflow) string {
	esc := func(s string) string {
		return strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;").Replace(s)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "---\ntitle: %s %s\n---\nflowchart TD\n", esc(w.Name()), esc(w.Version()))
	b.WriteString("  request((request))\n")
	for _, n := range w.Nodes() {
		lines := nodeLines(n)
		for i := range lines {
			lines[i] = esc(lines[i])
		}
		open, close := "[", "]"
		if n.Contract.Responds {
			open, close = "([", "])"
		}
		fmt.Fprintf(&b, "  %s%s\"%s\"%s\n", n.ID, open, strings.Join(lines, "<br/>"), close)
	}
	for _, n := range w.Nodes() {
		if len(n.Needs) == 0 {
			fmt.Fprintf(&b, "  request --> %s\n", n.ID)
		}
		for _, e := range n.Needs {
			if e.If != "" {
				fmt.Fprintf(&b, "  %s -- \"%s\" --> %s\n", e.Node, esc(e.If), n.ID)
			} else {
				fmt.Fprintf(&b, "  %s --> %s\n", e.Node, n.ID)
			}
		}
	}
	return b.String()
}

func dot(w *engine.Workflow) string {
	q := func(s string) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
	}
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n  rankdir=TB;\n  node [shape=box];\n  request [shape=circle];\n", q(w.Name()))
	for _, n := range w.Nodes() {
		shape := ""
		if n.Contract.Responds {
			shape = ", style=rounded"
		}
		fmt.Fprintf(&b, "  %s [label=%s%s];\n", q(n.ID), q(strings.Join(nodeLines(n), "\n")), shape)
	}
	for _, n := range w.Nodes() {
		if len(n.Needs) == 0 {
			fmt.Fprintf(&b, "  request -> %s;\n", q(n.ID))
		}
		for _, e := range n.Needs {
			if e.If != "" {
				fmt.Fprintf(&b, "  %s -> %s [label=%s];\n", q(e.Node), q(n.ID), q(e.If))
			} else {
				fmt.Fprintf(&b, "  %s -> %s;\n", q(e.Node), q(n.ID))
			}
		}
	}
	b.WriteString("}\n")
	return b.String()
}
