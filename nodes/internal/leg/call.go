package leg

import (
	"context"
	"net/http"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// Call is one worker leg as a node describes it: the role, path and body it
// built and its own leg settings. Everything that is the same for every
// worker node is Send's: the target (the target rule's pool; a retry avoids
// the endpoints earlier attempts used), the leg's headers (the client's
// filtered, celflow's owned ones, the target rule's, the trace context; the
// gateway pool header), the reply's body bounds, the endpoint's passive
// health, and the result's status, headers and span attributes. A new
// worker node builds its body and calls Send once.
type Call struct {
	Role upstream.Role
	Path string
	Body *jsonb.Body
	TTFB time.Duration // time to first response byte, 0 = none
	// Bounds bound reading the reply's body (the node's idle_timeout and
	// body_timeout params).
	Bounds BodyBounds
	// Target is where the leg goes when the node picked it itself (prefill
	// announces the picked endpoint's bootstrap port in its body; a
	// predicted conditional-decode hit; the SGLang session's prefill); nil
	// picks with PickFor.
	Target *upstream.Target
	// Prepare adjusts the built leg just before it is sent (Relay, Prefer,
	// Probe, a header the node drops); nil for none.
	Prepare func(l *upstream.Leg)
	// Any returns every answer as it came, non-2xx included, for the node to
	// judge (conditional decode routes its 412 itself); otherwise a non-2xx
	// is rejected (Reject) and returned with its error.
	Any bool
}

// Send picks, builds and sends the leg through c and reports the endpoint's
// health. res receives the span attributes (Attrs, made when nil) and the
// answer's status; on a non-2xx, also its headers, for edges (response.headers).
// The returned target is the one the leg went to (nil when none could be
// picked). On success the caller owns resp.Body; on a non-2xx rejected by
// Send the body was read (for the log) and closed.
func (cl Call) Send(ctx context.Context, x *engine.Exec, c *upstream.Client, res *engine.Result) (*http.Response, *upstream.Target, *engine.Error) {
	if err := ctx.Err(); err != nil {
		// The client is gone (an HTTP/2 stream reset) or the deadline has
		// passed: nothing is picked, dialled or sent.
		return nil, nil, engine.AsError(err)
	}
	t := cl.Target
	if t == nil {
		var e *engine.Error
		if t, e = PickFor(x, c, cl.Role); e != nil {
			return nil, nil, e
		}
	}
	l := NewLeg(x, cl.Role, cl.Path, cl.Body, cl.TTFB)
	cl.Bounds.Apply(l)
	if res.Attrs == nil {
		res.Attrs = make(map[string]any, 6)
	}
	for k, v := range Attrs(t, l) {
		res.Attrs[k] = v
	}
	if cl.Prepare != nil {
		cl.Prepare(l)
	}
	var resp *http.Response
	var e *engine.Error
	if cl.Any {
		resp, e = Do(ctx, x, c, t.Base, l)
	} else {
		resp, e = Send(ctx, x, c, t.Base, l)
	}
	t.Done(Failed(resp, e))
	if resp != nil {
		res.HTTPStatus = resp.StatusCode
		res.Attrs["http.response.status_code"] = resp.StatusCode
		if e != nil {
			res.Header = resp.Header
		}
	}
	return resp, t, e
}
