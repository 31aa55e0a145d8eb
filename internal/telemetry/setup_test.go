package telemetry

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		env     map[string]string
		on      bool
		proto   string
		wantErr string
	}{
		{name: "off by default"},
		{name: "config on", cfg: Config{Enabled: true}, on: true, proto: ProtocolHTTP},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, proto: ProtocolHTTP},
		{name: "endpoint env", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true, proto: ProtocolHTTP},
		{name: "traces endpoint env", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true, proto: ProtocolHTTP},
		{name: "grpc from env", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, proto: ProtocolGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, proto: ProtocolHTTP},
		{name: "config protocol wins", cfg: Config{Enabled: true, Protocol: "grpc"}, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true, proto: ProtocolGRPC},
		{name: "exporter none wins", cfg: Config{Enabled: true}, env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}},
		{name: "sdk disabled wins", cfg: Config{Enabled: true}, env: map[string]string{"OTEL_SDK_DISABLED": "TRUE"}},
		{name: "protocol off ignored", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "console refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, wantErr: "OTEL_TRACES_EXPORTER"},
		{name: "http/json refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "bad config endpoint", cfg: Config{Endpoint: "127.0.0.1:4318"}, wantErr: "tracing endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := resolve(tc.cfg, envOf(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.on != tc.on || s.protocol != tc.proto {
				t.Errorf("on=%v protocol=%q, want on=%v protocol=%q", s.on, s.protocol, tc.on, tc.proto)
			}
		})
	}
}

// Off by default: Setup installs nothing and its shutdown is a no-op.
func TestSetupOff(t *testing.T) {
	before := otel.GetTracerProvider()
	shutdown, err := setup(context.Background(), Config{}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Error("tracing off must leave the global provider alone")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// collected gathers the export requests an OTLP receiver got.
type collected struct {
	mu   sync.Mutex
	reqs []*coltrace.ExportTraceServiceRequest
}

func (c *collected) add(r *coltrace.ExportTraceServiceRequest) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
}

// check asserts one span named name, from service celflow-test.
func (c *collected) check(t *testing.T, name string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reqs) == 0 || len(c.reqs[0].ResourceSpans) == 0 {
		t.Fatalf("receiver got %d export requests", len(c.reqs))
	}
	rs := c.reqs[0].ResourceSpans[0]
	var service, version string
	for _, kv := range rs.Resource.Attributes {
		switch kv.Key {
		case "service.name":
			service = kv.Value.GetStringValue()
		case "service.version":
			version = kv.Value.GetStringValue()
		}
	}
	if service != "celflow-test" || version != "1.2.3" {
		t.Errorf("resource service.name %q version %q", service, version)
	}
	if len(rs.ScopeSpans) == 0 || len(rs.ScopeSpans[0].Spans) != 1 || rs.ScopeSpans[0].Spans[0].Name != name {
		t.Errorf("exported spans: %v", rs.ScopeSpans)
	}
}

// exportOne runs Setup, records one span through the global provider and
// flushes it with the returned shutdown; it restores the test provider.
func exportOne(t *testing.T, cfg Config, name string) {
	t.Helper()
	t.Setenv("OTEL_SERVICE_NAME", "celflow-test") // read by the resource
	t.Cleanup(func() { Install(memTP) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutdown, err := setup(ctx, cfg, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(ctx, name)
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown (flush): %v", err)
	}
}

func TestSetupExportsHTTP(t *testing.T) {
	var got collected
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("receiver got %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("decode export: %v", err)
		}
		got.add(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	exportOne(t, Config{Enabled: true, Endpoint: srv.URL, ServiceVersion: "1.2.3"}, "over-http")
	got.check(t, "over-http")
}

type grpcReceiver struct {
	coltrace.UnimplementedTraceServiceServer
	got *collected
}

func (g grpcReceiver) Export(_ context.Context, r *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.got.add(r)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func TestSetupExportsGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var got collected
	gs := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(gs, grpcReceiver{got: &got})
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	exportOne(t, Config{Protocol: "grpc", Endpoint: "http://" + ln.Addr().String(), ServiceVersion: "1.2.3"}, "over-grpc")
	got.check(t, "over-grpc")
}

// The sampler comes from OTEL_TRACES_SAMPLER (the SDK reads it); unset,
// parent-based always-on follows the client's sampled flag.
func TestSamplerFromEnv(t *testing.T) {
	tests := []struct {
		sampler     string
		parentFlags string // client traceparent flags; "" for no parent
		sampled     bool
	}{
		{"", "", true},
		{"", "01", true},
		{"", "00", false}, // parent-based: the client decided not to sample
		{"always_off", "", false},
		{"traceidratio", "", false}, // OTEL_TRACES_SAMPLER_ARG=0: ratio 0 samples nothing
	}
	for _, tc := range tests {
		t.Run(tc.sampler+"/"+tc.parentFlags, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
			tp := newProvider(resource.Empty(), discard{})
			defer func() { _ = tp.Shutdown(context.Background()) }()
			Install(tp)
			t.Cleanup(func() { Install(memTP) })
			r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
			if tc.parentFlags != "" {
				r.Header.Set("Traceparent", "00-"+clientTrace+"-"+clientSpan+"-"+tc.parentFlags)
			}
			_, span := StartRequest(r.Context(), r, "/v1/completions")
			defer span.End()
			if got := span.SpanContext().IsSampled(); got != tc.sampled {
				t.Errorf("sampled = %v, want %v", got, tc.sampled)
			}
		})
	}
}
