package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/telemetry"
)

// tracedExplain runs Explain with an in-memory OpenTelemetry SDK installed,
// under a server span started the way the front starts it, and returns the
// report with the spans the run ended: the same spans `serve` would export
// for that request (node, item and attempt spans with their provenance
// attributes), minus the legs' network timings, which a stubbed run has not.
func tracedExplain(w *engine.Workflow, p engine.Probe, assume map[string]engine.Assumption) (*engine.Report, []sdktrace.ReadOnlySpan, error) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	telemetry.Install(tp)
	defer telemetry.Uninstall()

	r, _ := http.NewRequest(http.MethodPost, p.Route.Path(), nil)
	r.Header = p.Headers
	ctx, span := telemetry.StartRequest(context.Background(), r, p.Route.Path())
	rep, err := w.Explain(ctx, p, assume)
	if err != nil {
		span.End()
		return nil, nil, err
	}
	status, code := 200, ""
	if rep.Err != nil && !rep.Answered {
		status, code = rep.Err.HTTPStatus(), rep.Err.Code()
	}
	telemetry.EndRequest(span, status, code)
	return rep, rec.Ended(), nil
}

// printSpans prints spans as an indented tree in start order, one line per
// span: name, status when set, then its attributes sorted by key.
func printSpans(out io.Writer, spans []sdktrace.ReadOnlySpan) {
	children := map[string][]sdktrace.ReadOnlySpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID().String()] = true
	}
	for _, s := range spans {
		parent := s.Parent().SpanID().String()
		if !s.Parent().IsValid() || !ids[parent] {
			parent = ""
		}
		children[parent] = append(children[parent], s)
	}
	for _, l := range children {
		sort.SliceStable(l, func(i, j int) bool { return l[i].StartTime().Before(l[j].StartTime()) })
	}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range children[parent] {
			ind := strings.Repeat("  ", depth)
			line := ind + s.Name()
			if st := s.Status(); st.Code == codes.Error {
				line += "  [error: " + st.Description + "]"
			}
			fmt.Fprintln(out, line)
			attrs := append([]attribute.KeyValue(nil), s.Attributes()...)
			sort.Slice(attrs, func(i, j int) bool { return attrs[i].Key < attrs[j].Key })
			for _, a := range attrs {
				fmt.Fprintf(out, "%s    %s = %s\n", ind, a.Key, a.Value.Emit())
			}
			walk(s.SpanContext().SpanID().String(), depth+1)
		}
	}
	walk("", 0)
}
