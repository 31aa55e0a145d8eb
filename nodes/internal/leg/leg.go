// Package leg sends worker and render legs for the node types and classifies
// their failures in one way (docs/errors.md), so every node reports transport
// failures, timeouts, upstream 4xx and 5xx, and unparseable replies alike.
package leg

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// Span attributes the leg helpers set on the calling node's span, beside
// the ones nodes return in Result.Attrs (Attrs below). Render sets the same
// keys itself.
const (
	AttrTTFB    = attribute.Key("celflow.ttfb_ms")  // send to response headers, milliseconds (µs precision)
	AttrBytesIn = attribute.Key("celflow.bytes_in") // a JSON reply's body as read (decompressed)
)

// RoleName is the name a leg's role takes in messages: the role, or "render".
func RoleName(r upstream.Role) string {
	if r == "" {
		return "render"
	}
	return string(r)
}

// Do sends one leg and classifies failures that happen before a response:
//   - ctx cancelled ⇒ KindCancelled; ctx deadline ⇒ KindDeadline (the engine
//     decides whether its own timer counts as the request deadline);
//   - *upstream.TimeoutError ⇒ KindUpstreamTimeout;
//   - anything else (transport) ⇒ KindBadGateway "<role> unreachable".
//
// The response is returned whatever its status; the caller owns its body.
//
// With tracing on, the time to the response headers goes on the node's (or
// item's) span as celflow.ttfb_ms (issue 6); a retry's attempt overwrites it.
func Do(ctx context.Context, x *engine.Exec, c *upstream.Client, base string, l *upstream.Leg) (*http.Response, *engine.Error) {
	var start time.Time
	recording := x != nil && x.Span != nil && x.Span.IsRecording()
	if recording { // no clock read on the untraced hot path
		start = time.Now()
	}
	stampPool(x, c, l)
	resp, err := c.Send(ctx, base, l)
	if err == nil {
		if recording {
			x.Span.SetAttributes(AttrTTFB.Float64(ms(time.Since(start))))
		}
		return resp, nil
	}
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return nil, classify(ctx, l.Role, err)
}

// stampPool carries the pool the node's target rule chose (LegTarget.Pool)
// to a gateway as upstream.PoolHeader: the gateway's HTTPRoute sends the leg
// to that InferencePool. In direct mode the leg already goes to an endpoint
// of the pool (PickFor). The rule's headers are shared by every request, so
// they are copied, never modified.
func stampPool(x *engine.Exec, c *upstream.Client, l *upstream.Leg) {
	stampPoolName(pool(x), c, l)
}

// stampPoolName is stampPool for a pool named by the caller (Call's
// fallback pool). A leg that already carries a pool keeps it: it was
// stamped for this leg (a resend, or the fallback pool); target rules
// cannot set the header themselves.
func stampPoolName(p string, c *upstream.Client, l *upstream.Leg) {
	if p == "" || c.Direct() {
		return
	}
	if _, ok := l.TargetHeader[upstream.PoolHeader]; ok {
		return
	}
	h := make(http.Header, len(l.TargetHeader)+1)
	for k, v := range l.TargetHeader {
		h[k] = v
	}
	h[upstream.PoolHeader] = []string{p}
	l.TargetHeader = h
}

func classify(ctx context.Context, role upstream.Role, err error) *engine.Error {
	if cerr := ctx.Err(); cerr != nil {
		e := engine.AsError(cerr)
		e.Cause = err
		return e
	}
	var te *upstream.TimeoutError
	if errors.As(err, &te) {
		e := engine.Errorf(engine.KindUpstreamTimeout, "upstream did not answer within %s", te.After)
		e.Cause = err
		return e
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return engine.AsError(err)
	}
	e := engine.Errorf(engine.KindBadGateway, "upstream unreachable")
	e.Cause = err
	return e
}

// Send is Do followed by Reject for a non-2xx answer. On a non-2xx the
// response is returned together with the error, its body already read (for
// the log) and closed, so callers can still route on status and headers.
// On success the caller owns resp.Body.
func Send(ctx context.Context, x *engine.Exec, c *upstream.Client, base string, l *upstream.Leg) (*http.Response, *engine.Error) {
	resp, e := Do(ctx, x, c, base, l)
	if e != nil {
		return nil, e
	}
	if is2xx(resp.StatusCode) {
		return resp, nil
	}
	return resp, reject(x, RoleName(l.Role), resp)
}

func is2xx(code int) bool { return code >= 200 && code < 300 }

// Reject classifies a non-2xx answer and closes its body: a 503 becomes
// KindUpstreamUnavailable with its Retry-After; a 4xx KindUpstreamRejected
// with the status, the relayed OpenAI message (≤ 512 bytes) and string
// param; anything else KindBadGateway. The body (≤ 8 KiB) goes to
// the log with the request id, never to the client.
func Reject(x *engine.Exec, resp *http.Response) *engine.Error {
	return reject(x, "upstream", resp)
}

func reject(x *engine.Exec, name string, resp *http.Response) *engine.Error {
	er := upstream.ReadError(resp)
	code := resp.StatusCode
	Log(x).WithFields(logrus.Fields{
		"http.response.status_code": code,
		"upstream_body":             string(er.Body),
	}).Warn("upstream answered with an error status")
	// engine.UpstreamStatus is the one status mapping (docs/errors.md): 503
	// keeps its status and Retry-After, a 4xx its message and string param.
	return engine.UpstreamStatus(code, engine.CutUTF8(er.Msg, 512), er.Param, er.RetryAfter)
}

// ReadJSON reads a 2xx body (at most limit bytes, decompressed) and requires
// valid JSON: a 204, an empty or a non-JSON body is KindBadGateway
// "…returned an unparseable body". It closes the body.
// With tracing on, the bytes read go on the span as celflow.bytes_in.
func ReadJSON(x *engine.Exec, resp *http.Response, limit int64) ([]byte, *engine.Error) {
	b, e := ReadBody(x, resp, limit)
	if e != nil {
		return nil, e
	}
	// jsonb's validator, not encoding/json's: same grammar (nesting capped
	// at 512), about twice as fast on a render reply of 50k ids.
	if !jsonb.Valid(b) {
		return nil, Unparseable(x, resp.StatusCode, b)
	}
	return b, nil
}

// ReadBody reads a 2xx body (at most limit bytes, decompressed; an expired
// idle_timeout or body_timeout is KindUpstreamTimeout) without judging it,
// for callers that parse it with jsonb at once and would otherwise scan it
// twice; they report a syntax error with Unparseable.
func ReadBody(x *engine.Exec, resp *http.Response, limit int64) ([]byte, *engine.Error) {
	b, err := upstream.ReadBody(resp, limit)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, engine.AsError(err)
		}
		var te *upstream.TimeoutError
		if errors.As(err, &te) { // idle_timeout or body_timeout: retryable, 504
			e := engine.Errorf(engine.KindUpstreamTimeout, "upstream %s", te.Error())
			e.Cause = err
			return nil, e
		}
		e := engine.Errorf(engine.KindBadGateway, "upstream reply could not be read")
		e.Cause = err
		return nil, e
	}
	if x != nil && x.Span != nil && x.Span.IsRecording() {
		x.Span.SetAttributes(AttrBytesIn.Int(len(b)))
	}
	return b, nil
}

// Unparseable is the error of a 2xx reply that is not JSON (a 204, an empty
// or a non-JSON body): 502 bad_gateway; the body (≤ 8 KiB)
// goes to the log only.
func Unparseable(x *engine.Exec, status int, b []byte) *engine.Error {
	Log(x).WithFields(logrus.Fields{
		"http.response.status_code": status,
		"upstream_body":             string(b[:min(len(b), 8<<10)]),
	}).Warn("upstream returned an unparseable body")
	return engine.Errorf(engine.KindBadGateway, "upstream returned an unparseable body (HTTP %d)", status)
}

// Fail wraps an error into a Result carrying the upstream status (0 when no
// call was answered). A nil err gives a Result without error.
func Fail(status int, err *engine.Error) engine.Result {
	if err == nil {
		return engine.Result{HTTPStatus: status}
	}
	return engine.Result{HTTPStatus: status, Err: err}
}

// Log is the logger of one execution: request id and node id on every line.
func Log(x *engine.Exec) *logrus.Entry {
	f := logrus.Fields{}
	if x != nil {
		f["node"] = x.NodeID
		if x.Index >= 0 {
			f["item"] = x.Index
		}
		if x.Run != nil && x.Run.Req != nil {
			f["request_id"] = x.Run.Req.ID
		}
	}
	return logrus.WithFields(f)
}

// ms is d in milliseconds with microsecond precision, for span attributes.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
