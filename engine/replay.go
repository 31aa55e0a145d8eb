package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Replays: a node that already answered the client (decode) and lost its
// worker mid-reply may continue the reply elsewhere. To do so through the
// workflow's own path it asks the engine to run again, once, the node of
// this run that provided some data it needs (prefill, which provided the KV
// hand-off), for the same request or for a replacement request (the
// continuation: the prompt followed by the tokens already generated). The
// node's own code builds and sends that leg; the caller only chooses the
// run it works on.

// Failover is one replay a node made after its leg broke, for metrics
// (celflow_failovers_total{node,reason,outcome}), the summary line and
// spans. Reason is what broke (a closed vocabulary of the node type's);
// Outcome what came of it ("continued", "failed", "refused_*", ...).
type Failover struct {
	Reason, Outcome string
	// Stall is the time from the break to the continuation's first byte
	// (0 when it never came).
	Stall time.Duration
}

// Rerun runs once more the node of this run that succeeded providing key k
// (the first such node in declaration order; fan-out nodes are not
// re-run), on run r: x.Run itself to repeat the node's work for the same
// request, or a replacement run for a changed request (NewRun; its State
// holds what the node reads). The re-run is an attempt after the node's
// last one, so a node that picks its endpoint with leg.PickFor avoids the
// endpoints its earlier attempts on r used. It runs under the node's own
// timeout clipped to the request deadline and ctx, in a span of its own
// (a child of ctx's, linked to the node's original span). ok is false when
// no such node ran (nothing to re-run); node is its id.
//
// Only a running node may call Rerun, from its own goroutine, before its
// Run returns; the data the re-run provides lands on r.
func (x *Exec) Rerun(ctx context.Context, k AnyKey, r *Run) (res Result, node string, ok bool) {
	rs := x.rs
	if rs == nil || r == nil {
		return Result{}, "", false
	}
	j := -1
	for i, n := range rs.w.nodes {
		// out[i] and execs[i] of a node that succeeded before x's node was
		// launched are no longer written by the scheduler: reading them
		// here races with nothing.
		if n.foreach == nil && rs.out[i].Status == StatusSucceeded && hasKey(n.contract.Provides, k) {
			j = i
			break
		}
	}
	if j < 0 {
		return Result{}, "", false
	}
	n := rs.w.nodes[j]
	orig := &rs.execs[j]
	nx := &Exec{Run: r, NodeID: n.id, Attempt: orig.Attempt + 1, Index: -1, Span: noopSpan, Target: orig.Target, rs: rs}
	start := time.Now()
	if rs.tracer != nil {
		var link []trace.Link
		if sp := rs.spans[j]; sp != nil {
			link = append(link, trace.Link{SpanContext: sp.SpanContext()})
		}
		var sp trace.Span
		ctx, sp = rs.tracer.Start(ctx, n.id+" (replay)", trace.WithTimestamp(start), trace.WithLinks(link...),
			trace.WithAttributes(AttrWorkflowName.String(rs.w.name), AttrNodeID.String(n.id), AttrNodeType.String(n.typ),
				AttrAttempt.Int(nx.Attempt)))
		nx.Span = sp
		defer func() {
			o := Outcome{Node: n.id, Status: StatusSucceeded, HTTPStatus: res.HTTPStatus, Start: start, Duration: time.Since(start), Attempt: nx.Attempt}
			if res.Err != nil {
				o.Status, o.Err = StatusFailed, asError(res.Err)
			}
			endSpan(sp, &o, res.Attrs)
		}()
	}
	actx, cancel, _ := rs.attemptCtx(ctx, n.timeout, start)
	if cancel != nil {
		defer cancel()
	}
	res = safeRun(actx, n.node, nx)
	if res.Err != nil {
		res.Err = wrap(asError(res.Err), n.id, -1)
	}
	return res, n.id, true
}
