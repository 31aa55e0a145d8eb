package leg_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

// One Call does what worker nodes did by hand: pick, stamp the target
// rule's headers (and the pool header in gateway mode), send, and fill the
// result's status, headers (non-2xx) and span attributes.
func TestCallSend(t *testing.T) {
	rule := &engine.LegTarget{Rule: 0, Pool: "small", Header: http.Header{"X-Tenant": {"a"}}}
	for _, tc := range []struct {
		name    string
		status  int
		target  *engine.LegTarget
		any     bool
		wantErr bool
		pool    string
	}{
		{"2xx with a pool rule", 200, rule, false, false, "small"},
		{"no rule", 200, nil, false, false, ""},
		{"5xx rejected", 503, nil, false, true, ""},
		{"5xx as it came", 503, nil, true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, func(rw http.ResponseWriter, r *http.Request, c legtest.Call) {
				rw.Header().Set("X-Seen", "1")
				legtest.JSON(tc.status, `{"ok":true}`)(rw, r, c)
			})
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "prefill")
			x.Target = tc.target
			prepared := false
			var res engine.Result
			resp, target, e := leg.Call{Role: upstream.RolePrefill, Path: "/v1/chat/completions", Body: jsonb.Raw([]byte(`{"a":1}`)), Any: tc.any,
				Prepare: func(*upstream.Leg) { prepared = true }}.Send(context.Background(), x, legtest.Gateway(t, w.URL), &res)
			if resp != nil && e == nil {
				resp.Body.Close()
			}
			if (e != nil) != tc.wantErr || target == nil || !prepared || res.HTTPStatus != tc.status || res.Attrs["http.response.status_code"] != tc.status {
				t.Fatalf("err %v target %v prepared %v res %+v", e, target, prepared, res)
			}
			if tc.wantErr && res.Header.Get("X-Seen") != "1" {
				t.Errorf("a rejected answer's headers are the result's: %v", res.Header)
			}
			calls := w.Calls()
			if len(calls) != 1 || calls[0].Header.Get(upstream.PoolHeader) != tc.pool {
				t.Fatalf("calls %+v", calls)
			}
			if tc.target != nil && (calls[0].Header.Get("X-Tenant") != "a" || len(rule.Header) != 1) {
				t.Errorf("rule headers %v (the rule's own: %v)", calls[0].Header, rule.Header)
			}
		})
	}
}

// A leg whose context is already cancelled (the client reset its HTTP/2
// stream) or past its deadline is neither picked nor sent: the worker
// sees nothing and the error is the context's.
func TestCallSendCancelledSendsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		kind engine.Kind
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, engine.KindCancelled},
		{"deadline passed", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
			t.Cleanup(cancel)
			return ctx
		}, engine.KindDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, legtest.JSON(200, `{"ok":true}`))
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "decode")
			var res engine.Result
			resp, target, e := leg.Call{Role: upstream.RoleDecode, Path: "/v1/chat/completions", Body: jsonb.Raw([]byte(`{"a":1}`))}.
				Send(tc.ctx(), x, legtest.Gateway(t, w.URL), &res)
			if resp != nil || target != nil || e == nil || e.Kind != tc.kind {
				t.Fatalf("resp %v target %v err %v, want no reply and a %v error", resp, target, e, tc.kind)
			}
			if n := len(w.Calls()); n != 0 {
				t.Fatalf("%d legs reached the worker, want 0", n)
			}
		})
	}
}
