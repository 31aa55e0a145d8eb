package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/celflow/celflow/engine"
)

// cmdExplain: `celflow explain FILE --request REQ.json [--route chat]
// [--assume NODE=STATUS ...] [--tokens N] [--header 'K: V'] [--trace]` runs the real compiled workflow
// and scheduler with node execution stubbed by the assumptions, and prints
// every node's run/skip/omit decision and why.
func cmdExplain(args []string) int { return runExplain(args, os.Stdout, os.Stderr) }

func runExplain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	reqFile := fs.String("request", "", "file holding the client request body (JSON)")
	route := fs.String("route", "chat", "chat, completions or generate")
	tokens := fs.Int("tokens", 16, "prompt tokens a stubbed render reports (generate uses the body's token_ids)")
	traced := fs.Bool("trace", false, "also print the spans the run would emit (names and attributes, as an indented tree)")
	var assumes listFlag
	fs.Var(&assumes, "assume", "NODE=STATUS: an HTTP status (412, 200, 503) or succeeded, answered, failed, timed_out, panic; a comma list is one per attempt (503,200: the retry succeeds) (repeatable)")
	var headers listFlag
	fs.Var(&headers, "header", "Name: value, a client header (repeatable)")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(files) != 1 || *reqFile == "" {
		fmt.Fprintln(stderr, "usage: celflow explain FILE --request REQ.json [--route chat] [--assume NODE=STATUS ...]")
		return 2
	}
	rt, ok := engine.ParseRoute(*route)
	if !ok {
		fmt.Fprintf(stderr, "celflow explain: unknown --route %q (chat, completions, generate)\n", *route)
		return 2
	}
	body, err := os.ReadFile(*reqFile)
	if err != nil {
		fmt.Fprintf(stderr, "celflow explain: %v\n", err)
		return 2
	}
	assume := map[string]engine.Assumption{}
	for _, a := range assumes {
		id, val, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(stderr, "celflow explain: --assume %q: want NODE=STATUS\n", a)
			return 2
		}
		as, err := engine.ParseAssumptions(val)
		if err != nil {
			fmt.Fprintf(stderr, "celflow explain: --assume %s: %v\n", id, err)
			return 2
		}
		assume[id] = as
	}
	p := engine.Probe{Route: rt, Body: body, Tokens: *tokens, Headers: map[string][]string{}}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		p.Headers[strings.TrimSpace(k)] = append(p.Headers[strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	w, ds := engine.LoadFile(files[0], engine.LoadOptions{})
	if w == nil {
		fmt.Fprint(stderr, ds.Pretty())
		return 1
	}
	if !w.Serves(rt) {
		fmt.Fprintf(stderr, "celflow explain: %s does not serve the %s route\n", files[0], rt)
		return 1
	}
	var rep *engine.Report
	var spans []sdktrace.ReadOnlySpan
	if *traced {
		rep, spans, err = tracedExplain(w, p, assume)
	} else {
		rep, err = w.Explain(context.Background(), p, assume)
	}
	if err != nil {
		fmt.Fprintf(stderr, "celflow explain: %v\n", err)
		return 2
	}
	if v := w.Version(); v != "" {
		fmt.Fprintf(stdout, "%s %s, %s route\n", w.Name(), v, rt)
	} else {
		fmt.Fprintf(stdout, "%s, %s route\n", w.Name(), rt)
	}
	fmt.Fprint(stdout, engine.FormatReport(rep))
	if *traced {
		fmt.Fprintln(stdout, "\nspans:")
		printSpans(stdout, spans)
	}
	return 0
}
