package flowtest_test

import (
	"context"
	"strings"
	"testing"
)

// The mode table of ASYNC.md section 2.
func TestModeTable(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true})
	cases := []struct {
		name    string
		body    string
		headers []string
		status  int
		want    string // substring of the body
	}{
		{"no header: the workflow as usual", chatBody, nil, 200, `"content":"done"`},
		{"passthrough", chatBody, []string{"x-llm-d-async-mode", "passthrough", "x-llm-d-tenant", "team-a"}, 200, `"content":"done"`},
		{"passthrough alias, any case", chatBody, []string{"X-AP-Mode", "PassThrough"}, 200, `"content":"done"`},
		{"enqueue", chatBody, []string{"x-llm-d-async-mode", "enqueue", "x-request-id", "e1"}, 202, `{"id":"e1","status":"pending","state":"queued"}`},
		{"enqueue alias", chatBody, []string{"X-AP-Mode", "ENQUEUE", "x-request-id", "e2"}, 202, `"status":"pending"`},
		{"bad mode", chatBody, []string{"x-llm-d-async-mode", "later"}, 400, "passthrough, enqueue or wait"},
		{"stream in a queued mode", `{"model":"m","stream":true,"messages":[]}`, []string{"x-llm-d-async-mode", "enqueue"}, 400, "stream is only supported in passthrough mode"},
		{"no model", `{"messages":[]}`, []string{"x-llm-d-async-mode", "enqueue"}, 400, "model is required"},
		{"tenant with a colon", chatBody, []string{"x-llm-d-async-mode", "enqueue", "x-llm-d-tenant", "a:b"}, 400, "[A-Za-z0-9._-]{1,64}"},
		{"tenant alias too long", chatBody, []string{"x-llm-d-async-mode", "enqueue", "X-Team", strings.Repeat("t", 65)}, 400, "[A-Za-z0-9._-]{1,64}"},
		{"bad timeout", chatBody, []string{"x-llm-d-async-mode", "enqueue", "X-Request-Timeout-Seconds", "-3"}, 400, "positive integer"},
		{"wait over the maximum", chatBody, []string{"x-llm-d-async-mode", "wait", "X-Request-Timeout-Seconds", "3601"}, 400, "at most 3600"},
	}
	for _, c := range cases {
		r := s.do("POST", "/v1/chat/completions", c.body, c.headers...)
		if r.status != c.status || !strings.Contains(r.body, c.want) {
			t.Errorf("%s: %d %s; want %d with %q", c.name, r.status, r.body, c.status, c.want)
		}
		if r.header.Get("X-Request-Id") == "" {
			t.Errorf("%s: no x-request-id", c.name)
		}
		if r.status == 202 && (r.header.Get("Location") != "/v1/requests/"+r.header.Get("X-Request-Id") || r.header.Get("Retry-After") == "") {
			t.Errorf("%s: 202 without Location/Retry-After: %v", c.name, r.header)
		}
	}
	// passthrough stamps celflow's objective and fairness id, whatever the
	// client sent.
	s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "passthrough", "x-llm-d-tenant", "team-a",
		"x-llm-d-inference-objective", "forged")
	h := s.w.lastLeg()
	if h.Get("X-Llm-D-Inference-Objective") != "obj-async" || h.Get("X-Llm-D-Inference-Fairness-Id") != "team-a" {
		t.Errorf("passthrough leg headers: objective %q fairness %q", h.Get("X-Llm-D-Inference-Objective"), h.Get("X-Llm-D-Inference-Fairness-Id"))
	}
	// Quota classes: team-q may send 1 per window as reserved, then overflow
	// (the key is llm-d-async's quota:<attribute>:<tenant>, a sorted set with
	// one member per admitted request: the overflow is not counted).
	for i, want := range []string{"obj-async", "obj-async-sheddable"} {
		s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "passthrough", "x-llm-d-tenant", "team-q")
		if got := s.w.lastLeg().Get("X-Llm-D-Inference-Objective"); got != want {
			t.Errorf("quota request %d: objective %q, want %q", i+1, got, want)
		}
	}
	if typ, n := s.rdb.Type(context.Background(), "quota:userid:team-q").Val(), s.rdb.ZCard(context.Background(), "quota:userid:team-q").Val(); typ != "zset" || n != 1 {
		t.Errorf("quota key: %s of %d, want a zset of 1", typ, n)
	}
}
