package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/internal/tlsfiles"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func load(t *testing.T, yaml string, vars map[string]string) (*Config, string) {
	t.Helper()
	c, ds := Load("/etc/celflow/serve.yaml", []byte(yaml), env(vars))
	return c, ds.String()
}

// ACCEPTANCE 19: only the required key; the documented defaults apply.
func TestDefaults(t *testing.T) {
	c, diags := load(t, "workflow: workflows/epd.yaml\n", nil)
	if c == nil {
		t.Fatal(diags)
	}
	want := Server{Listen: ":8080", MaxRequestBodySize: 64, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 120 * time.Second, DrainDelay: 5 * time.Second,
		ShutdownTimeout: 25 * time.Second, TLS: tlsfiles.ServerConfig{ReloadInterval: 10 * time.Second},
		MaxHeaderBytes: 60 << 10, MaxHeaderCount: 100,
		ResetLimit: 500, ResetWindow: 10 * time.Second, ResetCooldown: 30 * time.Second,
		StreamWriteTimeout: 30 * time.Second}
	if c.Server != want {
		t.Fatalf("server %+v", c.Server)
	}
	if c.Server.MaxBodyBytes() != 64<<20 {
		t.Fatalf("body cap %d", c.Server.MaxBodyBytes())
	}
	if c.Workflow.Path != "/etc/celflow/workflows/epd.yaml" || c.Workflow.Inline != nil {
		t.Fatalf("workflow %+v", c.Workflow)
	}
	if c.Telemetry.LogLevel != "info" || c.Telemetry.LogFormat != "" || c.Telemetry.Tracing.Enabled {
		t.Fatalf("telemetry %+v", c.Telemetry)
	}
	u := c.Upstream
	if u.Picker != "round-robin" || u.FailureThreshold != 3 || u.EjectFor != 10*time.Second ||
		u.IdleConnTimeout != 4*time.Second || u.MaxIdleConnsPerHost != 256 || u.MaxConnsPerHost != 0 ||
		u.PrefixBlockTokens != 16 || u.PrefixIndexSize != 10000 || u.ShortPromptTokens != 0 || u.OwnedHeaders != nil {
		t.Fatalf("upstream %+v", u)
	}
	if c.Server.MaxHeaderBytes != 60<<10 || c.Server.MaxHeaderCount != 100 || c.Trust.ClientFields != nil || c.Trust.OwnedHeaders != nil {
		t.Fatalf("limits %+v trust %+v", c.Server, c.Trust)
	}
}

// Every key of the example in docs/configuration.md reaches the Config.
func TestFullConfig(t *testing.T) {
	yaml := `
server: {listen: "127.0.0.1:9000", max_request_body_size: 5.0, read_header_timeout: 1s, read_timeout: 2s,
         write_timeout: 3s, drain_delay: 4s, shutdown_timeout: 5s, max_header_bytes: 8192, max_header_count: 50,
         max_connections: 100, reset_limit: 7, reset_window: 6s, reset_cooldown: 8s, stream_write_timeout: 9s}
trust: {client_fields: [kv_transfer_params, media_uuid], owned_headers: [x-tenant-route]}
upstream:
  mode: direct
  pools:
    encode: [http://e1:8000]
    prefill: [{url: http://p1:8000, bootstrap_port: 8998}, http://p2:8000]
    decode: [http://d1:8000, http://d2:8000]
  picker: least-in-flight
  health: {failure_threshold: 2, eject_for: 7s}
  connections: {idle_timeout: 3s, max_idle_per_host: 64, max_per_host: 100}
  conditional_decode: {short_prompt_tokens: 32, prefix_block_tokens: 8, prefix_index_size: 500}
telemetry: {log_level: debug, log_format: text, tracing: {enabled: true, protocol: grpc, endpoint: "http://otel:4317"}}
workflow: /abs/wf.yaml
`
	c, diags := load(t, yaml, nil)
	if c == nil {
		t.Fatal(diags)
	}
	if c.Server != (Server{"127.0.0.1:9000", 5, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second,
		tlsfiles.ServerConfig{ReloadInterval: DefaultTLSReloadInterval}, "", 8192, 50, 100, 7, 6 * time.Second, 8 * time.Second, 9 * time.Second}) {
		t.Fatalf("server %+v", c.Server)
	}
	want := upstream.Config{Mode: "direct", Picker: "least-in-flight",
		Pools: map[upstream.Role][]upstream.Endpoint{
			"encode":  {{URL: "http://e1:8000"}},
			"prefill": {{URL: "http://p1:8000", BootstrapPort: 8998}, {URL: "http://p2:8000"}},
			"decode":  {{URL: "http://d1:8000"}, {URL: "http://d2:8000"}},
		},
		FailureThreshold: 2, EjectFor: 7 * time.Second, IdleConnTimeout: 3 * time.Second,
		MaxIdleConnsPerHost: 64, MaxConnsPerHost: 100, ShortPromptTokens: 32, PrefixBlockTokens: 8, PrefixIndexSize: 500,
		OwnedHeaders: []string{"x-tenant-route"}, TLS: tlsfiles.ClientConfig{ReloadInterval: DefaultTLSReloadInterval},
		Routing: upstream.Routing{CacheWeight: upstream.DefaultCacheWeight, LoadWeight: upstream.DefaultLoadWeight}}
	if !reflect.DeepEqual(c.Trust, Trust{ClientFields: []string{"kv_transfer_params", "media_uuid"}, OwnedHeaders: []string{"x-tenant-route"}}) {
		t.Fatalf("trust %+v", c.Trust)
	}
	if !reflect.DeepEqual(c.Upstream, want) {
		t.Fatalf("upstream\n got %+v\nwant %+v", c.Upstream, want)
	}
	tel := c.Telemetry
	if tel.LogLevel != "debug" || tel.LogFormat != "text" || !tel.Tracing.Enabled || tel.Tracing.Protocol != "grpc" ||
		tel.Tracing.Endpoint != "http://otel:4317" {
		t.Fatalf("telemetry %+v", tel)
	}
	if c.Workflow.Path != "/abs/wf.yaml" {
		t.Fatalf("workflow %q", c.Workflow.Path)
	}
	if _, ds := c.NewUpstream(); len(ds) != 0 {
		t.Fatal(ds)
	}
}

// ACCEPTANCE 20, 21, 22, 23, 26, 30: every problem at once, each at
// file:line:col with its path.
func TestInvalid(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", "pipline: 1\nworkflow: w.yaml\n",
			[]string{`/etc/celflow/serve.yaml:1:1: pipline: unknown field "pipline"`}},
		{"invalid YAML", "server: [\nworkflow: w.yaml\n",
			[]string{`/etc/celflow/serve.yaml:`}},
		{"workflow required", "server: {listen: ':1'}\n",
			[]string{`/etc/celflow/serve.yaml:1:1: missing required field "workflow"`}},
		{"several errors", "server:\n  listen: 5\n  write_timeout: \"30\"\n  read_timeout: 30\n  drain_delay: abc\nworkflow: w.yaml\n",
			[]string{
				`/etc/celflow/serve.yaml:2:11: server.listen: expected string, got 5`,
				`/etc/celflow/serve.yaml:3:18: server.write_timeout: invalid duration "30"`,
				`/etc/celflow/serve.yaml:4:17: server.read_timeout: invalid duration 30 (want a non-negative Go duration such as "30s" or "1m30s") [schema/duration]`,
				`/etc/celflow/serve.yaml:5:16: server.drain_delay: invalid duration "abc"`,
			}},
		{"stream write timeout 0", "server: {stream_write_timeout: 0s}\nworkflow: w\n",
			[]string{`1:32: server.stream_write_timeout: must be above 0s: a stream whose client stops reading must end (default 30s)`}},
		{"stream write timeout negative", "server: {stream_write_timeout: -1s}\nworkflow: w\n",
			[]string{`server.stream_write_timeout: invalid duration "-1s"`}},
		{"body size 0", "server: {max_request_body_size: 0}\nworkflow: w\n", []string{`1:33: server.max_request_body_size: must be >= 1, got 0`}},
		{"body size -1", "server: {max_request_body_size: -1}\nworkflow: w\n", []string{`server.max_request_body_size: must be >= 1, got -1`}},
		{"body size 4.5", "server: {max_request_body_size: 4.5}\nworkflow: w\n", []string{`server.max_request_body_size: expected integer`}},
		{"body size string", "server: {max_request_body_size: \"5\"}\nworkflow: w\n", []string{`server.max_request_body_size: expected integer`}},
		{"body size overflows int64 bytes", "server: {max_request_body_size: 8796093022208}\nworkflow: w\n",
			[]string{`1:33: server.max_request_body_size: 8796093022208 MiB overflows int64 bytes (at most 8796093022207)`}},
		{"body size 1e19", "server: {max_request_body_size: 1e19}\nworkflow: w\n", []string{`server.max_request_body_size: expected integer`}},
		{"bad enum", "telemetry: {log_level: loud}\nworkflow: w\n", []string{`1:24: telemetry.log_level: must be one of`}},
		{"bad pool entry", "upstream: {pools: {decode: [5], Decode_2: [http://r]}}\nworkflow: w\n",
			[]string{`upstream.pools.decode[0]: expected object or string`, `upstream.pools.Decode_2: unknown field "Decode_2"`}},
		{"bootstrap port", "upstream: {pools: {prefill: [{url: http://p, bootstrap_port: 70000}]}}\nworkflow: w\n",
			[]string{`upstream.pools.prefill[0].bootstrap_port: must be <= 65535`}},
		{"bool as string", "telemetry: {tracing: {enabled: \"true\"}}\nworkflow: w\n", []string{`telemetry.tracing.enabled: expected boolean`}},
		{"unknown client field", "trust: {client_fields: [kv]}\nworkflow: w\n", []string{`trust.client_fields[0]: must be one of`}},
		{"header name with a space", "trust: {owned_headers: [\"x a\"]}\nworkflow: w\n", []string{`trust.owned_headers[0]:`}},
		{"header cap too small", "server: {max_header_bytes: 10, max_header_count: 0}\nworkflow: w\n",
			[]string{`server.max_header_bytes: must be >= 1024`, `server.max_header_count: must be >= 1`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, diags := load(t, tt.yaml, nil)
			if c != nil {
				t.Fatal("loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(diags, w) {
					t.Errorf("diagnostics lack %q:\n%s", w, diags)
				}
			}
			if n := strings.Count(diags, "\n"); n != len(tt.want) {
				t.Errorf("%d diagnostics, want %d:\n%s", n, len(tt.want), diags)
			}
		})
	}
}

// ACCEPTANCE 26: the largest cap that fits int64 bytes loads; 5 loads.
func TestBodySizeBounds(t *testing.T) {
	for _, n := range []string{"1", "5", "8796093022207"} {
		c, diags := load(t, "server: {max_request_body_size: "+n+"}\nworkflow: w\n", nil)
		if c == nil {
			t.Fatalf("%s: %s", n, diags)
		}
		if c.Server.MaxBodyBytes() <= 0 {
			t.Fatalf("%s: %d bytes", n, c.Server.MaxBodyBytes())
		}
	}
}

// ACCEPTANCE 20: a missing file names the file; exit handling is serve's.
func TestMissingFile(t *testing.T) {
	c, ds := LoadFile("/nonexistent/celflow.yaml", nil)
	if c != nil || !strings.HasPrefix(ds.String(), "/nonexistent/celflow.yaml: cannot read config") {
		t.Fatalf("%v", ds)
	}
}

// Environment overrides: parsed by the key's type, validated like file
// values, named in errors, and able to set keys absent from the file.
func TestEnv(t *testing.T) {
	yaml := "server: {listen: ':8080'}\nworkflow: w.yaml\n"
	c, diags := load(t, yaml, map[string]string{
		"CELFLOW_SERVER_LISTEN":                     ":9090",
		"CELFLOW_SERVER_MAX_REQUEST_BODY_SIZE":      "5.0",
		"CELFLOW_SERVER_DRAIN_DELAY":                "0s",
		"CELFLOW_UPSTREAM_POOLS_DECODE":             "http://d1:8000, http://d2:8000,",
		"CELFLOW_TELEMETRY_TRACING_ENABLED":         "true",
		"CELFLOW_UPSTREAM_CONNECTIONS_MAX_PER_HOST": "12",
		"CELFLOW_TELEMETRY_LOG_FORMAT":              "", // empty: ignored
		"CELFLOW_TRUST_CLIENT_FIELDS":               "bootstrap, tokens",
		"CELFLOW_TRUST_OWNED_HEADERS":               "X-A",
		"CELFLOW_SERVER_MAX_HEADER_COUNT":           "7",
	})
	if c == nil {
		t.Fatal(diags)
	}
	if c.Server.Listen != ":9090" || c.Server.MaxRequestBodySize != 5 || c.Server.DrainDelay != 0 ||
		!c.Telemetry.Tracing.Enabled || c.Upstream.MaxConnsPerHost != 12 || c.Telemetry.LogFormat != "" {
		t.Fatalf("%+v %+v", c.Server, c.Telemetry)
	}
	if !reflect.DeepEqual(c.Trust.ClientFields, []string{"bootstrap", "tokens"}) || !reflect.DeepEqual(c.Upstream.OwnedHeaders, []string{"X-A"}) ||
		c.Server.MaxHeaderCount != 7 {
		t.Fatalf("trust %+v, owned %v, count %d", c.Trust, c.Upstream.OwnedHeaders, c.Server.MaxHeaderCount)
	}
	if d := c.Upstream.Pools["decode"]; len(d) != 2 || d[1].URL != "http://d2:8000" {
		t.Fatalf("pools %+v", c.Upstream.Pools)
	}
	// A workflow path from the environment is relative to the working directory.
	c, diags = load(t, "server: {listen: ':1'}\n", map[string]string{"CELFLOW_WORKFLOW": "wf/epd.yaml"})
	if c == nil || c.Workflow.Path != "wf/epd.yaml" {
		t.Fatalf("%v %s", c, diags)
	}

	bad := []struct{ name, val, want string }{
		{"CELFLOW_SERVER_MAX_REQUEST_BODY_SIZE", "abc", `CELFLOW_SERVER_MAX_REQUEST_BODY_SIZE: server.max_request_body_size: expected integer, got "abc"`},
		{"CELFLOW_SERVER_MAX_REQUEST_BODY_SIZE", "0", `CELFLOW_SERVER_MAX_REQUEST_BODY_SIZE: server.max_request_body_size: must be >= 1`},
		{"CELFLOW_UPSTREAM_HEALTH_FAILURE_THRESHOLD", "4.5", `CELFLOW_UPSTREAM_HEALTH_FAILURE_THRESHOLD: upstream.health.failure_threshold: expected integer, got 4.5`},
		{"CELFLOW_SERVER_WRITE_TIMEOUT", "30", `CELFLOW_SERVER_WRITE_TIMEOUT: server.write_timeout: invalid duration "30"`},
		{"CELFLOW_TELEMETRY_TRACING_ENABLED", "yes", `CELFLOW_TELEMETRY_TRACING_ENABLED: telemetry.tracing.enabled: expected boolean`},
		{"CELFLOW_UPSTREAM_PICKER", "random", `CELFLOW_UPSTREAM_PICKER: upstream.picker: must be one of`},
		{"CELFLOW_SERVER_STREAM_WRITE_TIMEOUT", "0s", `CELFLOW_SERVER_STREAM_WRITE_TIMEOUT: server.stream_write_timeout: must be above 0s`},
	}
	for _, b := range bad {
		c, diags := load(t, yaml, map[string]string{b.name: b.val})
		if c != nil || !strings.HasPrefix(diags, b.want) {
			t.Errorf("%s=%s:\n got %s\nwant %s", b.name, b.val, diags, b.want)
		}
	}
	// A parent the file sets to a non-object cannot take the variable.
	c, diags = load(t, "server: 5\nworkflow: w\n", map[string]string{"CELFLOW_SERVER_LISTEN": ":1"})
	if c != nil || !strings.Contains(diags, "CELFLOW_SERVER_LISTEN: cannot set server.listen") {
		t.Fatalf("%s", diags)
	}
}

// An inline workflow keeps its positions in the config file.
func TestInlineWorkflow(t *testing.T) {
	c, diags := load(t, "server: {listen: ':1'}\nworkflow:\n  apiVersion: celflow/v1\n  kind: Workflow\n", nil)
	if c == nil {
		t.Fatal(diags)
	}
	if c.Workflow.Inline == nil || c.Workflow.Path != "" {
		t.Fatalf("%+v", c.Workflow)
	}
	if l, col := c.Workflow.Inline.Pos("/kind"); l != 4 || col != 9 {
		t.Fatalf("kind at %d:%d", l, col)
	}
}

// The upstream package's checks come back at the key's position or name
// the variable.
func TestNewUpstreamDiagnostics(t *testing.T) {
	c, diags := load(t, "upstream:\n  gateway: ftp://gw\nworkflow: w\n", nil)
	if c == nil {
		t.Fatal(diags)
	}
	if _, ds := c.NewUpstream(); !strings.HasPrefix(ds.String(), "/etc/celflow/serve.yaml:2:12: upstream.gateway: ") {
		t.Fatalf("%s", ds)
	}
	c, _ = load(t, "workflow: w\n", map[string]string{"CELFLOW_UPSTREAM_GATEWAY": "ftp://gw"})
	if _, ds := c.NewUpstream(); !strings.HasPrefix(ds.String(), "CELFLOW_UPSTREAM_GATEWAY: upstream.gateway: ") {
		t.Fatalf("%s", ds)
	}
	c, _ = load(t, "workflow: w\n", nil)
	if _, ds := c.NewUpstream(); !strings.Contains(ds.String(), "upstream.mode: ") {
		t.Fatalf("%s", ds)
	}
	c, _ = load(t, "workflow: w\n", map[string]string{"CELFLOW_UPSTREAM_GATEWAY": "http://gw:80"})
	if cl, ds := c.NewUpstream(); cl == nil || len(ds) != 0 {
		t.Fatalf("%s", ds)
	}
}

// Every schema key, with its default and its variable, is documented in
// docs/configuration.md.
func TestEveryKeyDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	seen := map[string]bool{}
	for _, k := range Keys() {
		if seen[k.Env] {
			t.Errorf("two keys map to %s", k.Env)
		}
		seen[k.Env] = true
		if !strings.Contains(doc, "`"+k.Path+"`") {
			t.Errorf("docs/configuration.md does not document `%s`", k.Path)
		}
		if !strings.Contains(doc, "`"+k.Env+"`") {
			t.Errorf("docs/configuration.md does not name `%s`", k.Env)
		}
		if k.Doc == "" {
			t.Errorf("%s has no description in the schema", k.Path)
		}
	}
}
