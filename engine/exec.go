package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"cel.dev/cel-go/common/types"

	"github.com/celflow/celflow/engine/celenv"
)

// launch starts attempt number (prev+1) of node i, after delay. The node
// runs inline when nothing else can run meanwhile (no goroutine, no
// cancel func), else on its own goroutine.
func (rs *run) launch(i int, items []any, delay time.Duration) {
	n := rs.w.nodes[i]
	o := &rs.out[i]
	x := &rs.execs[i]
	if x.Attempt == 0 {
		// x is zero (a fresh or cleared scratch): set what differs.
		x.Run, x.NodeID, x.Index, x.Span, x.rs = rs.r, n.id, -1, noopSpan, rs
		ctx := rs.ctx
		if rs.tracer != nil {
			var sp = noopSpan
			ctx, sp = rs.startSpan(ctx, n, -1, o.Start)
			if n.when != nil {
				sp.SetAttributes(AttrGuard.Bool(true))
			}
			rs.spans[i], x.Span = sp, sp
		}
		rs.setCtx(i, ctx)
	}
	x.Attempt++
	rs.running++
	inline := delay == 0 && rs.running == 1 && len(rs.ready) == 0
	if inline {
		// Nothing ran between the decision and now: the attempt starts at
		// the node's recorded start, so it costs one clock read, at its end.
		var c completion
		rs.execute(&c, i, rs.nodeCtx(i), items, o.Start)
		rs.complete(&c)
		return
	}
	if rs.done == nil {
		rs.done = make(chan completion, len(rs.w.nodes))
	}
	if rs.cancels == nil {
		rs.cancels = make([]context.CancelFunc, len(rs.w.nodes))
	}
	ctx := rs.nodeCtx(i)
	if rs.cancels[i] == nil {
		ctx, rs.cancels[i] = context.WithCancel(ctx)
		rs.setCtx(i, ctx)
	}
	go func() {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		var c completion
		rs.execute(&c, i, ctx, items, time.Time{})
		rs.done <- c
	}()
}

// Node contexts live beside the Exec so that retries reuse them; the
// client's context is used directly until a node needs its own.
func (rs *run) setCtx(i int, ctx context.Context) { rs.execs[i].ctx = ctx }
func (rs *run) nodeCtx(i int) context.Context     { return rs.execs[i].ctx }

// execute runs one attempt (every item, for a fan-out) under the node's
// timeout, clipped to the request deadline, and classifies the result. It
// runs on the node's goroutine and touches only its own Exec. start is
// when the attempt began, zero to read the clock. It fills c (zero).
func (rs *run) execute(c *completion, i int, ctx context.Context, items []any, start time.Time) {
	n := rs.w.nodes[i]
	x := &rs.execs[i]
	if start.IsZero() {
		start = time.Now()
	}
	c.i, c.start = i, start
	if err := ctx.Err(); err != nil {
		c.status, c.err, c.reason = rs.cancelled(err)
		return
	}
	timeout := n.timeout
	if t := x.Target; t != nil && t.Timeout != nil {
		timeout = *t.Timeout // the chosen target rule's (per model, per rule)
	}
	actx, cancel, clipped := rs.attemptCtx(ctx, timeout, start)
	if items != nil {
		c.res, c.items = rs.fanOut(actx, n, x, items)
	} else {
		c.res = safeRun(actx, n.node, x)
	}
	if cancel != nil {
		cancel()
	}
	c.dur = time.Since(c.start)
	c.status, c.err, c.reason = rs.classify(ctx, actx, n, &c.res, clipped, timeout)
}

// attemptCtx applies the node timeout, clipped to the request deadline. A
// clipped timer that fires is the request deadline (504 deadline_exceeded).
func (rs *run) attemptCtx(ctx context.Context, t time.Duration, now time.Time) (context.Context, context.CancelFunc, bool) {
	dl := rs.r.Deadline
	switch {
	case t > 0 && (dl.IsZero() || dl.Sub(now) >= t):
		c, cancel := context.WithTimeout(ctx, t)
		return c, cancel, false
	case !dl.IsZero():
		c, cancel := context.WithDeadline(ctx, dl)
		return c, cancel, true
	}
	return ctx, nil, false
}

// classify turns a node's Result into an outcome status and a typed error
// wrapped once with the node id.
func (rs *run) classify(ctx, actx context.Context, n *cnode, res *Result, clipped bool, timeout time.Duration) (Status, *Error, string) {
	if res.Err == nil {
		return StatusSucceeded, nil, ""
	}
	if rs.r.Ctx != nil && rs.r.Ctx.Err() != nil {
		return rs.cancelled(rs.r.Ctx.Err())
	}
	if ctx.Err() != nil { // cancelled by the scheduler: the run ended or failed elsewhere
		return StatusCancelled, wrap(AsError(context.Canceled), n.id, -1), "cancelled"
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		if clipped {
			e := &Error{Kind: KindDeadline, Node: n.id, Item: -1, Msg: "request deadline exceeded", Cause: res.Err}
			return StatusTimedOut, e, "request deadline exceeded"
		}
		e := &Error{Kind: KindUpstreamTimeout, Node: n.id, Item: -1, Msg: "timed out after " + timeout.String(), Cause: res.Err}
		return StatusTimedOut, e, e.Msg
	}
	e := wrap(asError(res.Err), n.id, -1)
	if e.Kind == KindUpstreamTimeout || e.Kind == KindDeadline {
		return StatusTimedOut, e, e.Msg
	}
	return StatusFailed, e, e.Msg
}

func (rs *run) cancelled(err error) (Status, *Error, string) {
	e := AsError(err)
	if e.Kind == KindDeadline {
		return StatusTimedOut, e, "request deadline exceeded"
	}
	return StatusCancelled, e, "client disconnected"
}

// asError is AsError with a fast path for the common case, a node that
// returns an *Error itself (errors.As would find the same value).
func asError(err error) *Error {
	if e, ok := err.(*Error); ok && e != nil {
		return e
	}
	return AsError(err)
}

// wrap fills the node id (and item) of an error that has none, once; the
// node's own error value is copied, not modified.
func wrap(e *Error, node string, item int) *Error {
	if e.Node != "" {
		return e
	}
	c := *e
	c.Node, c.Item = node, item
	return &c
}

// safeRun calls a node, turning a panic into an internal error (500).
func safeRun(ctx context.Context, nd Node, x *Exec) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			res = Result{Err: &Error{Kind: KindInternal, Item: -1, Msg: "internal error", Cause: panicErr(r)}}
		}
	}()
	return nd.Run(ctx, x)
}

func panicErr(r any) error { return fmt.Errorf("panic: %v\n%s", r, debug.Stack()) }

// complete records one attempt's completion, on the scheduler goroutine:
// retry, end the run, fail it, or propagate.
func (rs *run) complete(c *completion) {
	rs.running--
	i := c.i
	o := &rs.out[i]
	o.Status, o.Err, o.Reason = c.status, c.err, c.reason
	o.HTTPStatus, o.Header, o.Outputs, o.Items = c.res.HTTPStatus, c.res.Header, c.res.Outputs, c.items
	o.Failovers = c.res.Failovers
	o.Attempt = rs.execs[i].Attempt
	if o.Attempt == 1 && rs.tracer == nil {
		o.Start = c.start
	}
	rs.last = c.start.Add(c.dur)
	o.Duration = rs.last.Sub(o.Start)
	o.Responded = c.res.Responded
	rs.syncState(i)
	if h := &rs.hot[i]; h.media || h.tokens {
		if h.media {
			rs.act.MediaChanged()
		}
		if h.tokens {
			rs.refreshTokens()
		}
	}
	if c.res.Responded {
		rs.answered, rs.ended = true, true
		if c.err != nil && rs.err == nil {
			rs.err = c.err // failed after answering: the front aborts the reply
		}
		rs.decideRunning(i, c.res.Attrs)
		rs.stop(true)
		return
	}
	if (c.status == StatusFailed || c.status == StatusTimedOut) && rs.retry(i, c) {
		return
	}
	// Whether an edge handles a failure is decided before the span ends, so
	// a routed failure (the 412 of a prefix miss) is not an error in traces.
	handled := false
	if (c.status == StatusFailed || c.status == StatusTimedOut) && !rs.stopped {
		handled = rs.handled(i)
		o.Handled = handled
	}
	rs.decideRunning(i, c.res.Attrs)
	switch c.status {
	case StatusCancelled:
		if c.err != nil && c.err.Kind == KindCancelled && rs.r.Ctx != nil && rs.r.Ctx.Err() != nil {
			rs.fail(c.err)
		}
		return
	case StatusFailed, StatusTimedOut:
		if rs.stopped {
			return
		}
		if !handled {
			rs.fail(c.err)
			return
		}
		if o.Reason == "" {
			o.Reason = "handled by an outgoing edge"
		} else {
			o.Reason += " (handled by an outgoing edge)"
		}
		rs.act.Nodes.States[i].Reason = o.Reason
	}
	if !rs.stopped {
		rs.propagate(i)
	}
}

func (rs *run) decideRunning(i int, attrs map[string]any) {
	rs.decided[i] = true
	if rs.tracer != nil && rs.spans[i] != nil {
		endSpan(rs.spans[i], &rs.out[i], attrs)
	}
}

// handled reports whether some outgoing conditional edge matches the
// failure of node i; such a failure does not fail the run.
func (rs *run) handled(i int) bool {
	for _, ref := range rs.w.succ[i] {
		e := &rs.w.nodes[ref.to].needs[ref.k]
		if e.cond == nil {
			continue
		}
		ok := rs.cond(i, e, ref.to)
		if rs.stopped {
			return false
		}
		if rs.edges[e.gidx].memo {
			rs.memo[e.gidx] = memoFalse
			if ok {
				rs.memo[e.gidx] = memoTrue
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// retry decides and schedules another attempt. Never after the node (or
// anyone) began answering the client, never when the client left or the
// request deadline passed, and only while the predicate holds (by default:
// timeouts, 5xx and transport failures).
func (rs *run) retry(i int, c *completion) bool {
	n := rs.w.nodes[i]
	p := n.retry
	if rs.stopped || rs.execs[i].Attempt >= p.attempts || rs.r.Answered() || c.err == nil {
		return false
	}
	if c.err.Kind == KindDeadline || c.err.Kind == KindCancelled {
		return false
	}
	if p.cond != nil {
		rs.act.Outcome = &rs.act.Nodes.States[i]
		ok, err := p.cond.Bool(rs.act)
		rs.act.Outcome = nil
		if err != nil {
			// safe: no retry (the attempt's own failure stands); fail: a 500.
			if !rs.celError(i, "retry.if", err) {
				return false
			}
			rs.decideRunning(i, nil)
			rs.fail(&Error{Kind: KindInternal, Node: n.id, Item: -1,
				Msg:   "the retry rule (retry.if) of this node failed at run time (the server log has the error)",
				Cause: fmt.Errorf("retry.if %s: %w", p.cond.Src, err)})
			return true
		}
		if !ok {
			return false
		}
	} else if !retryable(c.err) {
		return false
	}
	d := backoff(p, rs.execs[i].Attempt)
	if !rs.r.Deadline.IsZero() && time.Now().Add(d).After(rs.r.Deadline) {
		return false
	}
	var items []any
	if n.foreach != nil {
		items, _ = rs.items(i, n)
	}
	rs.noteRetry(i, c, d)
	rs.launch(i, items, max(d, time.Nanosecond))
	return true
}

func retryable(e *Error) bool {
	switch e.Kind {
	case KindBadGateway, KindUpstreamTimeout, KindUpstreamUnavailable:
		return true // a 503 is retried too: another endpoint may have room (docs/errors.md)
	case KindUpstreamRejected:
		return e.Status >= 500
	}
	return false
}

// backoff is the wait before attempt number done+1: backoff·2^(done-1),
// capped at max_backoff. With jitter it is "equal jitter": half the delay
// plus a uniform draw over the other half (d/2 + rand[0, d/2]), so a retry
// never comes sooner than half the nominal wait (full jitter would draw
// over all of [0, d]).
func backoff(p retryPolicy, done int) time.Duration {
	d := p.backoff
	for k := 1; k < done && d < p.maxBackoff; k++ {
		d *= 2
	}
	if p.maxBackoff > 0 && d > p.maxBackoff {
		d = p.maxBackoff
	}
	if p.jitter && d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// items evaluates a node's foreach list into Go values: media elements
// become the run's engine.MediaItem (Exec.Item), others their CEL value.
func (rs *run) items(i int, n *cnode) ([]any, error) {
	if rs.hot[i].allMedia {
		if out, ok := rs.allMedia(); ok {
			return out, nil
		}
	}
	l, err := n.foreach.List(rs.act)
	if err != nil {
		return nil, err
	}
	size := int(l.Size().(types.Int))
	out := make([]any, 0, size)
	for k := 0; k < size; k++ {
		v := l.Get(types.Int(k)).Value()
		if m, ok := v.(*celenv.Media); ok && int(m.Index) < len(rs.r.State.Media) {
			v = rs.r.State.Media[m.Index]
		}
		out = append(out, v)
	}
	return out, nil
}

// allMedia is `foreach: media` without CEL: what items returns for it when
// every item's Index is a position in the run's list (else ok is false and
// the list is evaluated).
func (rs *run) allMedia() (out []any, ok bool) {
	media := rs.r.State.Media
	for k := range media {
		if j := media[k].Index; j < 0 || j >= len(media) {
			return nil, false
		}
	}
	out = make([]any, 0, len(media))
	for k := range media {
		out = append(out, media[media[k].Index])
	}
	return out, true
}
