package front

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/internal/telemetry"
)

// serveHTTP wraps every request: canonical id first (so that every reply,
// even a 404 or a panic's 500, carries X-Request-Id), in-flight tracking
// for the shutdown, the draining refusal, and the summary line.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{ResponseWriter: w, start: time.Now()}
	x.id, x.rejected = canonicalID(r.Header)
	w.Header().Set("X-Request-Id", x.id)
	x.streamWT, x.h1 = s.cur.Load().streamWT, r.ProtoMajor == 1
	// A write deadline set by an earlier reply on this kept-alive connection
	// must not cut this one (the server itself has no write timeout).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})

	s.track.add()
	defer s.track.done()
	defer s.finish(x, r)

	if !s.admit(x, r) { // framing and header limits (limits.go)
		return
	}
	if s.draining.Load() && r.URL.Path != PathHealthz && r.URL.Path != PathHealth {
		x.route = routeOf(r.URL.Path)
		// Go elsewhere now, as a refused admission says (admission.go).
		w.Header().Set("Retry-After", retryAfter(s.cur.Load().adm.RetryAfter))
		s.fail(x, engine.Errorf(engine.KindShuttingDown, "server is shutting down"))
		return
	}
	s.router.ServeHTTP(x, r)
}

// finish turns a panic into a 500 (or an abnormal end when the reply had
// started), logs the summary line, reports to Observe, and finally aborts
// the connection when the reply must end abnormally (docs/protocol.md, Streaming).
func (s *Server) finish(x *exchange, r *http.Request) {
	if p := recover(); p != nil {
		if p != http.ErrAbortHandler { // a sentinel, compared by identity as net/http does
			s.entry(x).WithFields(map[string]any{"panic": p, "stack": string(debug.Stack())}).
				Error("panic while serving a request")
			s.fail(x, engine.Errorf(engine.KindInternal, "internal error"))
		} else {
			x.abort = true
		}
	}
	x.finishStream()
	s.logRequest(x, r)
	s.noteEarlyReset(x, r) // resets.go
	if s.opts.Observe != nil && !x.probe {
		ob := Observation{Route: x.route, Status: x.sentStatus(), Duration: time.Since(x.start),
			Report: x.report, Run: x.run, Partial: x.abort}
		if !x.firstByte.IsZero() {
			ob.FirstByte = x.firstByte.Sub(x.start)
		}
		ob.Stream = x.run != nil && x.run.Req.Stream ||
			x.wroteHeader && strings.HasPrefix(x.Header().Get("Content-Type"), "text/event-stream")
		s.opts.Observe(&ob)
	}
	if x.abort {
		panic(http.ErrAbortHandler)
	}
}

// routeOf maps a client path to its route (0 when it is none).
func routeOf(path string) engine.Route {
	for _, rt := range engine.Routes {
		if rt.Path() == path {
			return rt
		}
	}
	return 0
}

// inference serves one client route through its workflow: the runner and
// body cap of the live set current at arrival, kept to the end of the
// request whatever a reload swaps meanwhile.
func (s *Server) inference(route engine.Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x := w.(*exchange) // serveHTTP always wraps
		x.route = route
		if s.opts.InFlight != nil {
			defer s.opts.InFlight()()
		}
		lv := s.cur.Load()
		runner := lv.runners[route]
		if runner == nil {
			s.fail(x, engine.Errorf(engine.KindNotFound, "the workflow does not serve %s", route.Path()))
			return
		}
		// Admission comes before the body is read: a waiting request holds
		// no body (admission.go).
		if !s.admitInFlight(x, r, route, lv) {
			return
		}
		x.slot, x.slotHeld = s.adm, true
		defer x.ReleaseSlot()
		body, e := readBody(x, r, lv.maxBody)
		if e != nil && e.Kind == engine.KindTooLarge {
			s.refuse(x, r, e, lv.maxBody) // the 413 reaches a client still sending
			return
		}
		if e != nil {
			s.fail(x, e)
			return
		}
		req, obj, tokens, media, e := parseRequest(x.id, route, r.Header, body)
		s.debugRequest(x, r, body)
		if e == nil {
			// The trust boundary (reserved.go). Stripping edits chat bodies
			// only, for which parseRequest computed no media offsets.
			req.Body, obj, e = GuardFields(route, req.Body, obj, lv.clientFields)
		}
		if e != nil {
			s.fail(x, e)
			return
		}

		// The server span continues the client's trace; with tracing off it
		// is a no-op that allocates nothing.
		ctx, span := telemetry.StartRequest(r.Context(), r, route.Path())
		if span.IsRecording() {
			span.SetAttributes(telemetry.AttrRequestID.String(x.id))
		}
		// The run's context is cancelled when the client goes away (or the
		// shutdown budget cuts the request), but not merely because this
		// handler returned: a node that survives the end of the run (the
		// concurrent SGLang prefill, docs/protocol.md, kv-sglang) must not be cancelled when
		// decode's reply completes first.
		if err := ctx.Err(); err != nil {
			// The client reset the stream already: no workflow, no leg (resets.go).
			s.fail(x, engine.AsError(err))
			return
		}
		// The cause travels: a shutdown cut (errShutdownCut) is told apart
		// from a client that left, and the exchange ends the run itself
		// when the client stops reading (errStalledWrite).
		runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		x.cancelRun = cancel
		// Once the handler has finished, the watch is dropped: survivors run
		// on until they return (each node's own timeout still bounds them).
		defer stop()
		run := engine.NewRun(runCtx, req, x)
		run.Slot = x
		run.State.BodyObj = obj
		run.State.Tokens = tokens
		run.State.Media = media
		x.run = run
		rep := runner.Serve(run)
		x.report = rep
		s.settle(x, rep)
		code := ""
		if x.err != nil {
			code = x.err.Code()
		}
		telemetry.EndRequest(span, x.sentStatus(), code)
	})
}

// settle writes the run's error when no node answered, and marks the reply
// for an abnormal end when a node failed after it had started writing.
func (s *Server) settle(x *exchange, rep *engine.Report) {
	switch {
	case rep == nil:
		s.fail(x, engine.Errorf(engine.KindInternal, "workflow returned no report"))
	case rep.Err != nil:
		// Answered or not, fail writes the error only if nothing was written;
		// otherwise it marks the reply for an abnormal end (partial response).
		e := cancelCause(x, rep.Err)
		if e.Kind == engine.KindShutdownCut {
			// The nodes the cut cancelled are counted as cut too
			// (celflow_node_outcomes_total{reason}), not as the client's.
			for i := range rep.Outcomes {
				if o := &rep.Outcomes[i]; o.Err != nil && o.Err.Kind == engine.KindCancelled {
					c := *e
					c.Node, c.Item = o.Err.Node, o.Err.Item
					o.Err = &c
				}
			}
		}
		s.fail(x, e)
	case !rep.Answered && !x.wroteHeader:
		s.fail(x, engine.Errorf(engine.KindInternal, "no node answered the client"))
	}
}

// Causes of a run's end that are not the client leaving (cancelCause).
var (
	errStalledWrite = errors.New("client stopped reading: a streamed write made no progress within server.stream_write_timeout")
	errShutdownCut  = errors.New("cut at shutdown: still in flight when server.shutdown_timeout ran out")
)

// cancelCause tells a run that ended cancelled apart by why (docs/errors.md,
// The client went away): a client that stopped reading stays the client's
// failure (client_closed_request, 499 in logs and metrics) with a message
// that says so; a request cut by the shutdown budget is the server's
// (shutdown_cut, 503, written when nothing was yet).
func cancelCause(x *exchange, e *engine.Error) *engine.Error {
	if e.Kind != engine.KindCancelled {
		return e
	}
	if x.ww != nil && x.ww.fired.Load() {
		x.stalled = true // the watch ended the run, whatever the write then saw
	}
	switch {
	case x.stalled:
		c := *e
		c.Msg = fmt.Sprintf("client stopped reading: no write progress within stream_write_timeout (%s)", x.streamWT)
		c.Cause = errStalledWrite
		return &c
	case x.run != nil && errors.Is(context.Cause(x.run.Ctx), errShutdownCut):
		return &engine.Error{Kind: engine.KindShutdownCut, Node: e.Node, Item: e.Item,
			Msg: "request cut at shutdown: still in flight when shutdown_timeout ran out", Cause: errShutdownCut}
	}
	return e
}

// readBody reads the body under the cap: 413 above it, 400 when it cannot
// be read (docs/protocol.md, Body). A declared length is read into one exact buffer.
func readBody(x *exchange, r *http.Request, limit int64) ([]byte, *engine.Error) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if r.ContentLength >= 0 {
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, unreadable(err)
		}
		return buf, nil
	}
	// MaxBytesReader gets the connection's own writer, so that net/http
	// closes the connection after the 413 instead of draining the rest.
	buf, err := io.ReadAll(http.MaxBytesReader(x.ResponseWriter, r.Body, limit))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge(limit)
		}
		return nil, unreadable(err)
	}
	return buf, nil
}

func tooLarge(limit int64) *engine.Error {
	return engine.Errorf(engine.KindTooLarge, "request body exceeds max_request_body_size (%d MiB)", limit/MiB)
}

func unreadable(err error) *engine.Error {
	e := engine.Errorf(engine.KindInvalidJSON, "request body could not be read")
	e.Cause = err
	return e
}

// parseRequest indexes the body once (it must be a JSON object), reads
// model and stream without validating them (engine.NewRequest), for the chat
// route refuses the media shapes celflow does not carry, and for the generate
// route validates token_ids and features at entry (docs/protocol.md, render: Generate).
func parseRequest(id string, route engine.Route, h http.Header, body []byte) (*engine.Request, *jsonb.Object, engine.Tokens, []engine.MediaItem, *engine.Error) {
	var tokens engine.Tokens
	req, obj, e := engine.NewRequest(id, route, h, body)
	if e != nil {
		return nil, nil, tokens, nil, e
	}
	var media []engine.MediaItem
	var err error
	if route == engine.RouteChat {
		// Media shapes a worker would read but celflow cannot guard, or
		// ambiguous ones, are refused here for every workflow, with or
		// without fetch-media: every leg forwards the client's parts
		// (docs/threat-model.md, Media shapes).
		if _, err := mm.ScanParts(body, obj); err != nil {
			return nil, nil, tokens, nil, engine.AsError(err)
		}
	}
	if route == engine.RouteGenerate {
		if tokens, media, err = mm.ParseGenerate(body, obj); err != nil {
			return nil, nil, tokens, nil, engine.AsError(err)
		}
	}
	return req, obj, tokens, media, nil
}

// Entry is the front's entry for a request that did not come over HTTP
// (explain, the tests: block; engine.Entry): the header map as net/http
// would hand it to serveHTTP (no Host: net/http keeps it in Request.Host),
// the canonical id serveHTTP draws, and parseRequest. The caller's map is
// not modified.
func Entry(route engine.Route, h http.Header, body []byte) (engine.Entered, *engine.Error) {
	h = h.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Del("Host")
	id, _ := canonicalID(h)
	req, obj, tokens, media, e := parseRequest(id, route, h, body)
	if e != nil {
		return engine.Entered{}, e
	}
	return engine.Entered{Req: req, Obj: obj, Tokens: tokens, Media: media}, nil
}
