package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/celflow/celflow/engine"
)

// cmdGraph: `celflow graph [--format mermaid|dot|json] FILE` prints the DAG
// with guards, fan-out lists and edge conditions as labels, or as JSON for
// tools (graphJSON: the shape docs/workflow-reference.md documents).
func cmdGraph(args []string) int { return runGraph(args, os.Stdout, os.Stderr) }

func runGraph(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow graph", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "mermaid", "mermaid, dot or json")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(files) != 1 || (*format != "mermaid" && *format != "dot" && *format != "json") {
		fmt.Fprintln(stderr, "usage: celflow graph [--format mermaid|dot|json] FILE")
		return 2
	}
	w, ds := engine.LoadFile(files[0], engine.LoadOptions{})
	if w == nil {
		fmt.Fprint(stderr, ds.Pretty())
		return 1
	}
	switch *format {
	case "dot":
		fmt.Fprint(stdout, dot(w))
	case "json":
		b, err := json.MarshalIndent(graphOf(w), "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "celflow graph: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
	default:
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
	if n.Contract.Failover != "" {
		l = append(l, "failover: "+n.Contract.Failover)
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

// graphJSON is `celflow graph --format json`: the workflow's identity, the
// routes it serves, each node with its guard and fan-out, and each edge with
// its condition. Edges from "request" are the entry edges of nodes without
// needs. Empty fields are left out; the shape only grows (new fields), so
// tools may ignore what they do not know.
type graphJSON struct {
	Name    string      `json:"name"`
	Version string      `json:"version,omitempty"`
	Routes  []string    `json:"routes"`
	Nodes   []graphNode `json:"nodes"`
	Edges   []graphEdge `json:"edges"`
}

type graphNode struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
	When        string `json:"when,omitempty"`    // the guard (CEL)
	ForEach     string `json:"foreach,omitempty"` // the fan-out list (CEL)
	MaxParallel int    `json:"max_parallel,omitempty"`
	Tolerate    int    `json:"tolerate,omitempty"`
	Join        string `json:"join"` // all or any
	Responds    bool   `json:"responds"`
	Terminal    bool   `json:"terminal"`
	Role        string `json:"role,omitempty"`
	Attempts    int    `json:"attempts,omitempty"`
	Timeout     string `json:"timeout,omitempty"`
	Failover    string `json:"failover,omitempty"` // decode's failover: policy
}

type graphEdge struct {
	From string `json:"from"` // a node id, or "request"
	To   string `json:"to"`
	If   string `json:"if,omitempty"` // the edge condition (CEL)
}

func graphOf(w *engine.Workflow) graphJSON {
	g := graphJSON{Name: w.Name(), Version: w.Version(), Routes: []string{}, Nodes: []graphNode{}, Edges: []graphEdge{}}
	for _, r := range engine.Routes {
		if w.Serves(r) {
			g.Routes = append(g.Routes, r.String())
		}
	}
	for _, n := range w.Nodes() {
		gn := graphNode{ID: n.ID, Type: n.Type, Description: n.Description, When: n.When, ForEach: n.ForEach,
			Tolerate: n.Tolerate, Join: "all", Responds: n.Contract.Responds, Terminal: n.Contract.Terminal,
			Role: n.Contract.Role}
		if n.ForEach != "" {
			gn.MaxParallel = n.MaxParallel
		}
		if n.JoinAny {
			gn.Join = "any"
		}
		if n.Attempts > 1 {
			gn.Attempts = n.Attempts
		}
		if n.Timeout > 0 {
			gn.Timeout = n.Timeout.String()
		}
		gn.Failover = n.Contract.Failover
		g.Nodes = append(g.Nodes, gn)
		if len(n.Needs) == 0 {
			g.Edges = append(g.Edges, graphEdge{From: "request", To: n.ID})
		}
		for _, e := range n.Needs {
			g.Edges = append(g.Edges, graphEdge{From: e.Node, To: n.ID, If: e.If})
		}
	}
	return g
}
