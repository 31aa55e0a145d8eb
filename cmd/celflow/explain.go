package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"golang.org/x/net/http/httpguts"

	"github.com/celflow/celflow/cmd/internal/server/front"
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
	serveCfg := fs.String("config", "", "a serve config: also say how its upstream picks workers (picker, weights; explainroute.go)")
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
		fmt.Fprintln(stderr, "usage: celflow explain FILE --request REQ.json [--route chat] [--assume NODE=STATUS ...] [--header 'Name: value' ...] [--trace]")
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
	p := engine.Probe{Route: rt, Body: body, Tokens: *tokens, Headers: http.Header{}}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		k = strings.TrimSpace(k)
		if !ok || !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(strings.TrimSpace(v)) {
			fmt.Fprintf(stderr, "celflow explain: --header %q: want 'Name: value' (a valid header name and value)\n", h)
			return 2
		}
		p.Headers.Add(k, strings.TrimSpace(v)) // canonical names, as net/http hands them to serve
	}
	var routing string
	if *serveCfg != "" {
		if routing, err = describeRouting(*serveCfg, os.Getenv); err != nil {
			fmt.Fprintf(stderr, "celflow explain: --config: %v\n", err)
			return 1
		}
	}
	// The request goes through the front's own entry, the function serve runs.
	w, ds := engine.LoadFile(files[0], engine.LoadOptions{Entry: front.Entry})
	if w == nil {
		fmt.Fprint(stderr, ds.Pretty())
		return 1
	}
	if !w.Serves(rt) {
		fmt.Fprintf(stderr, "celflow explain: %s does not serve the %s route\n", files[0], rt)
		return 1
	}
	// A node that behaves by a header the request does not send (the
	// async-broker's mode) gets one path per value.
	variants := w.Variants(p.Headers)
	if len(variants) == 0 {
		variants = []engine.Variant{{}}
	}
	var outs []string
	for _, v := range variants {
		q := p
		q.Variant = v.Mark
		q.Headers = p.Headers.Clone()
		for k, vs := range v.Header {
			q.Headers[k] = vs
		}
		var b strings.Builder
		if v.Name != "" {
			fmt.Fprintf(&b, "\nwith %s:\n", v.Name)
		}
		var rep *engine.Report
		var spans []sdktrace.ReadOnlySpan
		if *traced {
			rep, spans, err = tracedExplain(w, q, assume)
		} else {
			rep, err = w.Explain(context.Background(), q, assume)
		}
		if err != nil {
			fmt.Fprintf(stderr, "celflow explain: %v\n", err)
			return 2
		}
		b.WriteString(engine.FormatReport(rep))
		if *traced {
			fmt.Fprintln(&b, "\nspans:")
			printSpans(&b, spans)
		}
		outs = append(outs, b.String())
	}
	if v := w.Version(); v != "" {
		fmt.Fprintf(stdout, "%s %s, %s route\n", w.Name(), v, rt)
	} else {
		fmt.Fprintf(stdout, "%s, %s route\n", w.Name(), rt)
	}
	if routing != "" {
		fmt.Fprintln(stdout, routing)
	}
	for _, n := range w.Nodes() {
		if n.Contract.Failover != "" {
			fmt.Fprintf(stdout, "failover of %s: %s\n", n.ID, n.Contract.Failover)
		}
	}
	for _, o := range outs {
		fmt.Fprint(stdout, o)
	}
	return 0
}
