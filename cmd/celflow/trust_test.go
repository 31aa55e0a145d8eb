package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// serveAddr runs `celflow serve --config cfg` until the test ends and
// returns its address.
func serveAddr(t *testing.T, cfg string, env map[string]string) string {
	t.Helper()
	addr, _ := startServe(t, cfg, env)
	return addr
}

// The trust and limit keys reach the running server: config → front
// (trust.client_fields, server.max_header_count) and → upstream
// (trust.owned_headers).
func TestServeTrustConfig(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	var gotBody string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, gotBody = r.Header.Clone(), string(b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-1","choices":[]}`)
	}))
	defer gw.Close()
	cfg := writeFile(t, t.TempDir(), "serve.yaml", `
server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s, max_header_count: 12}
trust: {client_fields: [kv_transfer_params], owned_headers: [x-tenant-route]}
workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: decode-only}
  nodes:
    - id: decode
      type: decode
`)
	addr := serveAddr(t, cfg, map[string]string{"CELFLOW_UPSTREAM_GATEWAY": gw.URL})
	post := func(body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Trusted: the client's kv_transfer_params reaches decode; the
	// operator's owned header does not.
	status, b := post(`{"kv_transfer_params":{"remote_host":"trusted-proxy"}}`, map[string]string{"X-Tenant-Route": "evil", "X-Kept": "k"})
	mu.Lock()
	if status != 200 || !strings.Contains(gotBody, "trusted-proxy") || got.Get("X-Tenant-Route") != "" || got.Get("X-Kept") != "k" {
		t.Errorf("trusted kv: %d %s; leg %v %s", status, b, got, gotBody)
	}
	mu.Unlock()
	// Untrusted family: refused.
	if status, b := post(`{"bootstrap_room":1}`, nil); status != 400 || !strings.Contains(b, `"code":"reserved_field"`) {
		t.Errorf("bootstrap_room: %d %s", status, b)
	}
	// server.max_header_count 12: Go's client adds Host, User-Agent,
	// Content-Length and Accept-Encoding.
	many := map[string]string{}
	for _, k := range []string{"A", "B", "C", "D", "E", "F", "G", "H", "I"} {
		many["X-"+k] = "v"
	}
	if status, b := post(`{}`, many); status != 431 || !strings.Contains(b, `"code":"request_header_fields_too_large"`) {
		t.Errorf("13 headers: %d %s", status, b)
	}
}
