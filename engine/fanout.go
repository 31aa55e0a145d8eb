package engine

import (
	"context"
	"sync"
	"time"
)

// fanOut runs a node once per item, at most maxParallel at a time, each
// item in its own child span. The first failure beyond `tolerate` cancels
// the items still running or waiting. Item results stay in input order;
// when every item is accounted for, a Merger merges them (failed items, if
// tolerated, are passed with their Err set). A single item runs on the
// caller's goroutine: nothing could run beside it.
func (rs *run) fanOut(ctx context.Context, n *cnode, x *Exec, items []any) (Result, []Outcome) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &fan{rs: rs, n: n, x: x, items: items, ctx: ctx, cancel: cancel, first: -1,
		results: make([]Result, len(items)), outs: make([]Outcome, len(items))}
	outs := f.outs
	if len(items) == 1 {
		outs[0] = Outcome{Node: n.id, Type: n.typ, Attempt: x.Attempt}
		if ctx.Err() != nil {
			outs[0].Status, outs[0].Reason = StatusCancelled, "cancelled before it started"
		} else {
			f.item(0)
		}
	} else {
		sem := make(chan struct{}, max(1, n.maxParallel))
		var wg sync.WaitGroup
		for k := range items {
			outs[k] = Outcome{Node: n.id, Type: n.typ, Attempt: x.Attempt}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				outs[k].Status, outs[k].Reason = StatusCancelled, "cancelled before it started"
				continue
			}
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				defer func() { <-sem }()
				f.item(k)
			}(k)
		}
		wg.Wait()
	}
	results, first := f.results, f.first
	if f.failures > n.tolerate {
		if first < 0 {
			for k := range outs {
				if outs[k].Err != nil {
					first = k
					break
				}
			}
		}
		if first < 0 {
			return Result{Err: AsError(ctx.Err())}, outs
		}
		return Result{Err: results[first].Err, HTTPStatus: results[first].HTTPStatus, Header: results[first].Header}, outs
	}
	if n.merger != nil {
		return safeMerge(ctx, n.merger, x, results), outs
	}
	return Result{}, outs
}

// fan is one attempt's fan-out: the items write their own slots of
// results and outs; the failure count is shared under mu.
type fan struct {
	rs      *run
	n       *cnode
	x       *Exec
	items   []any
	ctx     context.Context
	cancel  context.CancelFunc
	results []Result
	outs    []Outcome

	mu       sync.Mutex
	failures int
	first    int // first failed item, in time; -1 for none
}

// item runs item k in its own span and records its outcome.
func (f *fan) item(k int) {
	n, x := f.n, f.x
	start := time.Now()
	ictx, sp := f.rs.startSpan(f.ctx, n, k, start)
	ix := &Exec{Run: x.Run, NodeID: x.NodeID, Attempt: x.Attempt, Index: k, Item: f.items[k], Span: sp, Target: x.Target}
	res := safeRun(ictx, n.node, ix)
	o := &f.outs[k]
	o.Start, o.Duration, o.HTTPStatus, o.Header, o.Outputs = start, time.Since(start), res.HTTPStatus, res.Header, res.Outputs
	f.results[k] = res
	if res.Err == nil {
		o.Status = StatusSucceeded
	} else {
		e := wrap(asError(res.Err), n.id, k)
		if e.Item < 0 {
			c := *e
			c.Item = k
			e = &c
		}
		res.Err, f.results[k].Err = e, e
		o.Err, o.Reason = e, e.Msg
		o.Status = StatusFailed
		if f.ctx.Err() != nil && e.Kind == KindCancelled {
			o.Status = StatusCancelled
		}
		f.mu.Lock()
		f.failures++
		if f.first < 0 && o.Status == StatusFailed {
			f.first = k
		}
		if f.failures > n.tolerate {
			f.cancel()
		}
		f.mu.Unlock()
	}
	endSpan(sp, o, res.Attrs)
}

func safeMerge(ctx context.Context, m Merger, x *Exec, results []Result) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			res = Result{Err: &Error{Kind: KindInternal, Item: -1, Msg: "internal error", Cause: panicErr(r)}}
		}
	}()
	return m.Merge(ctx, x, results)
}
