package asyncbroker

import (
	"context"
	"net/http"
	"strings"

	"github.com/celflow/celflow/engine"
)

// Preview is what explain and the tests: block run in place of the node
// (engine.Previewer): the same mode, tenant and body checks as Run, and for
// the queued modes the answer a configured server gives without Redis: 202
// for enqueue, the result (200 when the dispatched run succeeds) for wait.
func (n *Node) Preview(ctx context.Context, x *engine.Exec) engine.Result {
	m, _, r, done := n.decide(ctx, x)
	if done {
		return r
	}
	req := x.Run.Req
	if req.Stream {
		return fail(engine.Errorf(engine.KindInvalidRequest, "stream is only supported in passthrough mode"))
	}
	if req.Model == "" {
		return fail(engine.Errorf(engine.KindInvalidRequest, "model is required"))
	}
	status := http.StatusAccepted
	if m == modeWait {
		status = http.StatusOK // held until the dispatched run's result
	}
	if w, ok := x.Run.Answer(); ok {
		w.WriteHeader(status)
	}
	return engine.Result{Responded: true, HTTPStatus: status}
}

// Variants are the mode header's values (engine.Varier): explain shows one
// path for each when the request does not choose one.
func (n *Node) Variants(h http.Header) []engine.Variant {
	if first(h, n.cfg.mode, n.cfg.modeAlias) != "" {
		return nil
	}
	name := strings.ToLower(n.cfg.mode) // as the docs spell header names
	out := []engine.Variant{{Name: "no " + name + " header"}}
	for _, v := range []string{"passthrough", "enqueue", "wait"} {
		out = append(out, engine.Variant{Name: name + ": " + v, Header: http.Header{n.cfg.mode: {v}}})
	}
	return out
}

var (
	_ engine.Previewer = (*Node)(nil)
	_ engine.Varier    = (*Node)(nil)
)
