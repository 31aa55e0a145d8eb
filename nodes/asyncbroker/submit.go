package asyncbroker

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"

	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

var tracePropagator = propagation.TraceContext{}

// queue serves enqueue and wait: validate, submit (or reattach), answer.
func (n *Node) queue(ctx context.Context, x *engine.Exec, m mode, tenant string) engine.Result {
	req := x.Run.Req
	h := req.Header
	if req.Stream {
		return fail(engine.Errorf(engine.KindInvalidRequest, "stream is only supported in passthrough mode"))
	}
	if req.Model == "" {
		return fail(engine.Errorf(engine.KindInvalidRequest, "model is required"))
	}
	id := requestID(req)
	if n.rt == nil {
		return n.answerError(x, id, http.StatusServiceUnavailable, CodeEnqueueFailed,
			"async requests are not configured on this server (set async.redis_url)")
	}
	s := &n.rt.Settings
	if len(req.Body) > s.MaxInlineBytes {
		return fail(engine.Errorf(engine.KindTooLarge, "a queued request body is limited to %d bytes (async.max_inline_bytes)", s.MaxInlineBytes))
	}
	timeout := s.EnqueueDefault
	if m == modeWait {
		timeout = s.WaitDefault
	}
	if v := first(h, n.cfg.timeout, n.cfg.timeout); v != "" {
		sec, err := strconv.Atoi(v)
		if err != nil || sec <= 0 {
			return fail(engine.Errorf(engine.KindInvalidRequest, "%s must be a positive integer (seconds)", n.cfg.timeout))
		}
		timeout = time.Duration(sec) * time.Second
		if m == modeWait && timeout > s.WaitMax {
			return fail(engine.Errorf(engine.KindInvalidRequest, "%s is at most %d in wait mode", n.cfg.timeout, int(s.WaitMax/time.Second)))
		}
	}
	now := time.Now()
	queue, tier := n.cfg.pick(req.Model, tenant)
	j := &async.Job{Tenant: tenant, ID: id, Queue: queue, Lane: tier, Path: req.Route.Path(), Body: req.Body,
		Created: now, Deadline: now.Add(timeout), Headers: n.carry(ctx, h)}
	sub, err := n.rt.Backend.Submit(ctx, j)
	if err != nil {
		leg.Log(x).WithError(err).Error("async: submit failed")
		return n.storeError(x, id, CodeEnqueueFailed)
	}
	n.rt.Metrics.submitted(sub.Outcome)
	switch sub.Outcome {
	case async.Conflict:
		return n.answerError(x, id, http.StatusConflict, CodeIdempotencyConflict,
			"a request with this id and a different body exists")
	case async.FullTenant, async.FullQueue:
		w, ok := x.Run.Answer()
		if !ok {
			return engine.Result{}
		}
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.PollInterval/time.Second))))
		what := "tenant " + tenant
		if sub.Outcome == async.FullQueue {
			what = "queue " + queue
		}
		writeError(w, http.StatusTooManyRequests, CodeQueueFull, "the backlog of "+what+" is full", id)
		return engine.Result{Responded: true, HTTPStatus: http.StatusTooManyRequests}
	}
	if m == modeEnqueue && sub.Outcome == async.Reattached && sub.State == async.StateDone {
		// The same request finished already: answer with its result, as
		// GET (and wait mode) would, rather than a 202 to poll for it.
		rec, err := n.rt.Backend.Fetch(ctx, tenant, id)
		if err != nil {
			leg.Log(x).WithError(err).Error("async: fetch failed")
			return n.storeError(x, id, CodeFetchFailed)
		}
		w, ok := x.Run.Answer()
		if !ok {
			return engine.Result{}
		}
		st := writeRecord(w, id, rec, s.PollInterval)
		return engine.Result{Responded: true, HTTPStatus: st}
	}
	if m == modeEnqueue {
		w, ok := x.Run.Answer()
		if !ok {
			return engine.Result{}
		}
		writePending(w, id, sub.State, s.PollInterval)
		return engine.Result{Responded: true, HTTPStatus: http.StatusAccepted}
	}
	return n.hold(ctx, x, tenant, id, j.Deadline)
}

// requestID is the async id: the canonical x-request-id (the front kept a
// valid client one or minted a UUID), or a valid Idempotency-Key when the
// client sent no x-request-id.
func requestID(req *engine.Request) string {
	if len(req.Header["X-Request-Id"]) == 0 {
		if k := req.Header["Idempotency-Key"]; len(k) > 0 && validID(k[0]) {
			return k[0]
		}
	}
	if validID(req.ID) {
		return req.ID
	}
	return uuid.NewString()
}

// carry is what travels with the queued request: forward_headers and the
// submit's trace context (the dispatched run continues that trace).
func (n *Node) carry(ctx context.Context, h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range n.cfg.forward {
		if v := h[k]; len(v) > 0 {
			out[k] = v[0]
		}
	}
	tracePropagator.Inject(ctx, propagation.MapCarrier(out))
	if _, ok := out["traceparent"]; !ok {
		if v := h["Traceparent"]; len(v) > 0 {
			out["traceparent"] = v[0]
		}
	}
	return out
}

func (n *Node) storeError(x *engine.Exec, id, code string) engine.Result {
	w, ok := x.Run.Answer()
	if !ok {
		return engine.Result{}
	}
	writeStoreError(w, code, id)
	return engine.Result{Responded: true, HTTPStatus: http.StatusServiceUnavailable}
}

func (n *Node) answerError(x *engine.Exec, id string, status int, code, msg string) engine.Result {
	w, ok := x.Run.Answer()
	if !ok {
		return engine.Result{}
	}
	writeError(w, status, code, msg, id)
	return engine.Result{Responded: true, HTTPStatus: status}
}

// hold is wait mode: answer with the result when it lands; at the wait
// cap the 202 (still fetchable); at the deadline 504; when the client
// leaves, cancel the request (a CANCELLED record stays).
func (n *Node) hold(ctx context.Context, x *engine.Exec, tenant, id string, deadline time.Time) engine.Result {
	// A waiting client needs no capacity; the queued run it waits for does.
	// Holding the admission slot here let max_in_flight waiters block every
	// dispatch (and every online request) until their deadline.
	if x != nil && x.Run != nil && x.Run.Slot != nil {
		x.Run.Slot.ReleaseSlot()
	}
	s := &n.rt.Settings
	b := n.rt.Backend
	if !n.rt.enterWait() {
		// max_waiters long-polls are held: the current state at once, as
		// at the wait cap (queued, so the 202; the client polls).
		w, ok := x.Run.Answer()
		if !ok {
			return engine.Result{}
		}
		w.Header().Set(HeaderWait, "0")
		rec, err := b.Fetch(ctx, tenant, id)
		if err != nil || rec.State == async.StateUnknown {
			rec = async.Record{State: async.StateQueued}
		}
		st := writeRecord(w, id, rec, s.PollInterval)
		return engine.Result{Responded: true, HTTPStatus: st}
	}
	defer n.rt.leaveWait()
	dl := time.NewTimer(time.Until(deadline))
	defer dl.Stop()
	var capC <-chan time.Time
	if s.WaitCap > 0 {
		t := time.NewTimer(s.WaitCap)
		defer t.Stop()
		capC = t.C
	}
	poll := time.NewTicker(s.PollInterval)
	defer poll.Stop()
	for {
		woke, stop := b.Watch(tenant, id)
		rec, err := b.Fetch(ctx, tenant, id)
		if err == nil && (rec.State == async.StateDone || rec.State == async.StateUnknown) {
			stop()
			w, ok := x.Run.Answer()
			if !ok {
				return engine.Result{}
			}
			st := writeRecord(w, id, rec, s.PollInterval)
			return engine.Result{Responded: true, HTTPStatus: st}
		}
		select {
		case <-woke:
		case <-poll.C:
		case <-capC:
			stop()
			w, ok := x.Run.Answer()
			if !ok {
				return engine.Result{}
			}
			writePending(w, id, rec.State, s.PollInterval)
			return engine.Result{Responded: true, HTTPStatus: http.StatusAccepted}
		case <-dl.C:
			stop()
			w, ok := x.Run.Answer()
			if !ok {
				return engine.Result{}
			}
			writeError(w, http.StatusGatewayTimeout, async.CodeDeadline, "deadline exceeded before the result", id)
			return engine.Result{Responded: true, HTTPStatus: http.StatusGatewayTimeout}
		case <-ctx.Done():
			stop()
			if !errors.Is(ctx.Err(), context.Canceled) {
				return fail(engine.AsError(ctx.Err())) // the workflow's own deadline
			}
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := b.Cancel(c, tenant, id, true); err != nil {
				leg.Log(x).WithError(err).Warn("async: cancel after the client left failed")
			}
			cancel()
			return fail(engine.AsError(ctx.Err()))
		}
		stop()
	}
}
