// Package telemetry installs celflow's tracing: an OpenTelemetry SDK
// provider exporting OTLP (HTTP or gRPC), the W3C tracecontext and baggage
// propagators, and the helpers the front and the legs use to continue the
// client's trace.
//
// Tracing is off by default. Off means nothing is installed: the global
// provider stays otel's no-op, spans cost a few nanoseconds and allocate
// nothing, and no traceparent is invented (the client's is forwarded
// unchanged: docs/protocol.md, Client headers on render and worker legs).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Config is the serve config's tracing section. Every field is optional;
// the standard OTEL_* variables fill in what it leaves empty, and a value
// set here wins over the variable.
type Config struct {
	// Enabled turns tracing on without any OTEL_* variable. Tracing is also
	// on when OTEL_TRACES_EXPORTER=otlp, OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. OTEL_SDK_DISABLED=true and
	// OTEL_TRACES_EXPORTER=none force it off.
	Enabled bool
	// Protocol is "http/protobuf" (the default) or "grpc"; empty reads
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL.
	Protocol string
	// Endpoint is a base URL like OTEL_EXPORTER_OTLP_ENDPOINT
	// ("http://127.0.0.1:4318"; HTTP appends /v1/traces). Empty leaves the
	// exporter to the variables, or to localhost:4318 / localhost:4317.
	Endpoint string
	// ServiceVersion is the resource's service.version ("dev" when empty).
	// service.name is OTEL_SERVICE_NAME, or "celflow".
	ServiceVersion string
}

// Protocols accepted in Config.Protocol and the OTEL_* protocol variables.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// settings is what Setup decided from a Config and the environment.
type settings struct {
	on       bool
	protocol string // ProtocolHTTP or ProtocolGRPC
	endpoint string // Config.Endpoint, "" to let the exporter read OTEL_*
}

// resolve decides whether tracing is on and how it exports. getenv is
// os.Getenv outside tests.
func resolve(cfg Config, getenv func(string) string) (settings, error) {
	var s settings
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return s, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "none":
		return s, nil
	case "otlp":
		s.on = true
	case "":
	default:
		// console, zipkin, a list...: refusing beats silently exporting nothing.
		return s, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: celflow supports only otlp and none", exp)
	}
	if cfg.Enabled || cfg.Endpoint != "" ||
		getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		s.on = true
	}
	if !s.on {
		return s, nil
	}
	p, from := cfg.Protocol, "tracing protocol"
	if p == "" {
		p, from = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	}
	if p == "" {
		p, from = getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch strings.ToLower(strings.TrimSpace(p)) {
	case "", "http/protobuf", "http":
		s.protocol = ProtocolHTTP
	case "grpc":
		s.protocol = ProtocolGRPC
	default:
		return s, fmt.Errorf("%s %q: want http/protobuf or grpc", from, p)
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return s, fmt.Errorf("tracing endpoint %q: want a URL like http://127.0.0.1:4318", cfg.Endpoint)
		}
		s.endpoint = cfg.Endpoint
	}
	return s, nil
}

// newExporter builds the OTLP exporter. The otlptrace packages read the
// remaining OTEL_EXPORTER_OTLP_* variables (headers, TLS, timeout,
// compression) themselves; an explicit endpoint option overrides theirs.
func newExporter(ctx context.Context, s settings) (sdktrace.SpanExporter, error) {
	if s.protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if s.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(s.endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if s.endpoint != "" {
		// A base URL, like OTEL_EXPORTER_OTLP_ENDPOINT: the signal path is appended.
		u, _ := url.Parse(s.endpoint)
		u.Path = path.Join("/", u.Path, "v1/traces")
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	return otlptracehttp.New(ctx, opts...)
}

// newResource names the service. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES are read last, so they win.
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	if version == "" {
		version = "dev"
	}
	r, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("celflow"), semconv.ServiceVersion(version)),
		resource.WithFromEnv(),
	)
	if errors.Is(err, resource.ErrPartialResource) {
		// A malformed OTEL_RESOURCE_ATTRIBUTES entry: keep what parsed.
		err = nil
	}
	return r, err
}

// newProvider assembles the SDK provider around an exporter: batch span
// processor, and the sampler from OTEL_TRACES_SAMPLER / _ARG, which the SDK
// reads itself (parentbased_always_on when unset).
func newProvider(res *resource.Resource, exp sdktrace.SpanExporter) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp),
	)
}

// Setup installs tracing globally when cfg or the environment turns it on,
// and returns the function that flushes and stops it (call it on shutdown;
// it is a no-op when tracing is off). With tracing off Setup installs
// nothing and returns a nil error.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	return setup(ctx, cfg, os.Getenv)
}

// Check reports what Setup would refuse in cfg and the OTEL_* environment,
// without installing anything (celflow validate --config, serve --check).
func Check(cfg Config) error {
	_, err := resolve(cfg, os.Getenv)
	return err
}

func setup(ctx context.Context, cfg Config, getenv func(string) string) (func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	s, err := resolve(cfg, getenv)
	if err != nil || !s.on {
		return noop, err
	}
	res, err := newResource(ctx, cfg.ServiceVersion)
	if err != nil {
		return noop, fmt.Errorf("tracing resource: %w", err)
	}
	exp, err := newExporter(ctx, s)
	if err != nil {
		return noop, fmt.Errorf("tracing exporter: %w", err)
	}
	tp := newProvider(res, exp)
	Install(tp)
	return tp.Shutdown, nil
}
