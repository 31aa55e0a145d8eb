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
// tolerated, are passed with their Err set).
func (rs *run) fanOut(ctx context.Context, n *cnode, x *Exec, items []any) (Result, []Outcome) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]Result, len(items))
	outs := make([]Outcome, len(items))
	sem := make(chan struct{}, max(1, n.maxParallel))
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		failures int
		first    = -1 // first failed item, in time
	)
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
			start := time.Now()
			ictx, sp := rs.startSpan(ctx, n, k, start)
			ix := &Exec{Run: x.Run, NodeID: x.NodeID, Attempt: x.Attempt, Index: k, Item: items[k], Span: sp}
			res := safeRun(ictx, n.node, ix)
			o := &outs[k]
			o.Start, o.Duration, o.HTTPStatus, o.Header, o.Outputs = start, time.Since(start), res.HTTPStatus, res.Header, res.Outputs
			results[k] = res
			if res.Err == nil {
				o.Status = StatusSucceeded
			} else {
				e := wrap(AsError(res.Err), n.id, k)
				if e.Item < 0 {
					c := *e
					c.Item = k
					e = &c
				}
				res.Err, results[k].Err = e, e
				o.Err, o.Reason = e, e.Msg
				o.Status = StatusFailed
				if ctx.Err() != nil && e.Kind == KindCancelled {
					o.Status = StatusCancelled
				}
				mu.Lock()
				failures++
				if first < 0 && o.Status == StatusFailed {
					first = k
				}
				if failures > n.tolerate {
					cancel()
				}
				mu.Unlock()
			}
			endSpan(sp, o, res.Attrs)
		}(k)
	}
	wg.Wait()
	if failures > n.tolerate {
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

func safeMerge(ctx context.Context, m Merger, x *Exec, results []Result) (res Result) {
	defer func() {
		if r := recover(); r != nil {
			res = Result{Err: &Error{Kind: KindInternal, Item: -1, Msg: "internal error", Cause: panicErr(r)}}
		}
	}()
	return m.Merge(ctx, x, results)
}
