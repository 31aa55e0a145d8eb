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
	if m == modeWait && x.Run.Variant != MarkWaitCap {
		status = http.StatusOK // held until the dispatched run's result
	}
	if w, ok := x.Run.Answer(); ok {
		w.WriteHeader(status)
	}
	return engine.Result{Responded: true, HTTPStatus: status}
}

// MarkWaitCap is the explain variant (engine.Variant.Mark) of a wait whose
// run is still going at async.wait_cap: the client gets 202 and polls.
const MarkWaitCap = "async-wait-cap"

// Variants are the mode header's values (engine.Varier): explain shows one
// path for each when the request does not choose one, and a wait twice:
// answered within async.wait_cap (the result) and past it (202).
func (n *Node) Variants(h http.Header) []engine.Variant {
	name := strings.ToLower(n.cfg.mode) // as the docs spell header names
	capped := engine.Variant{Name: name + ": wait, still running at async.wait_cap", Header: http.Header{n.cfg.mode: {"wait"}}, Mark: MarkWaitCap}
	switch m := first(h, n.cfg.mode, n.cfg.modeAlias); {
	case strings.EqualFold(m, "wait"):
		return []engine.Variant{{Name: name + ": wait, answered within async.wait_cap"}, {Name: capped.Name, Mark: MarkWaitCap}}
	case m != "":
		return nil
	}
	out := []engine.Variant{{Name: "no " + name + " header"}}
	for _, v := range []string{"passthrough", "enqueue", "wait"} {
		out = append(out, engine.Variant{Name: name + ": " + v, Header: http.Header{n.cfg.mode: {v}}})
	}
	return append(out, capped)
}

var (
	_ engine.Previewer = (*Node)(nil)
	_ engine.Varier    = (*Node)(nil)
)
