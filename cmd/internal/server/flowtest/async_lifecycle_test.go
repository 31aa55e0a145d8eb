package flowtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/nodes/asyncbroker"
)

func enqueue(s *stack, id, body string, more ...string) reply {
	return s.do("POST", "/v1/chat/completions", body, append([]string{"x-llm-d-async-mode", "enqueue", "x-request-id", id}, more...)...)
}

// Reattach with the same body; 409 with another; Idempotency-Key as the id.
func TestIdempotency(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true})
	if r := enqueue(s, "same", chatBody); r.status != 202 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := enqueue(s, "same", chatBody); r.status != 202 || !strings.Contains(r.body, `"state":"queued"`) {
		t.Fatalf("reattach: %d %s", r.status, r.body)
	}
	r := enqueue(s, "same", `{"model":"m","messages":[{"role":"user","content":"other"}]}`)
	if r.status != 409 || !strings.Contains(r.body, `"code":"IDEMPOTENCY_CONFLICT"`) || !strings.Contains(r.body, "(request_id: same)") {
		t.Fatalf("conflict: %d %s", r.status, r.body)
	}
	r = s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "enqueue", "Idempotency-Key", "key-1")
	if r.status != 202 || r.header.Get("X-Request-Id") != "key-1" || !strings.Contains(r.body, `"id":"key-1"`) {
		t.Fatalf("idempotency key: %d %v %s", r.status, r.header, r.body)
	}
	if n := s.rdb.XLen(context.Background(), s.b.Stream("default", "async")).Val(); n != 2 {
		t.Fatalf("%d entries queued, want 2 (reattach queues nothing)", n)
	}
}

// enqueue → pending → result → grace → 410, and the dispatched leg carries
// celflow's objective and fairness id and the submit's trace.
func TestEnqueueResultGraceGone(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true, builtin: async.BuiltinConfig{Grace: 300 * time.Millisecond}})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if r := enqueue(s, "r1", chatBody, "x-llm-d-tenant", "team-b", "traceparent", tp, "x-llm-d-slo-ttft-ms", "500"); r.status != 202 {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/requests/r1", "", "x-llm-d-tenant", "team-b"); r.status != 202 || !strings.Contains(r.body, `"status":"pending"`) {
		t.Fatalf("pending: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/requests/r1", ""); r.status != 410 {
		t.Fatalf("another tenant: %d %s", r.status, r.body)
	}
	s.startDispatcher(8)
	r := s.do("GET", "/v1/requests/r1?wait=10", "", "X-Team", "team-b")
	if r.status != 200 || !strings.Contains(r.body, `"id":"cmpl-r1"`) || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("result: %d %s", r.status, r.body)
	}
	h := s.w.lastLeg()
	if h.Get("X-Llm-D-Inference-Objective") != "obj-async" || h.Get("X-Llm-D-Inference-Fairness-Id") != "team-b" ||
		h.Get("X-Llm-D-Slo-Ttft-Ms") != "500" || !strings.Contains(h.Get("Traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("dispatched leg headers: %v", h)
	}
	if r := s.do("GET", "/v1/requests/r1", "", "X-Team", "team-b"); r.status != 200 {
		t.Fatalf("second fetch within the grace: %d", r.status)
	}
	eventually(t, "the result outlived fetch_grace", func() bool {
		return s.do("GET", "/v1/requests/r1", "", "X-Team", "team-b").status == 410
	})
}

// The GET table's rows that the lifecycle test does not reach.
func TestGetTable(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true})
	ctx := context.Background()
	// Stored terminal records, as the dispatcher would write them.
	for _, c := range []struct{ id, code string }{{"g1", "GATE_DROPPED"}, {"g2", "DEADLINE_EXCEEDED"},
		{"g3", "INVALID_REQUEST"}, {"g4", "CANCELLED"}, {"g5", "INFERENCE_ERROR"}} {
		enqueue(s, c.id, chatBody)
		ds, _, err := s.b.Claim(ctx, "test", 1, 0)
		if err != nil || len(ds) != 1 {
			t.Fatalf("claim %s: %v %v", c.id, ds, err)
		}
		if ok, err := s.b.Finish(ctx, ds[0], async.Result{Code: c.code, Message: "m"}); !ok || err != nil {
			t.Fatalf("finish: %v %v", ok, err)
		}
	}
	enqueue(s, "q1", chatBody)
	cases := []struct {
		path, tenant string
		status       int
		want         string
	}{
		{"/v1/requests/bad_id", "", 400, "invalid_request"},
		{"/v1/requests/g1", "a:b", 400, "invalid_request"},
		{"/v1/requests/g1", "", 429, `"code":"GATE_DROPPED"`},
		{"/v1/requests/g2", "", 504, `"code":"DEADLINE_EXCEEDED"`},
		{"/v1/requests/g3", "", 400, `"code":"INVALID_REQUEST"`},
		{"/v1/requests/g4", "", 499, `"code":"CANCELLED"`},
		{"/v1/requests/g5", "", 502, `"code":"INFERENCE_ERROR"`},
		{"/v1/requests/q1", "", 202, `"state":"queued"`},
		{"/v1/requests/never", "", 410, `"code":"UNKNOWN_REQUEST"`},
		{"/v1/requests/q1?wait=x", "", 400, "wait must be"},
	}
	for _, c := range cases {
		var hs []string
		if c.tenant != "" {
			hs = []string{"x-llm-d-tenant", c.tenant}
		}
		r := s.do("GET", c.path, "", hs...)
		if r.status != c.status || !strings.Contains(r.body, c.want) {
			t.Errorf("GET %s: %d %s; want %d %q", c.path, r.status, r.body, c.status, c.want)
		}
	}
	// DELETE of a queued request: 204, then 410; repeats and unknown 204.
	for _, p := range []string{"/v1/requests/q1", "/v1/requests/q1", "/v1/requests/never"} {
		if r := s.do("DELETE", p, ""); r.status != 204 {
			t.Errorf("DELETE %s: %d", p, r.status)
		}
	}
	if r := s.do("GET", "/v1/requests/q1", ""); r.status != 410 {
		t.Errorf("deleted: %d", r.status)
	}
	// A dispatcher started now finds nothing to run: the entry was dropped.
	s.startDispatcher(8)
	time.Sleep(300 * time.Millisecond) // nothing to wait on: asserting an absence
	if h := s.w.lastLeg(); h != nil {
		t.Errorf("a deleted request reached a worker")
	}
}

// DELETE of a running request aborts its worker leg.
func TestDeleteRunningCancelsLegs(t *testing.T) {
	s := newStack(t, stackOpts{})
	s.w.setHold(make(chan struct{}))
	defer close(s.w.hold)
	enqueue(s, "run1", chatBody)
	select {
	case id := <-s.w.started:
		if id != "run1" {
			t.Fatalf("leg for %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never dispatched")
	}
	if r := s.do("GET", "/v1/requests/run1", ""); !strings.Contains(r.body, `"state":"in_progress"`) {
		t.Fatalf("running: %d %s", r.status, r.body)
	}
	if r := s.do("DELETE", "/v1/requests/run1", ""); r.status != 204 {
		t.Fatalf("DELETE: %d", r.status)
	}
	select {
	case id := <-s.w.aborted:
		if id != "run1" {
			t.Fatalf("aborted %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running request's leg was not cancelled")
	}
	eventually(t, "deleted request visible", func() bool { return s.do("GET", "/v1/requests/run1", "").status == 410 })
}

// Wait mode: the result; the wait cap (202, still fetchable); the deadline
// (504); the client leaving (its leg is cancelled, a CANCELLED record).
func TestWaitMode(t *testing.T) {
	s := newStack(t, stackOpts{settings: asyncbroker.Settings{WaitCap: 700 * time.Millisecond}})
	r := s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "wait", "x-request-id", "w1")
	if r.status != 200 || !strings.Contains(r.body, "cmpl-w1") {
		t.Fatalf("wait: %d %s", r.status, r.body)
	}
	s.w.setHold(make(chan struct{}))
	r = s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "wait", "x-request-id", "w2")
	if r.status != 202 || r.header.Get("Location") != "/v1/requests/w2" {
		t.Fatalf("wait cap: %d %s", r.status, r.body)
	}
	s.w.mu.Lock()
	close(s.w.hold)
	s.w.mu.Unlock()
	if r := s.do("GET", "/v1/requests/w2?wait=5", ""); r.status != 200 {
		t.Fatalf("fetch after the cap: %d %s", r.status, r.body)
	}
	s.w.setHold(make(chan struct{}))
	defer close(s.w.hold)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan reply, 1)
	go func() {
		done <- s.doCtx(ctx, "POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "wait", "x-request-id", "w4")
	}()
	for id := range s.w.started {
		if id == "w4" {
			break
		}
	}
	cancel()
	<-done
	for id := range s.w.aborted {
		if id == "w4" {
			break
		}
	}
	eventually(t, "no CANCELLED record after the client left", func() bool {
		r := s.do("GET", "/v1/requests/w4", "")
		return r.status == 499 && strings.Contains(r.body, "CANCELLED")
	})
}

// The deadline: a wait that outlives its X-Request-Timeout-Seconds is 504,
// and a request whose deadline passed in the queue is never dispatched.
func TestDeadline(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true})
	r := s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "wait", "x-request-id", "d1", "X-Request-Timeout-Seconds", "1")
	if r.status != 504 || !strings.Contains(r.body, "DEADLINE_EXCEEDED") {
		t.Fatalf("deadline: %d %s", r.status, r.body)
	}
	s.startDispatcher(8)
	eventually(t, "expired request not recorded", func() bool {
		r := s.do("GET", "/v1/requests/d1", "")
		return r.status == 504
	})
	if s.w.lastLeg() != nil {
		t.Error("an expired request was dispatched")
	}
}

// The backlog bound: 429 QUEUE_FULL with Retry-After.
func TestQueueFull(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true, builtin: async.BuiltinConfig{TenantBacklog: 1}})
	enqueue(s, "f1", chatBody)
	r := enqueue(s, "f2", chatBody)
	if r.status != 429 || !strings.Contains(r.body, `"code":"QUEUE_FULL"`) || r.header.Get("Retry-After") == "" {
		t.Fatalf("full: %d %v %s", r.status, r.header, r.body)
	}
	if r := enqueue(s, "f3", chatBody, "x-llm-d-tenant", "other"); r.status != 202 {
		t.Fatalf("another tenant: %d", r.status)
	}
}

// Redis gone: submits and fetches are 503 ENQUEUE_FAILED; online requests
// (no mode header) and passthrough are unaffected.
func TestRedisDown(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true})
	s.redis.Stop()
	r := enqueue(s, "down1", chatBody)
	if r.status != 503 || !strings.Contains(r.body, `"code":"ENQUEUE_FAILED"`) {
		t.Fatalf("enqueue: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/v1/requests/down1", ""); r.status != 503 {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	for _, h := range [][]string{nil, {"x-llm-d-async-mode", "passthrough"}} {
		if r := s.do("POST", "/v1/chat/completions", chatBody, h...); r.status != 200 {
			t.Fatalf("online %v: %d %s", h, r.status, r.body)
		}
	}
}

// A poison request (its claimers keep dying before they finish) is
// dead-lettered after max_deliveries, and GET shows the terminal record
// (502 DEAD_LETTERED) instead of looping until its deadline.
func TestPoisonDeadLettered(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true, builtin: async.BuiltinConfig{Lease: 40 * time.Millisecond, MaxDeliveries: 2}})
	enqueue(s, "poison1", chatBody)
	ctx := context.Background()
	for i, consumer := range []string{"dies-1", "dies-2", "survivor"} {
		eventually(t, "no delivery", func() bool {
			ds, st, err := s.b.Claim(ctx, consumer, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if i < 2 {
				return len(ds) == 1 // claimed, then abandoned (the replica "dies")
			}
			return st.DeadLettered == 1 && len(ds) == 0
		})
	}
	r := s.do("GET", "/v1/requests/poison1", "")
	if r.status != 502 || !strings.Contains(r.body, `"code":"DEAD_LETTERED"`) {
		t.Fatalf("poison: %d %s", r.status, r.body)
	}
}

// Cancel across replicas: replica A takes the DELETE, replica B runs the
// request; the cancel reaches B through Redis (pub/sub, and the renew's
// cancel flag as the fallback) and aborts its worker leg.
func TestCancelAcrossReplicas(t *testing.T) {
	a := newStack(t, stackOpts{noDispatch: true})
	b := newStack(t, stackOpts{shareWith: a})
	b.w.setHold(make(chan struct{}))
	defer close(b.w.hold)
	enqueue(a, "x1", chatBody)
	select {
	case <-b.w.started:
	case <-time.After(10 * time.Second):
		t.Fatal("replica B never ran it")
	}
	if r := a.do("DELETE", "/v1/requests/x1", ""); r.status != 204 {
		t.Fatalf("DELETE on A: %d", r.status)
	}
	select {
	case id := <-b.w.aborted:
		if id != "x1" {
			t.Fatalf("aborted %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replica B's leg was not cancelled")
	}
}
