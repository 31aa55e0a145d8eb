package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Header values shared by every leg. Their capacity equals their length, so
// an append by anyone reallocates instead of writing into them.
var (
	hvJSON     = []string{"application/json"}
	hvPrefer   = []string{"if-available"}
	hvIdentity = []string{"identity"}
	hvRole     = [numRoles][]string{{string(RoleEncode)}, {string(RolePrefill)}, {string(RoleDecode)}}
)

func (c *client) send(ctx context.Context, base string, leg *Leg, hook func(Role, int, time.Duration, error)) (*http.Response, error) {
	start := time.Now()
	resp, err := c.sendLeg(ctx, base, leg)
	if hook != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		hook(leg.Role, status, time.Since(start), err)
	}
	return resp, err
}

// sendLeg posts the leg, resending it once when it failed on a stale
// keep-alive connection (one the worker closed while idle). leg.TTFB bounds both attempts
// together, up to the response headers only: the derived context lives on
// with the body and is cancelled when the body is closed.
func (c *client) sendLeg(ctx context.Context, base string, leg *Leg) (*http.Response, error) {
	lctx, cancel := context.WithCancel(ctx)
	var timer *time.Timer
	if leg.TTFB > 0 {
		timer = time.AfterFunc(leg.TTFB, cancel)
	}
	ct := &connTrace{}
	req, err := c.newRequest(httptrace.WithClientTrace(lctx, ct.hooks()), base, leg)
	if err != nil {
		cancel()
		return nil, &TransportError{Err: err}
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil && ct.stale(err) && req.GetBody != nil && ctx.Err() == nil && lctx.Err() == nil {
		if body, gerr := req.GetBody(); gerr == nil {
			ct.reset()
			retry := req.Clone(req.Context())
			retry.Body = body
			resp, err = c.rt.RoundTrip(retry)
		}
	}
	expired := timer != nil && !timer.Stop()
	if err == nil && !expired {
		resp.Body = &legBody{ReadCloser: resp.Body, cancel: cancel}
		if (leg.Idle > 0 || leg.BodyTimeout > 0) && !(leg.Relay && !leg.Probe && resp.StatusCode >= 200 && resp.StatusCode < 300) {
			resp.Body = watchBody(ctx, resp.Body, cancel, leg.Idle, leg.BodyTimeout)
		}
		return resp, nil
	}
	if err == nil {
		resp.Body.Close() // headers raced the TTFB timer and lost
	}
	cancel()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case expired:
		return nil, &TimeoutError{After: leg.TTFB}
	}
	return nil, &TransportError{Err: err}
}

// newRequest builds the POST with the headers of docs/protocol.md (Headers).
func (c *client) newRequest(ctx context.Context, base string, leg *Leg) (*http.Request, error) {
	req, err := c.bases.newPost(ctx, base, leg.Path, leg.Body)
	if err != nil {
		return nil, err
	}
	if leg.Length > 0 {
		req.ContentLength = leg.Length
	}
	if leg.NewBody != nil {
		nb := leg.NewBody
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(nb()), nil }
	}
	h := make(http.Header, len(leg.Header)+5)
	forwardHeaders(h, leg.Header, leg.Relay, c.owned)
	for _, k := range leg.TargetDrop {
		delete(h, k)
	}
	if leg.Trace != nil {
		delete(h, "Traceparent")
		delete(h, "Tracestate")
		for k, vs := range leg.Trace {
			h[textproto.CanonicalMIMEHeaderKey(k)] = vs[:len(vs):len(vs)]
		}
	}
	for k, vs := range leg.Extra {
		h[textproto.CanonicalMIMEHeaderKey(k)] = vs[:len(vs):len(vs)]
	}
	h["Content-Type"] = hvJSON
	if leg.ReqID != "" {
		h["X-Request-Id"] = []string{leg.ReqID}
	}
	if i := roleIndex(leg.Role); i >= 0 {
		h["Epp-Profile"] = hvRole[i]
	}
	if leg.Prefer {
		h["Prefer"] = hvPrefer
	}
	if leg.Relay && len(h["Accept-Encoding"]) == 0 {
		// The client accepts anything; asking for identity keeps Go's
		// transport from negotiating gzip and decoding the body it relays
		// (which would also drop Content-Length).
		h["Accept-Encoding"] = hvIdentity
	}
	// Last, so a workflow's target rule may replace EPP-Profile (a
	// custom scheduling profile) or the objective.
	for k, vs := range leg.TargetHeader {
		h[k] = vs[:len(vs):len(vs)]
	}
	req.Header = h
	return req, nil
}

// connTrace records what a stale-connection decision needs. The
// ClientTrace lives inside it: one allocation less per leg.
type connTrace struct {
	reused, wrote, gotByte atomic.Bool
	trace                  httptrace.ClientTrace
}

func (ct *connTrace) hooks() *httptrace.ClientTrace {
	ct.trace = httptrace.ClientTrace{
		GotConn:              func(i httptrace.GotConnInfo) { ct.reused.Store(i.Reused) },
		WroteHeaders:         func() { ct.wrote.Store(true) },
		GotFirstResponseByte: func() { ct.gotByte.Store(true) },
	}
	return &ct.trace
}

func (ct *connTrace) reset() {
	ct.reused.Store(false)
	ct.wrote.Store(false)
	ct.gotByte.Store(false)
}

// stale reports a failure that left the request unprocessed on a reused
// keep-alive connection: nothing written, or the peer closed or reset it
// before a single response byte (the race with a worker's idle timeout,
// e.g. uvicorn's 5 s). Go itself resends a POST only in the first case.
func (ct *connTrace) stale(err error) bool {
	return ct.reused.Load() && !ct.gotByte.Load() && (!ct.wrote.Load() || peerClosed(err))
}

// peerClosed: the connection was closed or reset by the peer.
func peerClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// legBody ends the leg's context when the caller closes the body.
type legBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *legBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
