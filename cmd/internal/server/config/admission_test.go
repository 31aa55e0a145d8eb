package config

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine/celenv"
)

func TestAdmissionDefaultsOff(t *testing.T) {
	c, diags := load(t, "workflow: w.yaml\n", nil)
	if c == nil {
		t.Fatal(diags)
	}
	a := c.Admission
	if a.Enabled() || a.MaxQueue != 0 || a.QueueTimeout != DefaultQueueTimeout || a.RetryAfter != DefaultRetryAfter || a.Priority != nil {
		t.Fatalf("admission %+v", a)
	}
}

func TestAdmissionLoads(t *testing.T) {
	c, diags := load(t, `workflow: w.yaml
admission:
  max_in_flight: 64
  routes: {chat: 48, generate: 16}
  max_queue: 128
  queue_timeout: 2s
  retry_after: 3s
  priority: 'request.headers["x-tier"] == "gold" ? 10 : 0'
`, map[string]string{"CELFLOW_ADMISSION_ROUTES_COMPLETIONS": "8"})
	if c == nil {
		t.Fatal(diags)
	}
	a := c.Admission
	if !a.Enabled() || a.MaxInFlight != 64 || a.Routes["chat"] != 48 || a.Routes["completions"] != 8 ||
		a.Routes["generate"] != 16 || a.MaxQueue != 128 || a.QueueTimeout != 2*time.Second || a.RetryAfter != 3*time.Second {
		t.Fatalf("admission %+v", a)
	}
	if a.Priority == nil {
		t.Fatal("priority not compiled")
	}
	for tier, want := range map[string]int64{"gold": 10, "silver": 0} {
		got, err := a.Priority.Eval(&celenv.Request{Header: http.Header{"X-Tier": {tier}}})
		if err != nil || got != want {
			t.Fatalf("tier %s: %d, %v; want %d", tier, got, err, want)
		}
	}
}

// Config errors name file, line and column (line 1 is the workflow); a
// priority's point into the expression.
func TestAdmissionInvalid(t *testing.T) {
	cases := []struct {
		name, yaml string
		vars       map[string]string
		want       string
	}{
		{"priority not an int", "admission: {max_in_flight: 1, priority: 'request.headers[\"x\"]'}\n", nil,
			"serve.yaml:2:42: admission.priority: a priority must be an int expression, got string"},
		{"priority reads the body", "admission:\n  max_in_flight: 1\n  priority: 'request.model == \"m\" ? 1 : 0'\n", nil,
			"serve.yaml:4:14: admission.priority: request.model is not known at admission"},
		{"priority unknown variable", "admission:\n  max_in_flight: 1\n  priority: 'tokens.count'\n", nil,
			"serve.yaml:4:14: admission.priority: undeclared reference to \"tokens\""},
		{"priority syntax", "admission:\n  max_in_flight: 1\n  priority: '1 +'\n", nil,
			"serve.yaml:4:"},
		{"queue without a bound", "admission: {max_queue: 10}\n", nil,
			"serve.yaml:2:24: admission.max_queue: has no effect without a bound"},
		{"priority without a bound", "admission: {priority: '1'}\n", nil,
			"admission.priority: has no effect without a bound"},
		{"queue that cannot wait", "admission: {max_in_flight: 2, max_queue: 10, queue_timeout: 0s}\n", nil,
			"admission.queue_timeout: a wait queue needs queue_timeout above 0s"},
		{"negative bound", "admission: {max_in_flight: -1}\n", nil, "admission.max_in_flight"},
		{"unknown route", "admission: {routes: {embeddings: 3}}\n", nil, "admission.routes"},
		{"env names itself", "admission: {max_in_flight: 2}\n", map[string]string{"CELFLOW_ADMISSION_MAX_QUEUE": "x"},
			"CELFLOW_ADMISSION_MAX_QUEUE: admission.max_queue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := load(t, "workflow: w.yaml\n"+tc.yaml, tc.vars)
			if c != nil || !strings.Contains(diags, tc.want) {
				t.Fatalf("diagnostics:\n%s\nwant %q", diags, tc.want)
			}
		})
	}
}

// A priority that fails for some request is a warning naming the request
// (the load-time search); one that tests before it reads is not.
func TestAdmissionPriorityMayFail(t *testing.T) {
	c, diags := load(t, "workflow: w.yaml\nadmission:\n  max_in_flight: 1\n  priority: 'request.headers[\"x-tier\"] == \"gold\" ? 10 : 0'\n", nil)
	if c == nil || strings.Count(strings.TrimSpace(diags), "\n") != 0 {
		t.Fatalf("%s", diags)
	}
	if s := diags; !strings.Contains(s, "serve.yaml:4:29: admission.priority: warning: this priority fails at run time (no such key: x-tier) for some requests, e.g. POST /v1/chat/completions, x-tier absent") ||
		!strings.Contains(s, "[cel/may-fail]") {
		t.Fatalf("%s", s)
	}
	c, diags = load(t, "workflow: w.yaml\nadmission:\n  max_in_flight: 1\n  priority: '\"x-tier\" in request.headers && request.headers[\"x-tier\"] == \"gold\" ? 10 : 0'\n", nil)
	if c == nil || len(diags) != 0 {
		t.Fatalf("%s", diags)
	}
}
