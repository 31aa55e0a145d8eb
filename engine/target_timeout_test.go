package engine_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
)

// A target rule's timeouts are compiled onto the rule the request chooses
// (the legs and the scheduler read them from Exec.Target) and explain shows
// them with the rule; a request no such rule matches keeps the node's.
func TestTargetRuleTimeoutsChosenAndExplained(t *testing.T) {
	w := load(t, `
routes: [chat]
nodes:
  - id: prefill
    type: t-prefill
    timeout: 5s
    target:
      - {if: 'request.model == "big"', timeout: 1m, ttfb_timeout: 30s}
  - id: decode
    type: t-decode
    needs: [prefill]
    target:
      - {if: 'request.model == "big"', ttfb_timeout: 45s, stream_idle_timeout: 0s}
`)
	for _, tc := range []struct {
		model           string
		prefill, decode string // the explain line's target part, "" for none
	}{
		{"big", "target[0]: timeout 1m0s, ttfb_timeout 30s", "target[0]: ttfb_timeout 45s, stream_idle_timeout 0s"},
		{"small", "", ""},
	} {
		rep, err := w.Explain(context.Background(), engine.Probe{Route: engine.RouteChat, Body: []byte(`{"model":"` + tc.model + `"}`), Headers: http.Header{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := engine.FormatReport(rep)
		for _, o := range rep.Outcomes {
			want := map[string]string{"prefill": tc.prefill, "decode": tc.decode}[o.Node]
			switch {
			case want == "" && o.Target != nil:
				t.Errorf("%s: %s chose %s", tc.model, o.Node, o.Target.Desc)
			case want != "" && (o.Target == nil || o.Target.Desc != want || !strings.Contains(out, want)):
				t.Errorf("%s: %s target %+v, want %q in:\n%s", tc.model, o.Node, o.Target, want, out)
			}
		}
		if tc.model != "big" {
			continue
		}
		for _, o := range rep.Outcomes {
			switch o.Node {
			case "prefill":
				if o.Target.Timeout == nil || *o.Target.Timeout != time.Minute || o.Target.TTFB == nil || *o.Target.TTFB != 30*time.Second || o.Target.StreamIdle != nil {
					t.Errorf("prefill's rule %+v", o.Target)
				}
			case "decode":
				if o.Target.Timeout != nil || o.Target.StreamIdle == nil || *o.Target.StreamIdle != 0 {
					t.Errorf("decode's rule %+v", o.Target)
				}
			}
		}
	}
}
