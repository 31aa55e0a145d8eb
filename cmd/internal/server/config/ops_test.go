package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
)

// server.tls, server.metrics_listen, upstream.tls and upstream.models reach
// the Config; relative paths are the config file's, variables' paths the
// working directory's; an unquoted 1.3 is the version "1.3".
func TestOpsKeys(t *testing.T) {
	yaml := `
server:
  tls: {cert_file: tls/tls.crt, key_file: /abs/tls.key, min_version: 1.3, client_ca_file: ca.pem,
        client_auth: optional, reload_interval: 2s}
  metrics_listen: "127.0.0.1:9090"
upstream:
  gateway: https://gw:443
  tls: {ca_file: workers.pem, cert_file: c.crt, key_file: c.key, server_name: vllm.svc, min_version: "1.2", reload_interval: 0s}
  models: [llama, qwen]
workflow: w.yaml
`
	c, diags := load(t, yaml, map[string]string{"CELFLOW_UPSTREAM_TLS_KEY_FILE": "rel/c.key"})
	if c == nil {
		t.Fatal(diags)
	}
	wantS := tlsfiles.ServerConfig{CertFile: "/etc/celflow/tls/tls.crt", KeyFile: "/abs/tls.key", MinVersion: "1.3",
		ClientCAFile: "/etc/celflow/ca.pem", ClientAuth: "optional", ReloadInterval: 2 * time.Second}
	if c.Server.TLS != wantS || c.Server.MetricsListen != "127.0.0.1:9090" {
		t.Fatalf("server\n got %+v %q\nwant %+v", c.Server.TLS, c.Server.MetricsListen, wantS)
	}
	wantU := tlsfiles.ClientConfig{CAFile: "/etc/celflow/workers.pem", CertFile: "/etc/celflow/c.crt", KeyFile: "rel/c.key",
		ServerName: "vllm.svc", MinVersion: "1.2"}
	if c.Upstream.TLS != wantU || !reflect.DeepEqual(c.Upstream.Models, []string{"llama", "qwen"}) {
		t.Fatalf("upstream\n got %+v %q\nwant %+v", c.Upstream.TLS, c.Upstream.Models, wantU)
	}

	c, diags = load(t, "workflow: w\n", map[string]string{"CELFLOW_UPSTREAM_MODELS": "a, b", "CELFLOW_SERVER_TLS_SELF_SIGNED": "true",
		"CELFLOW_SERVER_TLS_MIN_VERSION": "1.3"})
	if c == nil {
		t.Fatal(diags)
	}
	if !reflect.DeepEqual(c.Upstream.Models, []string{"a", "b"}) || !c.Server.TLS.SelfSigned || c.Server.TLS.MinVersion != "1.3" {
		t.Fatalf("from the environment: %+v %+v", c.Upstream.Models, c.Server.TLS)
	}
	if c, _ := load(t, "workflow: w\n", nil); c.Server.TLS.Enabled() || c.Server.TLS.ReloadInterval != DefaultTLSReloadInterval {
		t.Fatalf("default server.tls %+v", c.Server.TLS)
	}
}

func TestOpsInvalid(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"cert without key", "server: {tls: {cert_file: c}}\nworkflow: w\n", "1:27: server.tls.cert_file: cert_file and key_file go together"},
		{"self-signed and files", "server: {tls: {cert_file: c, key_file: k, self_signed: true}}\nworkflow: w\n", "server.tls.self_signed: set either"},
		{"TLS 1.1", "server: {tls: {self_signed: true, min_version: 1.1}}\nworkflow: w\n", "server.tls.min_version: must be one of"},
		{"require without CA", "server: {tls: {self_signed: true, client_auth: require}}\nworkflow: w\n", "server.tls.client_auth: \"require\" needs client_ca_file"},
		{"mTLS without TLS", "server: {tls: {client_ca_file: ca.pem}}\nworkflow: w\n", "server.tls.client_ca_file: client certificates need TLS"},
		{"insecure with a CA", "upstream: {tls: {ca_file: a, insecure_skip_verify: true}}\nworkflow: w\n", "upstream.tls.insecure_skip_verify:"},
		{"duplicate model", "upstream: {models: [a, a]}\nworkflow: w\n", "upstream.models:"},
		{"empty model", "upstream: {models: [\"\"]}\nworkflow: w\n", "upstream.models[0]:"},
		{"unknown tls key", "server: {tls: {cert: c}}\nworkflow: w\n", `unknown field "cert"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := load(t, tc.yaml, nil)
			if c != nil || !strings.Contains(diags, tc.want) {
				t.Fatalf("diags:\n%s\nwant %q", diags, tc.want)
			}
		})
	}
}

// An upstream.tls file that does not load is a diagnostic at the section.
func TestUpstreamTLSFileDiag(t *testing.T) {
	c, diags := load(t, "upstream:\n  gateway: https://gw\n  tls: {ca_file: /nonexistent/ca.pem}\nworkflow: w\n", nil)
	if c == nil {
		t.Fatal(diags)
	}
	up, ds := c.NewUpstream()
	if up != nil || len(ds) != 1 || !strings.Contains(ds[0].String(), "/etc/celflow/serve.yaml:3:") ||
		!strings.Contains(ds[0].String(), "upstream.tls: open /nonexistent/ca.pem") {
		t.Fatalf("%v", ds)
	}
}
