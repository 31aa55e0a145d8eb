package conditionaldecode

import (
	"context"
	"io"
	"net/http"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// missDrain bounds what is read of a 412 body (or of a cache_threshold
// reply) so its connection can be reused; the body itself is discarded.
const missDrain = 8 << 10

// Run sends the conditional leg. A 2xx is relayed (Responded); a 412 is the
// miss outcome (HTTPStatus 412, headers for edges, KindUpstreamRejected);
// in worker mode a 2xx whose first choice finished with "cache_threshold"
// is the same miss outcome; other answers fail as docs/errors.md says, for
// edges to route on.
func (n *ConditionalDecode) Run(ctx context.Context, x *engine.Exec) engine.Result {
	st := &x.Run.State
	route := x.Run.Req.Route
	// Worker mode needs cache_hit_threshold, which vLLM reads on chat and
	// completions only: generate keeps the predicted mode.
	worker := n.threshold != nil && route != engine.RouteGenerate
	t, res, ok := n.target(x, worker)
	if !ok {
		return res
	}
	var threshold []byte
	if worker {
		threshold = n.threshold
	}
	body, e := build(x, route, st.Body, st.Tokens, st.Media, threshold)
	if e != nil {
		t.Done(false)
		return leg.Fail(0, e)
	}
	res = engine.Result{Attrs: map[string]any{}}
	if n.client.Direct() && !worker {
		res.Attrs["celflow.predicted"] = "hit"
	}
	if worker {
		res.Attrs["celflow.cache_hit_threshold"] = string(n.threshold)
	}
	resp, _, e := leg.Call{Role: upstream.RoleDecode, Path: route.Path(), Body: body, TTFB: n.ttfb, Bounds: n.body, Target: t, Any: true,
		Prepare: func(l *upstream.Leg) {
			l.Prefer, l.Relay = true, true
			if worker {
				// Worker mode reads the reply's finish reason before relaying
				// it: the client's Accept-Encoding is not forwarded, so the
				// worker answers uncompressed (identity) and the client gets
				// it so.
				l.Header = withoutAcceptEncoding(l.Header)
			}
			// upstream leaves a relayed 2xx unbounded; in worker mode (Probe)
			// it bounds one until the verdict, and a hit lifts the bounds
			// (judge).
			l.Probe = worker
		}}.Send(ctx, x, n.client, &res)
	if e != nil {
		res.Err = e
		return res
	}
	switch code := resp.StatusCode; {
	case code == http.StatusPreconditionFailed:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, missDrain))
		resp.Body.Close()
		res.Header, res.Err = resp.Header, miss()
		return res
	case code < 200 || code > 299:
		res.Header, res.Err = resp.Header, leg.Reject(x, resp)
		return res
	}
	if worker {
		switch v, e := n.judge(ctx, resp); {
		case e != nil:
			resp.Body.Close()
			res.Err = e
			return res
		case v == verdictMiss:
			// Not drained: a JSON miss was read whole already, and the
			// rest of an SSE miss is unbounded (a relay leg's 2xx); closing
			// costs that connection at most.
			resp.Body.Close()
			// The miss edges already route on: status 412.
			res.HTTPStatus, res.Header, res.Err = http.StatusPreconditionFailed, resp.Header, thresholdMiss()
			res.Attrs["celflow.miss"] = "cache_threshold"
			return res
		}
	}
	r := leg.Relay(x, resp, n.idle, n.writeTimeout)
	for k, v := range r.Attrs {
		res.Attrs[k] = v
	}
	res.Responded, res.Err = r.Responded, r.Err
	return res
}

// target picks where the leg goes. Predicted mode in direct mode: celflow
// plays the endpoint picker, and a predicted miss is the 412 outcome with
// no call (ok false, res the outcome). Worker mode always sends: to an
// endpoint the prefix index predicts a hit on when there is one (the best
// chance of a cached prefix), else to the next endpoint in rotation.
func (n *ConditionalDecode) target(x *engine.Exec, worker bool) (*upstream.Target, engine.Result, bool) {
	if n.client.Direct() {
		st := &x.Run.State
		var ids []int64
		if st.Tokens.Known {
			ids = st.Tokens.IDs
		}
		if t, hit := leg.PredictHit(x, n.client, ids); hit {
			return t, engine.Result{}, true
		}
		if !worker {
			return nil, engine.Result{
				HTTPStatus: http.StatusPreconditionFailed,
				Err:        miss(),
				Attrs:      map[string]any{"celflow.predicted": "miss"},
			}, false
		}
	}
	t, e := leg.PickFor(x, n.client, upstream.RoleDecode)
	if e != nil {
		return nil, leg.Fail(0, e), false
	}
	return t, engine.Result{}, true
}

// withoutAcceptEncoding is h without Accept-Encoding: h itself when it has
// none, else a shallow copy (the client's header map is shared by legs).
func withoutAcceptEncoding(h http.Header) http.Header {
	if _, ok := h["Accept-Encoding"]; !ok {
		return h
	}
	c := make(http.Header, len(h))
	for k, v := range h {
		if k != "Accept-Encoding" {
			c[k] = v
		}
	}
	return c
}

// miss is the 412 outcome's error: edges route on response.status == 412;
// with no matching edge the client gets 412 with celflow's JSON error.
func miss() *engine.Error {
	return &engine.Error{Kind: engine.KindUpstreamRejected, Item: -1, Status: http.StatusPreconditionFailed,
		Msg: "rejected the request: HTTP 412 (cache miss)"}
}

// thresholdMiss is the worker-decided miss: the same 412 outcome as miss,
// so existing edges (response.status == 412) take the full path.
func thresholdMiss() *engine.Error {
	return &engine.Error{Kind: engine.KindUpstreamRejected, Item: -1, Status: http.StatusPreconditionFailed,
		Msg: "rejected the request: HTTP 412 (cache miss: the worker answered finish_reason cache_threshold)"}
}
