package front

import (
	"net/http"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// ACCEPTANCE 1: the served routes answer neither 404 nor 405.
func TestServedRoutes(t *testing.T) {
	h := start(t, nil, nil)
	h.srv.SetModels(ModelSource{Static: []string{"m"}})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1/chat/completions"},
		{"POST", "/v1/completions"},
		{"POST", "/inference/v1/generate"},
		{"GET", "/healthz"},
		{"GET", "/readyz"},
		{"GET", "/metrics"},
		{"GET", "/health"},
		{"GET", "/v1/models"},
	} {
		body := `{"model":"m","prompt":"hi"}`
		if tc.path == "/inference/v1/generate" {
			body = `{"token_ids":[1,2,3]}`
		}
		resp, b := h.do(t, tc.method, tc.path, body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s = %d %s", tc.method, tc.path, resp.StatusCode, b)
		}
	}
}

// ACCEPTANCE 2, 3, 8, 192: unknown paths 404, wrong methods 405, both as
// JSON errors with a request id. Issue 12 amends ACCEPTANCE 2: GET
// /v1/models is served now (models_test.go); /v1/embeddings and trailing
// slashes stay 404.
func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	h := start(t, nil, nil)
	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/v1/models/", 404, "not_found"},
		{"GET", "/health/", 404, "not_found"},
		{"POST", "/v1/models", 405, "method_not_allowed"},
		{"POST", "/health", 405, "method_not_allowed"},
		{"POST", "/v1/embeddings", 404, "not_found"},
		{"POST", "/v1/chat/completions/", 404, "not_found"},
		{"GET", "/healthz/", 404, "not_found"},
		{"POST", "//v1/completions", 404, "not_found"},
		{"GET", "/", 404, "not_found"},
		{"GET", "/v1/chat/completions", 405, "method_not_allowed"},
		{"PUT", "/v1/completions", 405, "method_not_allowed"},
		{"POST", "/healthz", 405, "method_not_allowed"},
		{"POST", "/readyz", 405, "method_not_allowed"},
		{"DELETE", "/metrics", 405, "method_not_allowed"},
		{"HEAD", "/inference/v1/generate", 405, ""}, // HEAD has no body to check
	}
	for _, tt := range tests {
		resp, body := h.do(t, tt.method, tt.path, "", nil)
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
			continue
		}
		if resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: no X-Request-Id", tt.method, tt.path)
		}
		if tt.code == "" {
			continue
		}
		msg, typ, code := errorReply(t, resp, body)
		if code != tt.code || typ != "invalid_request_error" {
			t.Errorf("%s %s: type %q code %q", tt.method, tt.path, typ, code)
		}
		if !strings.HasSuffix(msg, "(request_id: "+resp.Header.Get("X-Request-Id")+")") {
			t.Errorf("%s %s: message %q does not end with the request id", tt.method, tt.path, msg)
		}
	}
	if h.runner.calls() != 0 {
		t.Fatalf("runner called %d times", h.runner.calls())
	}
}

// ACCEPTANCE 4: /metrics serves the injected handler, or an empty text reply.
func TestMetrics(t *testing.T) {
	h := start(t, nil, nil)
	resp, body := h.do(t, "GET", "/metrics", "", nil)
	if resp.StatusCode != 200 || len(body) != 0 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("nil metrics: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	prom := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("# TYPE celflow_requests_total counter\ncelflow_requests_total 3\n"))
	})
	h2 := start(t, nil, func(o *Options) { o.Metrics = prom })
	resp, body = h2.do(t, "GET", "/metrics", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "celflow_requests_total 3") {
		t.Fatalf("metrics: %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Fatal("metrics reply has no X-Request-Id")
	}
}

// A route the workflow does not serve is a 404 and no run.
func TestUnboundRoute(t *testing.T) {
	r := &fakeRunner{}
	h := start(t, r, func(o *Options) { delete(o.Runners, engine.RouteCompletions) })
	resp, body := h.do(t, "POST", "/v1/completions", `{}`, nil)
	if resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, _, code := errorReply(t, resp, body); code != "not_found" {
		t.Fatalf("code %q", code)
	}
	if r.calls() != 0 {
		t.Fatal("runner called")
	}
}
