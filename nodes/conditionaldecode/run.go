package conditionaldecode

import (
	"context"
	"io"
	"net/http"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/upstream"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// missDrain bounds what is read of a 412 body so its connection can be
// reused; the body itself is discarded.
const missDrain = 8 << 10

// Run sends the conditional leg. A 2xx is relayed (Responded); a 412 is the
// miss outcome (HTTPStatus 412, headers for edges, KindUpstreamRejected);
// other answers fail as PROTOCOL 12 says, for edges to route on.
func (n *ConditionalDecode) Run(ctx context.Context, x *engine.Exec) engine.Result {
	st := &x.Run.State
	var t *upstream.Target
	if n.client.Direct() {
		// celflow plays the endpoint picker: a predicted miss costs no call.
		var ids []int64
		if st.Tokens.Known {
			ids = st.Tokens.IDs
		}
		hit := false
		if t, hit = n.client.PredictHit(ids); !hit {
			return engine.Result{
				HTTPStatus: http.StatusPreconditionFailed,
				Err:        miss(),
				Attrs:      map[string]any{"celflow.predicted": "miss"},
			}
		}
	} else {
		var e *engine.Error
		if t, e = leg.PickFor(x, n.client, upstream.RoleDecode); e != nil {
			return leg.Fail(0, e)
		}
	}
	body, e := build(x, x.Run.Req.Route, st.Body, st.Tokens, st.Media)
	if e != nil {
		t.Done(false)
		return leg.Fail(0, e)
	}
	l := leg.NewLeg(x, upstream.RoleDecode, x.Run.Req.Route.Path(), body, n.ttfb)
	l.Prefer, l.Relay = true, true
	n.body.Apply(l) // upstream leaves a relayed 2xx unbounded
	res := engine.Result{Attrs: leg.Attrs(t, l)}
	if n.client.Direct() {
		res.Attrs["celflow.predicted"] = "hit"
	}
	resp, e := leg.Do(ctx, x, n.client, t.Base, l)
	t.Done(leg.Failed(resp, e))
	if e != nil {
		res.Err = e
		return res
	}
	res.HTTPStatus = resp.StatusCode
	res.Attrs["http.response.status_code"] = resp.StatusCode
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
	r := leg.Relay(x, resp, n.idle, n.writeTimeout)
	for k, v := range r.Attrs {
		res.Attrs[k] = v
	}
	res.Responded, res.Err = r.Responded, r.Err
	return res
}

// miss is the 412 outcome's error: edges route on response.status == 412;
// with no matching edge the client gets 412 with celflow's JSON error.
func miss() *engine.Error {
	return &engine.Error{Kind: engine.KindUpstreamRejected, Item: -1, Status: http.StatusPreconditionFailed,
		Msg: "rejected the request: HTTP 412 (cache miss)"}
}
