package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/celflow/celflow/nodes/decode" // the decode-only workflow below
)

// syncBuf is a goroutine-safe writer for the server's log.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func noEnv(string) string { return "" }

// ACCEPTANCE 31: an invalid workflow makes validate fail and serve refuse
// to start, both printing the same diagnostics.
func TestServeRefusesInvalidWorkflow(t *testing.T) {
	dir := t.TempDir()
	wf := writeFile(t, dir, "bad.yaml", "apiVersion: celflow/v1\nkind: Workflow\nmetadata: {name: bad}\npipline: 1\nnodes:\n  - id: decode\n    type: no-such-type\n")
	cfg := writeFile(t, dir, "serve.yaml", "upstream: {gateway: \"http://127.0.0.1:1\"}\nworkflow: bad.yaml\n")

	var vout, verr bytes.Buffer
	if code := runValidate([]string{"--no-tests", wf}, &vout, &verr); code != 1 {
		t.Fatalf("validate exit %d", code)
	}
	var serr bytes.Buffer
	if code := runServe(context.Background(), []string{"--config", cfg}, &serr, noEnv, nil); code != 1 {
		t.Fatalf("serve exit %d: %s", code, serr.String())
	}
	if vout.String() == "" || serr.String() != vout.String() {
		t.Fatalf("diagnostics differ:\nvalidate:\n%s\nserve:\n%s", vout.String(), serr.String())
	}
	if !strings.Contains(serr.String(), wf+":4:1: pipline: unknown field") {
		t.Fatalf("no position: %s", serr.String())
	}
}

// ACCEPTANCE 20: a missing config file or invalid YAML: non-zero exit,
// naming the file (with line:col for YAML).
func TestServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	missing := filepath.Join(dir, "nope.yaml")
	if code := runServe(context.Background(), []string{"--config", missing}, &out, noEnv, nil); code != 1 ||
		!strings.HasPrefix(out.String(), missing+": cannot read config") {
		t.Fatalf("missing: %d %s", code, out.String())
	}
	bad := writeFile(t, dir, "bad.yaml", "server:\n  listen: [\n")
	out.Reset()
	if code := runServe(context.Background(), []string{"--config", bad}, &out, noEnv, nil); code != 1 ||
		!strings.HasPrefix(out.String(), bad+":2:11: invalid YAML") { // the unclosed [
		t.Fatalf("invalid YAML: %d %s", code, out.String())
	}
	out.Reset()
	cfg := writeFile(t, dir, "up.yaml", "workflow: w.yaml\n")
	if code := runServe(context.Background(), []string{"--config", cfg}, &out, func(k string) string {
		return map[string]string{"CELFLOW_UPSTREAM_GATEWAY": "ftp://gw"}[k]
	}, nil); code != 1 || !strings.Contains("\n"+out.String(), "\nCELFLOW_UPSTREAM_GATEWAY: upstream.gateway: ") {
		// (The missing w.yaml is reported too: serve prints every problem.)
		t.Fatalf("bad upstream: %d %s", code, out.String())
	}
	out.Reset()
	if code := runServe(context.Background(), nil, &out, noEnv, nil); code != 2 {
		t.Fatalf("no --config: exit %d", code)
	}
}

// The whole path: config → upstream → workflow → front, serving a chat
// through a decode-only workflow to an httptest gateway, then a clean drain.
func TestServeEndToEnd(t *testing.T) {
	var got http.Header
	var gotBody []byte
	var mu sync.Mutex
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, gotBody = r.Header.Clone(), b
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-1","choices":[]}`)
	}))
	defer gw.Close()

	dir := t.TempDir()
	cfg := writeFile(t, dir, "serve.yaml", `
server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s}
workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: decode-only}
  nodes:
    - id: decode
      type: decode
`)
	logs := &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- runServe(ctx, []string{"--config", cfg, "--log-format", "json"}, logs, func(k string) string {
			return map[string]string{"CELFLOW_UPSTREAM_GATEWAY": gw.URL}[k]
		}, nil)
	}()

	// The bound address is in the "celflow is serving" line.
	var addr string
	for i := 0; i < 500 && addr == ""; i++ {
		select {
		case code := <-exit:
			t.Fatalf("serve exited %d: %s", code, logs.String())
		default:
		}
		for _, ln := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(ln), &m) == nil && m["msg"] == "celflow is serving" {
				addr, _ = m["listen"].(string)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("never listened: %s", logs.String())
	}

	body := `{"model":"m","seed":12345678901234567890,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", "e2e-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"id":"cmpl-1","choices":[]}` || resp.Header.Get("X-Request-Id") != "e2e-1" {
		t.Fatalf("reply %d %q %v", resp.StatusCode, b, resp.Header)
	}
	mu.Lock()
	if got.Get("X-Request-Id") != "e2e-1" || got.Get("Epp-Profile") != "decode" || !bytes.Contains(gotBody, []byte(`"seed":12345678901234567890`)) {
		t.Errorf("leg headers %v body %s", got, gotBody)
	}
	mu.Unlock()

	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "celflow_requests_total") {
		t.Errorf("metrics %d:\n%.400s", resp.StatusCode, b)
	}

	// ACCEPTANCE 199: the gateway goes away (connection refused): 502 with
	// a JSON error body, not an empty one.
	gw.Close()
	req, _ = http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Request-Id", "e2e-2")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil ||
		e.Error.Code != "bad_gateway" || !strings.HasSuffix(e.Error.Message, "(request_id: e2e-2)") {
		t.Errorf("unreachable gateway: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(logs.String(), `"request_id":"e2e-1"`) {
		t.Fatalf("no request line: %s", logs.String())
	}
}
