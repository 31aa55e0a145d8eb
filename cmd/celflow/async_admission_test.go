package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/async/redistest"
)

// Wait-mode clients release their admission slot while they wait: with
// max_in_flight 2, two waiters used to hold both slots, so the dispatcher
// (which takes spare capacity only) could never run the queued requests
// they waited for; both got 504 at their deadline and online traffic got
// 429 meanwhile. Now both answers come back, and an online request in
// between is served.
func TestServeAsyncWaitReleasesAdmission(t *testing.T) {
	rs := redistest.Start(t)
	worker := decodeSim(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "serve.yaml", `
server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s}
upstream: {gateway: "`+worker.URL+`"}
admission: {max_in_flight: 2, max_queue: 4, queue_timeout: 5s}
async:
  redis_url: `+rs.URL()+`
  poll_interval: 50ms
workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: wait-admission}
  nodes:
    - id: async
      type: async-broker
    - id: decode
      type: decode
      needs: [{node: async, if: outcome.status == "succeeded"}]
`)
	addr, logs := startServe(t, cfg, nil)

	post := func(mode, id string) (int, string) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"`+id+`"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		if mode != "" {
			req.Header.Set("x-llm-d-async-mode", mode)
			req.Header.Set("X-Request-Timeout-Seconds", "10")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	type res struct {
		code int
		body string
	}
	done := make(chan res, 2)
	start := time.Now()
	for _, id := range []string{"wait-1", "wait-2"} {
		go func() { c, b := post("wait", id); done <- res{c, b} }()
	}
	if c, b := post("", "online-1"); c != 200 {
		t.Errorf("online request beside two waiters: %d %s", c, b)
	}
	for range 2 {
		if r := <-done; r.code != 200 {
			t.Errorf("waiter: %d %s\n%s", r.code, r.body, logs)
		}
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("waiters answered after %s: they blocked their own dispatch until near the deadline", d)
	}
}
