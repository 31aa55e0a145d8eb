package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/connectors/async/redistest"
)

// The llm-d-async back end end to end: celflow serve queues in section 3's
// format; a minimal processor written from ASYNC.md section 3 (ZPOPMIN,
// dispatch to a `celflow sim` decode worker, LPUSH the result record, clear
// the marker if the token matches) drains it; celflow serves the result.
func TestServeLLMDAsyncBackend(t *testing.T) {
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	worker := decodeSim(t)

	dir := t.TempDir()
	cfg := writeFile(t, dir, "serve.yaml", `
server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s}
upstream: {gateway: "`+worker.URL+`"}
async:
  redis_url: `+rs.URL()+`
  backend: llm-d-async
  queues: [request-sortedset]
  poll_interval: 100ms
workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: llmd-async}
  nodes:
    - id: async
      type: async-broker
      params: {default_queue: request-sortedset}
    - id: decode
      type: decode
      needs: [{node: async, if: outcome.status == "succeeded"}]
`)
	addr, _ := startServe(t, cfg, nil)

	// The processor.
	var ids sync.Map // x-request-id header values the processor dispatched
	procCtx, stopProc := context.WithCancel(context.Background())
	defer stopProc()
	go func() {
		for procCtx.Err() == nil {
			z, err := rdb.ZPopMin(procCtx, "request-sortedset", 1).Result()
			if err != nil || len(z) == 0 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			var env async.Envelope
			if json.Unmarshal([]byte(z[0].Member.(string)), &env) != nil {
				continue
			}
			member := env.Data.ID
			ids.Store(env.Data.Headers["x-request-id"], true)
			rec := async.ResultRecord{ID: member, RequestToken: env.Internal.RequestToken}
			if rdb.Get(procCtx, "request-cancel:"+member).Val() == env.Internal.RequestToken {
				rec.ErrorCode, rec.ErrorMessage = async.CodeCancelled, "cancelled"
			} else {
				req, _ := http.NewRequest("POST", worker.URL+env.Data.Endpoint, bytes.NewReader(env.Data.Payload))
				for k, v := range env.Data.Headers {
					req.Header.Set(k, v)
				}
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err != nil {
					rec.ErrorCode, rec.ErrorMessage = async.CodeInference, err.Error()
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					rec.StatusCode, rec.Payload = resp.StatusCode, string(b)
				}
			}
			out, _ := json.Marshal(rec)
			rdb.LPush(procCtx, env.Internal.ResultQueueName, out)
			rdb.Expire(procCtx, env.Internal.ResultQueueName, time.Hour)
			if rdb.Get(procCtx, "request-active:"+member).Val() == env.Internal.RequestToken {
				rdb.Del(procCtx, "request-active:"+member)
			}
		}
	}()

	do := func(method, path, body string, h ...string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if st, b := do("POST", "/v1/chat/completions", chat, "X-AP-Mode", "enqueue", "x-request-id", "llmd-1", "X-Team", "t1"); st != 202 {
		t.Fatalf("enqueue %d %s", st, b)
	}
	if st, b := do("GET", "/v1/requests/llmd-1?wait=10", "", "X-Team", "t1"); st != 200 || !strings.Contains(b, "chatcmpl-") {
		t.Fatalf("result %d %s", st, b)
	}
	// Wait mode wakes on the processor's result.
	if st, b := do("POST", "/v1/chat/completions", chat, "x-llm-d-async-mode", "wait", "x-request-id", "llmd-2"); st != 200 || !strings.Contains(b, "chatcmpl-") {
		t.Fatalf("wait %d %s", st, b)
	}
	// Cancel before dispatch: the processor sees the cancel key.
	stopProc() // no ZPOPMIN succeeds after this
	do("POST", "/v1/chat/completions", chat, "x-llm-d-async-mode", "enqueue", "x-request-id", "llmd-3")
	if st, _ := do("DELETE", "/v1/requests/llmd-3", ""); st != 204 {
		t.Fatalf("delete %d", st)
	}
	if tok := rdb.Get(context.Background(), "request-cancel:default:llmd-3").Val(); tok == "" {
		t.Fatal("no cancel key after DELETE")
	}
	// DELETE is final: 410 from then on, not pending.
	if st, b := do("GET", "/v1/requests/llmd-3", ""); st != 410 {
		t.Fatalf("GET after DELETE %d %s", st, b)
	}
	if _, ok := ids.Load("llmd-1"); !ok {
		t.Error("the client's request id was not in the dispatched envelope's headers")
	}
	// A deadline that passes in the queue (no processor runs) reads 504,
	// not 410: the long-poll returns it once the deadline has passed.
	do("POST", "/v1/chat/completions", chat, "x-llm-d-async-mode", "enqueue", "x-request-id", "llmd-4", "X-Request-Timeout-Seconds", "1")
	if st, b := do("GET", "/v1/requests/llmd-4?wait=30", ""); st != 504 || !strings.Contains(b, "DEADLINE_EXCEEDED") {
		t.Fatalf("deadline passed in the queue: %d %s", st, b)
	}
	if st, b := do("GET", "/metrics", ""); st != 200 || !strings.Contains(b, `celflow_async_submits_total{outcome="created"} 4`) {
		t.Errorf("metrics %d:\n%.2000s", st, b)
	}
}
