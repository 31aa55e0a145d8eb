package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/workflows"
)

// Issue 17 item 6, with real `celflow sim` workers in direct pools on the
// shipped pd workflow:
//   - a prefill that answers and then loses its KV (the sim's kv-drop fault:
//     a prefill that died after answering) makes decode's KV pull fail with
//     400 "KV transfer failed: … from 127.0.0.1:<port>: Get http://…": the
//     client gets 502 bad_gateway (the worker side failed, not its request),
//     and no reply names the prefill's address;
//   - a decode answering 204 reaches the client as 502 bad_gateway, not 204.
func TestWorkerSideFailuresThroughSims(t *testing.T) {
	pURL, stopP := runSimAsync(t, "--listen", "127.0.0.1:0", "--roles", "prefill", "--name", "p0")
	defer stopP()
	dURL, stopD := runSimAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--name", "d0")
	defer stopD()
	dir := t.TempDir()
	wf, err := workflows.FS.ReadFile("pd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "wf.yaml", string(wf))
	cfg := writeFile(t, dir, "serve.yaml", `server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s}
upstream:
  mode: direct
  pools: {prefill: ["`+pURL+`"], decode: ["`+dURL+`"]}
workflow: wf.yaml
`)
	addr, logs := startServe(t, cfg, nil)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil}}
	post := func(fault string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":4}`))
		req.Header.Set("Content-Type", "application/json")
		if fault != "" {
			req.Header.Set("X-Sim-Fault", fault)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(""); code != 200 {
		t.Fatalf("healthy P/D: %d %s\n%s", code, body, logs.String())
	}
	pHost := strings.TrimPrefix(pURL, "http://")
	for _, tc := range []struct{ name, fault string }{
		{"prefill lost its KV", "prefill:kv-drop"},
		{"decode answered 204", "decode:status=204"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.fault)
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%d %q is not an OpenAI error", code, body)
			}
			if code != 502 || e.Error.Type != "upstream_error" || e.Error.Code != "bad_gateway" {
				t.Fatalf("got %d %s, want 502 upstream_error bad_gateway\n%s", code, body, logs.String())
			}
			if strings.Contains(body, pHost) || strings.Contains(body, "127.0.0.1") || strings.Contains(body, "/sim/kv/") {
				t.Fatalf("the reply names the worker network: %s", body)
			}
		})
	}
	// The worker's own words stay in the log for the operator.
	if !strings.Contains(logs.String(), "KV transfer failed") {
		t.Fatalf("the KV pull failure is not in the log:\n%s", logs.String())
	}
}
