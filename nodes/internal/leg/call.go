package leg

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

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
	// Reroute is how many more times a leg that failed before its first
	// response byte (Rerouteable) is sent again, the same bytes (a decode's
	// kv_transfer_params included: the KV is still staged on the prefill
	// worker): in direct mode to an endpoint this leg has not tried (it
	// stops when none is left), through a gateway by asking the gateway
	// again (it picks again). 0 = none. Only for legs Send picks (Target
	// nil) and judges (not Any).
	Reroute int
	// Fallback is a pool the leg goes to once its own pool (the role's, or
	// the target rule's) failed before the first byte on every attempt,
	// with Reroute more attempts there; "" for none.
	Fallback string
}

// Send picks, builds and sends the leg through c and reports the endpoint's
// health. res receives the span attributes (Attrs, made when nil) and the
// answer's status; on a non-2xx, also its headers, for edges (response.headers).
// The returned target is the one the leg went to (nil when none could be
// picked). On success the caller owns resp.Body; on a non-2xx rejected by
// Send the body was read (for the log) and closed.
//
// A leg that fails before its first response byte (Rerouteable) is sent
// again, the same bytes, up to Reroute more times and then to the Fallback
// pool (with Reroute more there); the last attempt's answer is returned.
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
	reroute := cl.Target == nil && !cl.Any && (cl.Reroute > 0 || cl.Fallback != "")
	var tried []string // this leg's endpoints (direct mode)
	poolName, left, sent := pool(x), cl.Reroute, 0
	for {
		resp, e := cl.once(ctx, x, c, t, poolName, res)
		sent++
		if !reroute || !Rerouteable(c, resp, e) || ctx.Err() != nil {
			cl.noteReroutes(res, sent, poolName)
			return resp, t, e
		}
		if t.Endpoint != nil {
			tried = append(tried, t.Endpoint.URL)
		}
		// The next target: another endpoint of the same pool while the
		// budget lasts, then the fallback pool once.
		var next *upstream.Target
		for next == nil {
			switch {
			case left > 0:
				left--
			case cl.Fallback != "" && poolName != cl.Fallback:
				poolName, left = cl.Fallback, cl.Reroute
			default:
				cl.noteReroutes(res, sent, poolName)
				return resp, t, e
			}
			n, pe := pick(c, cl.Role, poolName, tried, cacheKey(x))
			switch {
			case pe != nil:
				left = 0 // this pool has nowhere to go: on to the fallback, if any
			case n.Endpoint != nil && slices.Contains(tried, n.Endpoint.URL):
				n.Release() // every endpoint of this pool was tried
				left = 0
			default:
				next = n
			}
		}
		rerouted(x, t, resp, e, next, poolName)
		noteRoute(x, next)
		if next.Endpoint != nil {
			noteTried(x, next.Endpoint.URL)
		}
		t = next
		// The next attempt's answer is the result's, not this one's.
		res.HTTPStatus, res.Header = 0, nil
		delete(res.Attrs, "http.response.status_code")
	}
}

// once sends one attempt of the leg to t and settles t's health: a drain
// signal (upstream.DrainSignal) drains a direct-mode endpoint instead of
// counting a failure. pool is the pool the attempt goes to (a gateway-mode
// leg carries it as upstream.PoolHeader).
func (cl Call) once(ctx context.Context, x *engine.Exec, c *upstream.Client, t *upstream.Target, pool string, res *engine.Result) (*http.Response, *engine.Error) {
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
	if pool != "" {
		stampPoolName(pool, c, l)
	}
	var resp *http.Response
	var e *engine.Error
	if cl.Any {
		resp, e = Do(ctx, x, c, t.Base, l)
	} else {
		resp, e = Send(ctx, x, c, t.Base, l)
	}
	if d, ok := upstream.DrainSignal(resp, time.Now()); ok {
		t.Drain(d)
	} else {
		t.Done(Failed(resp, e))
	}
	if resp != nil {
		res.HTTPStatus = resp.StatusCode
		res.Attrs["http.response.status_code"] = resp.StatusCode
		if e != nil {
			res.Header = resp.Header
		}
	}
	return resp, e
}

// Rerouteable reports a leg that failed before its first response byte in
// a way another endpoint may not: no answer at all (connection refused or
// reset, TLS: the "unreachable" KindBadGateway of Do), a 503 (overloaded or
// draining), or, through a gateway, a 502 (the gateway could not reach the
// pod it picked). Not a 4xx (the request's fault), not another 5xx (the
// worker may have begun the work), not a time-to-first-byte timeout (the
// worker may still be working on it), and never after a byte was relayed
// (Send returns before the relay starts).
func Rerouteable(c *upstream.Client, resp *http.Response, e *engine.Error) bool {
	if e == nil {
		return false
	}
	if resp == nil {
		return e.Kind == engine.KindBadGateway
	}
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		return true
	case http.StatusBadGateway:
		return !c.Direct()
	}
	return false
}

// rerouted logs one re-send and marks it on the node's span.
func rerouted(x *engine.Exec, from *upstream.Target, resp *http.Response, e *engine.Error, to *upstream.Target, pool string) {
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	f := logrus.Fields{"http.response.status_code": status, "error": e.Error()}
	if from.Endpoint != nil {
		f["endpoint"] = from.Endpoint.URL
	}
	if to.Endpoint != nil {
		f["next_endpoint"] = to.Endpoint.URL
	}
	if pool != "" {
		f["pool"] = pool
	}
	Log(x).WithFields(f).Warn("leg failed before its first response byte; sending it again")
	if x != nil && x.Span != nil && x.Span.IsRecording() {
		x.Span.AddEvent("reroute", trace.WithAttributes(attribute.Int("http.response.status_code", status)))
	}
}

// noteReroutes puts the re-sends of a leg on the result's span attributes.
func (cl Call) noteReroutes(res *engine.Result, sent int, pool string) {
	if sent <= 1 {
		return
	}
	res.Attrs["celflow.reroutes"] = sent - 1
	if cl.Fallback != "" && pool == cl.Fallback {
		res.Attrs["celflow.fallback_pool"] = pool
	}
}
