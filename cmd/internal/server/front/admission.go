package front

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/celenv"
)

// Admission is the admission part of a Live set (config key `admission`).
// Limits.Class is indexed by int(engine.Route); the zero value bounds
// nothing (every request is admitted and counted).
type Admission struct {
	Limits admission.Limits
	// Priority orders waiters (higher first); nil: every request is 0.
	Priority *celenv.Priority
	// RetryAfter is sent on admission's 429 and 503, in whole seconds (at
	// least 1).
	RetryAfter time.Duration
}

// AdmissionClasses is the number of admission classes the front uses: one
// per route, class int(route) (slot 0 unused).
var AdmissionClasses = len(engine.Routes) + 1

// RouteClass is the admission class of a route, for readers of the view.
func RouteClass(r engine.Route) int { return int(r) }

// Admission returns the server's in-flight view: counts of admitted and
// waiting inference requests, whole server and per route (RouteClass), and
// the bounds. It counts even when no bound is set. The async dispatcher
// reads it (Spare) to take only spare capacity.
func (s *Server) Admission() *admission.Controller { return s.adm }

// admitInFlight runs before the body is read: the fast path when the
// bounds allow, else a wait in the queue at the request's priority. On
// refusal it writes the reply (429 overloaded or queue_timeout, 503
// shutting_down, each with Retry-After; nothing for a client that left) and
// returns false. On true the caller must release the class when the
// request ends.
func (s *Server) admitInFlight(x *exchange, r *http.Request, route engine.Route, lv *live) bool {
	if err := r.Context().Err(); err != nil {
		// The client reset the stream before it was admitted (HTTP/2
		// rapid reset): no slot, no body, no workflow (resets.go).
		e := engine.AsError(err)
		e.Msg = "client disconnected before admission"
		s.fail(x, e)
		return false
	}
	class := RouteClass(route)
	if s.adm.TryAcquire(class) {
		return true
	}
	var err error
	if s.opts.Background != nil && s.opts.Background(r) {
		err = s.adm.Shed(class) // spare capacity only: never queued ahead of online requests
	} else if err = s.adm.Acquire(r.Context(), class, s.priority(x, r, route, lv.adm.Priority)); err == nil {
		return true
	}
	var e *engine.Error
	switch {
	case errors.Is(err, admission.ErrQueueFull):
		e = engine.Errorf(engine.KindOverloaded, "server is overloaded: too many requests in flight and no room to wait; retry later")
	case errors.Is(err, admission.ErrQueueTimeout):
		e = engine.Errorf(engine.KindQueueTimeout, "server is overloaded: no request slot became free in time; retry later")
	case errors.Is(err, admission.ErrShuttingDown):
		e = engine.Errorf(engine.KindShuttingDown, "server is shutting down")
	default:
		e = engine.AsError(err) // the client left while waiting: nothing is written
		e.Msg = "client disconnected while waiting for admission"
	}
	if e.Kind == engine.KindCancelled {
		s.fail(x, e) // writes nothing
		return false
	}
	x.Header().Set("Retry-After", retryAfter(lv.adm.RetryAfter))
	if r.ContentLength >= 0 && r.ContentLength <= keepAliveBody {
		// net/http discards a body this small after the reply and keeps
		// the connection: no reconnect per 429 while overloaded.
		s.fail(x, e)
		return false
	}
	// A bigger or unknown body: closed reliably, as a 413 is (limits.go),
	// so that a client still sending reads the 429 rather than a reset.
	s.refuse(x, r, e, lv.maxBody)
	return false
}

// keepAliveBody is net/http's maxPostHandlerReadBytes: the unread body it
// discards itself to keep a connection open after a handler returns.
const keepAliveBody = 256 << 10

// priority evaluates the priority expression, only for a request that has
// to wait. An evaluation error (typically a header read without `in`) is
// priority 0, counted (admission.PriorityObserver: celflow_cel_errors_total
// {node="",expr="priority"}) and logged at most once per 10 s.
func (s *Server) priority(x *exchange, r *http.Request, route engine.Route, p *celenv.Priority) int64 {
	if p == nil {
		return 0
	}
	req := celenv.Request{ID: x.id, Format: route.String(), Path: route.Path(), Header: r.Header}
	n, err := p.Eval(&req)
	if err != nil {
		if po, ok := s.opts.AdmissionObserver.(admission.PriorityObserver); ok {
			po.PriorityError()
		}
		if ok, suppressed := p.Log.Admit("", "priority"); ok {
			e := s.entry(x).WithError(err).WithField("node", "").WithField("expr", "priority")
			if suppressed > 0 {
				e = e.WithField("suppressed", suppressed)
			}
			e.Warn("CEL expression failed at run time")
		}
		return 0
	}
	return n
}

// retryAfter renders d as whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	sec := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(sec, 1), 10)
}
