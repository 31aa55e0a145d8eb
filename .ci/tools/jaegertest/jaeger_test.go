//go:build jaeger

// Run with: cd .ci/tools && go test -tags jaeger ./jaegertest/
// (builds Jaeger into the cache on first use, see .ci/jaeger.sh).

package jaegertest

import (
	"context"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestRoundTrip sends a parent and a child span over each OTLP protocol
// with the SDK and reads the trace back by id and by service.
func TestRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := Options{}
	if testing.Verbose() {
		opts.Log = os.Stderr
	}
	j, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := j.Stop(); err != nil {
			t.Error(err)
		}
	}()

	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			var exp sdktrace.SpanExporter
			if proto == "grpc" {
				exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(j.OTLPGRPCEndpoint()))
			} else {
				exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(j.OTLPHTTPEndpoint()+"/v1/traces"))
			}
			if err != nil {
				t.Fatal(err)
			}
			service := "jaegertest-" + proto
			tp := sdktrace.NewTracerProvider(
				sdktrace.WithBatcher(exp),
				sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
			)
			tr := tp.Tracer("jaegertest")
			pctx, parent := tr.Start(ctx, "parent", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tr.Start(pctx, "child", trace.WithAttributes(attribute.String("celflow.node.id", "prefill"),
				attribute.Int("http.response.status_code", 412)))
			child.End()
			parent.End()
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}

			id := parent.SpanContext().TraceID().String()
			tr2, err := j.WaitTrace(ctx, id, 2, 20*time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, j.Output())
			}
			p, c := tr2.Find("parent"), tr2.Find("child")
			if p == nil || c == nil {
				t.Fatalf("spans %+v", tr2.Spans)
			}
			if c.Parent() != p.SpanID || p.Parent() != "" {
				t.Errorf("child's parent %q, want %q; parent's parent %q", c.Parent(), p.SpanID, p.Parent())
			}
			if v, _ := c.Tag("celflow.node.id"); v != "prefill" {
				t.Errorf("celflow.node.id = %v", v)
			}
			if v, _ := c.Tag("http.response.status_code"); v != float64(412) {
				t.Errorf("status tag = %v (%T)", v, v)
			}
			if s := tr2.Service(c); s != service {
				t.Errorf("service %q, want %q", s, service)
			}
			list, err := j.Traces(ctx, service, 10)
			if err != nil || len(list) != 1 || list[0].TraceID != id {
				t.Errorf("Traces(%s) = %d traces, %v", service, len(list), err)
			}
		})
	}
}
