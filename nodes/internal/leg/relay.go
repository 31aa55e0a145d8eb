package leg

import (
	"errors"
	"net/http"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// noBody reports a 2xx that carries no body by its status or its declared
// length. (A chunked reply that turns out empty is only known once read:
// that one reaches the client as an empty success, as the worker sent it.)
func noBody(resp *http.Response) bool {
	return resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusResetContent || resp.ContentLength == 0
}

// Relay claims the client writer and relays a 2xx reply: status, headers,
// and the body chunk by chunk (docs/protocol.md, Streaming). The result always has
// Responded true once the claim succeeded. A failure after the status was
// written is returned as Err with Responded true: KindCancelled when the
// client left, KindBadGateway otherwise; the front must then end the reply
// abnormally (panic(http.ErrAbortHandler)) and log a partial-response line.
func Relay(x *engine.Exec, resp *http.Response, idle, writeTimeout time.Duration) engine.Result {
	if noBody(resp) {
		// A 204, a 205 or an empty 2xx is no reply to a completion: the
		// client must not see a success without a body (docs/errors.md).
		resp.Body.Close()
		return engine.Result{HTTPStatus: resp.StatusCode,
			Err: engine.Errorf(engine.KindBadGateway, "upstream answered HTTP %d without a body: not a valid reply", resp.StatusCode)}
	}
	tapUsage(x, resp) // the truth check of a predicted route, and its relay in the endpoint's load (usage.go)
	w, ok := x.Run.Answer()
	if !ok {
		resp.Body.Close()
		return engine.Result{HTTPStatus: resp.StatusCode, Err: engine.Errorf(engine.KindInternal, "the client was already answered by another node")}
	}
	idle = StreamIdle(x, idle)
	n, err := upstream.RelayWith(w, resp, upstream.RelayOptions{
		ReqID:        x.Run.Req.ID,
		Idle:         idle,
		Stream:       x.Run.Req.Stream,
		WriteTimeout: writeTimeout,
	})
	r := engine.Result{
		HTTPStatus: resp.StatusCode,
		Responded:  true,
		Attrs:      map[string]any{"celflow.bytes_relayed": n},
	}
	if err != nil {
		var e *engine.Error
		switch {
		case x.Run.Ctx.Err() != nil:
			e = engine.AsError(x.Run.Ctx.Err())
		case errors.Is(err, upstream.ErrIdleTimeout):
			e = engine.Errorf(engine.KindUpstreamTimeout, "reply stalled for %s after %d bytes", idle, n)
		default:
			e = engine.Errorf(engine.KindBadGateway, "reply broke off after %d bytes", n)
		}
		e.Cause = err
		r.Err = e
		Log(x).WithError(err).WithField("bytes", n).Info("partial response: relayed reply ended abnormally")
	}
	return r
}

// StreamIdle is the silence a relaying node's leg may keep between two
// chunks: the chosen target rule's stream_idle_timeout when it sets one,
// else the node's own (idle). The plain relay and decode's failover relay
// both bound their legs with it.
func StreamIdle(x *engine.Exec, idle time.Duration) time.Duration {
	if x != nil && x.Target != nil && x.Target.StreamIdle != nil {
		return *x.Target.StreamIdle
	}
	return idle
}
