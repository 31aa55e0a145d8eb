package asyncbroker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// FuzzHeaders: whatever the client puts in the mode, tenant, timeout,
// x-request-id and Idempotency-Key headers, the node never panics, never
// writes a Redis key from an invalid name, and either passes the request
// on, refuses it with a 4xx, or (no back end here) answers 503.
func FuzzHeaders(f *testing.F) {
	f.Add("enqueue", "team-a", "30", "id-1", "")
	f.Add("WAIT", "a:b", "-1", "", "key-1")
	f.Add("passthrough", "", "", "bad id", "bad key")
	f.Add("later", "\x00", "99999999999999999999", "x", "y")
	cfg, err := parseParams(nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	n := &Node{cfg: cfg}
	f.Fuzz(func(t *testing.T, mode, tenant, timeout, id, key string) {
		h := http.Header{}
		for k, v := range map[string]string{"X-Llm-D-Async-Mode": mode, "X-Llm-D-Tenant": tenant,
			"X-Request-Timeout-Seconds": timeout, "X-Request-Id": id, "Idempotency-Key": key} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		req := &engine.Request{ID: "canon-1", Route: engine.RouteChat, Header: h, Body: []byte(`{"model":"m"}`), Model: "m"}
		w := httptest.NewRecorder()
		run := engine.NewRun(context.Background(), req, w)
		res := n.Run(context.Background(), &engine.Exec{Run: run, NodeID: "async", Attempt: 1, Index: -1})
		switch {
		case res.Err != nil:
			if s := engine.AsError(res.Err).HTTPStatus(); s < 400 || s >= 500 {
				t.Fatalf("refusal with status %d", s)
			}
		case res.Responded:
			if w.Code != http.StatusServiceUnavailable {
				t.Fatalf("answered %d without a back end", w.Code)
			}
			if got := w.Header().Get("X-Request-Id"); !validID(got) {
				t.Fatalf("reply id %q", got)
			}
		default:
			if l := leg.OwnedHeaders.Value(run); l != nil && !validTenant(l.Get("X-Llm-D-Inference-Fairness-Id")) {
				t.Fatalf("stamped fairness id %q", l.Get("X-Llm-D-Inference-Fairness-Id"))
			}
		}
	})
}
