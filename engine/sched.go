package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/celflow/celflow/engine/celenv"
)

// run is one request's walk. Everything in it is owned by the goroutine
// that called Serve: node goroutines only send completions back, so CEL is
// evaluated and outcomes are written by one goroutine, with no locks.
type run struct {
	w   *Workflow
	r   *Run
	ctx context.Context
	act *celenv.Activation
	sc  *scratch

	out     []Outcome
	pending []int32 // per node: needs not yet decided
	decided []bool
	fired   []bool // per edge (cedge.gidx)
	ready   []int  // nodes whose needs are all decided, ascending
	execs   []Exec
	spans   []trace.Span
	cancels []context.CancelFunc

	running  int
	done     chan completion // created when a node first runs on its own goroutine
	stopped  bool            // nothing more starts: ended, failed or cancelled
	ended    bool            // a node answered the client
	answered bool
	err      *Error

	tracer trace.Tracer
	start  time.Time
	last   time.Time // the latest clock reading of the walk

	hot   []hotNode
	edges []hotEdge
	memo  []uint8 // per edge: a condition value kept for propagate (memoTrue, memoFalse)
	route int     // the request's slot in hotNode.guard
}

const (
	memoTrue  = 1
	memoFalse = 2
)

// completion is what one attempt of a node reports back.
type completion struct {
	i      int
	res    Result
	status Status
	err    *Error
	reason string
	start  time.Time
	dur    time.Duration
	items  []Outcome
}

// Serve walks the workflow for one request (Runner). It returns when the run
// is decided: nodes that survive the end of the run (Contract.SurvivesEnd)
// may still be running, on the client's context.
func (w *Workflow) Serve(r *Run) *Report {
	rs := w.newRun(r)
	rs.walk()
	rep := rs.report()
	rs.putScratch()
	return rep
}

// scratch is the per-run state that does not outlive Serve, the run
// itself included; it is pooled per workflow. The outcomes do outlive it
// (they are the Report).
type scratch struct {
	rs      run
	act     *celenv.Activation
	pending []int32
	decided []bool
	fired   []bool
	memo    []uint8
	ready   []int
	execs   []Exec
	spans   []trace.Span
	hot     []hotNode
	edges   []hotEdge
}

func (w *Workflow) getScratch() *scratch {
	if sc, ok := w.pool.Get().(*scratch); ok {
		return sc
	}
	n := len(w.nodes)
	sc := &scratch{act: w.env.NewActivation(n), pending: make([]int32, n), decided: make([]bool, n),
		fired: make([]bool, w.nedge), memo: make([]uint8, w.nedge), ready: make([]int, 0, n),
		execs: make([]Exec, n), spans: make([]trace.Span, n)}
	sc.hot, sc.edges = w.hotTables()
	return sc
}

// putScratch returns a run's scratch when nothing can touch it any more:
// no node goroutine is left (a survivor of the end still holds its Exec).
func (rs *run) putScratch() {
	for i := range rs.execs {
		if rs.execs[i].Attempt > 0 && !rs.decided[i] {
			return
		}
	}
	sc := rs.sc
	sc.act.Reset()
	clear(sc.decided)
	clear(sc.fired)
	clear(sc.memo)
	clear(sc.execs)
	if rs.tracer != nil {
		clear(sc.spans)
	}
	sc.ready = sc.ready[:0]
	w := rs.w
	sc.rs = run{}
	w.pool.Put(sc)
}

func (w *Workflow) newRun(r *Run) *run {
	now := time.Now()
	sc := w.getScratch()
	rs := &sc.rs
	rs.w, rs.r, rs.ctx, rs.start, rs.last = w, r, r.Ctx, now, now
	if rs.ctx == nil {
		rs.ctx = context.Background()
	}
	if w.requestTimeout > 0 && r.Deadline.IsZero() {
		r.Deadline = rs.start.Add(w.requestTimeout)
	}
	rs.tracer, _ = tracer()
	rs.sc, rs.act, rs.pending, rs.decided, rs.fired, rs.ready, rs.execs = sc, sc.act, sc.pending, sc.decided, sc.fired, sc.ready, sc.execs
	rs.hot, rs.edges, rs.memo = sc.hot, sc.edges, sc.memo
	if rs.tracer != nil {
		rs.spans = sc.spans
	}
	rs.out = make([]Outcome, len(w.nodes))
	rs.act.Media = r
	if req := r.Req; req != nil {
		rs.act.Request = celRequest(req)
		if int(req.Route) < len(hotNode{}.guard) {
			rs.route = int(req.Route)
		}
	}
	rs.refreshTokens()
	for i, nd := range w.nodes {
		rs.out[i].Node, rs.out[i].Type = nd.id, nd.typ // the rest is zero already
		rs.pending[i] = int32(len(nd.needs))
		if len(nd.needs) == 0 {
			rs.ready = append(rs.ready, i)
		}
	}
	return rs
}

func (rs *run) refreshTokens() {
	rs.act.Tokens = celTokens(&rs.r.State.Tokens)
}

// celRequest, celTokens and celState are how a run's data reads in CEL:
// serve's activation and the load-time search (search.go) share them.
func celRequest(req *Request) celenv.Request {
	return celenv.Request{ID: req.ID, Format: req.Route.String(), Path: req.Route.Path(),
		Model: req.Model, Stream: req.Stream, Header: req.Header}
}

func celTokens(t *Tokens) celenv.Tokens {
	return celenv.Tokens{Known: t.Known, Count: int64(len(t.IDs))}
}

func celState(s *celenv.NodeState, o *Outcome) {
	s.Status, s.Reason, s.Duration, s.Attempt, s.Outputs = o.Status.String(), o.Reason, o.Duration, int64(o.Attempt), o.Outputs
	s.Response.Set(o.HTTPStatus, o.Header)
}

// CELMedia implements celenv.MediaSource over the run's items.
func (r *Run) CELMedia(dst []celenv.Media) []celenv.Media {
	for _, m := range r.State.Media {
		dst = append(dst, celenv.Media{Index: int64(m.Index), Modality: m.Modality, Type: m.Type,
			Size: int64(m.Size), Remote: m.Remote, Hash: m.Hash})
	}
	return dst
}

func (rs *run) walk() {
	if err := rs.ctx.Err(); err != nil {
		rs.fail(AsError(err)) // already cancelled: no node runs (docs/acceptance.md item 39)
	}
	for {
		for len(rs.ready) > 0 && !rs.stopped {
			i := rs.ready[0]
			rs.ready = rs.ready[1:]
			rs.decide(i)
		}
		if rs.running == 0 || (rs.ended && rs.onlySurvivors()) {
			break
		}
		c := <-rs.done
		rs.complete(&c)
	}
	rs.finish()
}

// onlySurvivors reports whether every node still running survives the end
// of the run; Serve then returns without waiting for them.
func (rs *run) onlySurvivors() bool {
	for i, x := range rs.execs {
		if x.Attempt > 0 && !rs.decided[i] && !rs.w.nodes[i].contract.SurvivesEnd {
			return false
		}
	}
	return true
}

// decide settles a node whose needs are all decided: omitted, skipped, or started.
func (rs *run) decide(i int) {
	if err := rs.ctx.Err(); err != nil {
		rs.fail(AsError(err))
		return
	}
	if !rs.r.Deadline.IsZero() {
		now := time.Now()
		if !now.Before(rs.r.Deadline) {
			rs.fail(&Error{Kind: KindDeadline, Node: rs.w.nodes[i].id, Item: -1, Msg: "request deadline exceeded before the node started"})
			return
		}
		rs.last = now // the clock was read anyway: the node starts now
	}
	n := rs.w.nodes[i]
	o := &rs.out[i]
	// A node that runs starts when its first attempt does (execute); one
	// that is settled here takes the time of the last event of the walk,
	// so deciding costs no clock read unless spans need one.
	o.Start = rs.last
	if rs.tracer != nil {
		o.Start = time.Now()
	}
	if len(n.needs) > 0 {
		nf := 0
		for _, e := range n.needs {
			if rs.fired[e.gidx] {
				nf++
			}
		}
		if nf == 0 || (nf < len(n.needs) && !n.joinAny) {
			reason := rs.hot[i].omitted
			if reason == "" {
				reason = rs.omitReason(n)
			}
			rs.settle(i, StatusOmitted, reason)
			return
		}
		o.Edge = rs.firedLabel(n, nf)
	}
	if n.when != nil {
		ok, err := rs.guard(i, n)
		if err != nil {
			// on_cel_error: fail makes it a 500 naming the node; safe (the
			// default) skips the node, as a false guard would.
			if rs.celError(i, "guard", err) {
				e := &Error{Kind: KindInternal, Node: n.id, Item: -1,
					Msg:   "the guard (when:) of this node failed at run time (the server log has the error)",
					Cause: fmt.Errorf("guard %s: %w", n.when.Src, err)}
				o.Err = e
				rs.settle(i, StatusFailed, "guard error: "+err.Error())
				rs.fail(e)
				return
			}
			rs.settle(i, StatusSkipped, "guard error, read as false (on_cel_error: safe)")
			return
		}
		if !ok {
			rs.settle(i, StatusSkipped, rs.hot[i].guardFalse)
			return
		}
	}
	var items []any
	if n.foreach != nil {
		var err error
		if items, err = rs.items(i, n); err != nil {
			e := &Error{Kind: KindInternal, Node: n.id, Item: -1, Msg: "foreach evaluation failed", Cause: err}
			o.Err = e
			rs.settle(i, StatusFailed, "foreach error: "+err.Error())
			rs.fail(e)
			return
		}
		if len(items) == 0 {
			rs.settle(i, StatusSkipped, "no items")
			return
		}
	}
	if n.targets != nil {
		t, err := rs.chooseTarget(i, n)
		if err != nil {
			e := &Error{Kind: KindInternal, Node: n.id, Item: -1,
				Msg: "a target rule of this node failed at run time (the server log has the error)", Cause: err}
			o.Err = e
			rs.settle(i, StatusFailed, "target error: "+err.Error())
			rs.fail(e)
			return
		}
		if t != nil {
			rs.execs[i].Target = t
			if t.Rule >= 0 {
				o.Target = t
			}
		}
	}
	rs.launch(i, items, 0)
}

// guard is node i's when: value, evaluated only when the route does not
// decide it already.
func (rs *run) guard(i int, n *cnode) (bool, error) {
	switch rs.hot[i].guard[rs.route] {
	case celenv.True:
		return true, nil
	case celenv.False:
		return false, nil
	}
	return n.when.Bool(rs.act)
}

func (rs *run) omitReason(n *cnode) string {
	var b strings.Builder
	b.WriteString("no incoming edge fired")
	if n.joinAny || len(n.needs) == 1 {
		b.WriteString(": ")
	} else {
		b.WriteString(" for join all: ")
	}
	first := true
	for _, e := range n.needs {
		if rs.fired[e.gidx] {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString(e.label)
	}
	return b.String()
}

func (rs *run) firedLabel(n *cnode, nf int) string {
	if nf == 1 || len(n.needs) == 1 {
		for _, e := range n.needs {
			if rs.fired[e.gidx] {
				return rs.edgeLabel(e)
			}
		}
	}
	var parts []string
	for _, e := range n.needs {
		if rs.fired[e.gidx] {
			parts = append(parts, rs.edgeLabel(e))
		}
	}
	return strings.Join(parts, ", ")
}

// edgeLabel names a fired edge. A skipped predecessor is transparent: its
// edges fire without their condition being evaluated, so the label says so
// instead of showing a condition that never ran.
func (rs *run) edgeLabel(e cedge) string {
	if e.hasIf && rs.out[e.from].Status == StatusSkipped {
		return rs.w.nodes[e.from].id + " (skipped: edge not evaluated)"
	}
	return e.label
}

// settle records a node decided without running (skipped, omitted) or
// after a run-time evaluation error, and propagates it.
func (rs *run) settle(i int, st Status, reason string) {
	o := &rs.out[i]
	o.Status, o.Reason = st, reason
	if o.Start.IsZero() {
		o.Start = time.Now()
	}
	rs.syncState(i)
	if rs.tracer != nil {
		_, sp := rs.startSpan(rs.ctx, rs.w.nodes[i], -1, o.Start)
		if rs.w.nodes[i].when != nil && st == StatusSkipped && strings.HasPrefix(reason, "guard false") {
			sp.SetAttributes(AttrGuard.Bool(false))
		}
		endSpan(sp, o, nil)
	}
	rs.decided[i] = true
	if st == StatusFailed {
		return // run-time evaluation errors end the run (fail was called)
	}
	rs.propagate(i)
}

// syncState copies a node's outcome into the CEL view (nodes.<id>, outcome).
func (rs *run) syncState(i int) {
	celState(&rs.act.Nodes.States[i], &rs.out[i])
}

// propagate fires or blocks each edge leaving a decided node. A skipped
// node is transparent (every edge fires, conditions unevaluated); a
// succeeded node fires unconditional edges and those whose condition holds;
// a failed or timed-out node fires only conditional edges that hold; an
// omitted or cancelled node fires nothing.
func (rs *run) propagate(i int) {
	st := rs.out[i].Status
	for _, ref := range rs.w.succ[i] {
		e := &rs.w.nodes[ref.to].needs[ref.k]
		fire := false
		switch st {
		case StatusSkipped:
			fire = true
		case StatusSucceeded:
			fire = e.cond == nil
			if !fire {
				fire = rs.cond(i, e, ref.to)
			}
		case StatusFailed, StatusTimedOut:
			if e.cond != nil {
				switch rs.memo[e.gidx] {
				case memoTrue:
					fire = true
				case memoFalse:
				default:
					fire = rs.cond(i, e, ref.to)
				}
			}
		}
		if rs.stopped && rs.err != nil {
			return
		}
		rs.fired[e.gidx] = fire
		if rs.pending[ref.to]--; rs.pending[ref.to] == 0 {
			rs.enqueue(ref.to)
		}
	}
}

// cond evaluates an edge condition about node i. An error is the policy's:
// the edge does not hold (safe), or the run fails (fail).
func (rs *run) cond(i int, e *cedge, to int) bool {
	rs.act.Outcome = &rs.act.Nodes.States[i]
	ok, err := e.cond.Bool(rs.act)
	rs.act.Outcome = nil
	if err != nil && !rs.celError(i, "edge:"+rs.w.nodes[i].id+"->"+rs.w.nodes[to].id, err) {
		return false
	}
	if err != nil {
		// The expression is the operator's, not the client's business: it
		// goes to the log (Cause, as written), the client learns which node.
		rs.fail(&Error{Kind: KindInternal, Node: rs.w.nodes[i].id, Item: -1,
			Msg:   "the condition of an edge out of this node failed at run time (the server log has the expression)",
			Cause: fmt.Errorf("edge condition %s: %w", e.cond.Src, err)})
		return false
	}
	return ok
}

func (rs *run) enqueue(i int) {
	k := len(rs.ready)
	rs.ready = append(rs.ready, i)
	for k > 0 && rs.ready[k-1] > i {
		rs.ready[k] = rs.ready[k-1]
		k--
	}
	rs.ready[k] = i
}

// fail stops the run with err (the first error wins) and cancels running nodes.
func (rs *run) fail(err *Error) {
	if rs.err == nil {
		rs.err = err
	}
	rs.stop(false)
}

// stop starts nothing more and cancels running nodes; at the end of a run
// (ended) nodes whose contract survives the end keep going.
func (rs *run) stop(ended bool) {
	rs.stopped = true
	for i, c := range rs.cancels {
		if c != nil && !(ended && rs.w.nodes[i].contract.SurvivesEnd) {
			c()
		}
	}
}

// finish records every node that never got decided.
func (rs *run) finish() {
	survivors := 0
	for i := range rs.out {
		o := &rs.out[i]
		if rs.decided[i] || o.Status != StatusPending {
			continue
		}
		if rs.execs[i].Attempt > 0 { // still running: it survives the end
			o.Reason = "still running: survives the end of the run"
			survivors++
			continue
		}
		switch {
		case rs.ended:
			o.Status, o.Reason = StatusSkipped, "ended"
		case rs.err != nil && rs.err.Kind == KindCancelled:
			o.Status, o.Reason = StatusCancelled, "client disconnected"
		case rs.err != nil:
			o.Status, o.Reason = StatusSkipped, "not run: the run failed"
		default:
			o.Status, o.Reason = StatusOmitted, "not reached"
		}
		if o.Start.IsZero() {
			o.Start = time.Now()
		}
		if rs.tracer != nil {
			_, sp := rs.startSpan(rs.ctx, rs.w.nodes[i], -1, o.Start)
			endSpan(sp, o, nil)
		}
	}
	if survivors > 0 && rs.tracer != nil {
		go rs.drainSurvivors(survivors)
	}
}

// drainSurvivors ends the spans of nodes that outlived the run, from their
// completions. It writes nothing the report shares.
func (rs *run) drainSurvivors(n int) {
	for ; n > 0; n-- {
		c := <-rs.done
		o := Outcome{Node: rs.w.nodes[c.i].id, Status: c.status, Reason: c.reason, Err: c.err,
			HTTPStatus: c.res.HTTPStatus, Start: rs.out[c.i].Start, Attempt: rs.execs[c.i].Attempt}
		o.Duration = c.start.Add(c.dur).Sub(o.Start)
		endSpan(rs.spans[c.i], &o, c.res.Attrs)
	}
}

func (rs *run) report() *Report {
	rep := &Report{Workflow: rs.w.name, Outcomes: rs.out, Err: rs.err, Answered: rs.answered, Duration: time.Since(rs.start)}
	if !rs.answered && rs.err == nil {
		rep.Err = &Error{Kind: KindInternal, Item: -1, Msg: "no node answered the client"}
	}
	return rep
}
