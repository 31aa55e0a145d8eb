package front

import (
	"context"
	"net/http"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// exchange is the front's per-request state and the ResponseWriter every
// handler and node writes through. It records what was sent (for the
// summary line, metrics and the panic rule: a 500 only when nothing was
// written yet) and forwards Flush and Unwrap so that http.ResponseController
// reaches the real connection (write deadlines, flushes per SSE chunk).
type exchange struct {
	http.ResponseWriter
	id       string
	rejected int // length of a rejected inbound x-request-id, -1 if none
	start    time.Time

	status      int
	wroteHeader bool
	bytes       int64
	firstByte   time.Time // when the first body byte was written

	route  engine.Route // 0 outside the inference routes
	probe  bool         // healthz/readyz/metrics: logged at debug level
	run    *engine.Run
	report *engine.Report
	err    *engine.Error // what failed, written or not
	abort  bool          // end the reply abnormally once logged

	// The admission slot the request holds while it runs, released once:
	// when the handler returns, or earlier by a node that only waits
	// (engine.Run.Slot). No lock: the node releases it inside the run, and
	// the run's end happens before the handler's deferred release.
	slot     *admission.Controller
	slotHeld bool

	// The stream write deadline (server.stream_write_timeout): streamWT is
	// the live value at arrival; streaming is set when a 2xx streamed reply
	// starts. Over HTTP/1.x the connection's deadline is armed (until
	// deadline) while a write or flush is in progress and between them too;
	// over HTTP/2 ww watches the writes (see arm).
	// stalled records a write that failed at its deadline: the client
	// stopped reading. cancelRun ends the run's context (the legs) with a
	// cause. Touched only by the goroutine that writes the reply, whose end
	// happens before the handler reads them.
	streamWT  time.Duration
	h1        bool // HTTP/1.x: a deadline only bounds writes in progress
	streaming bool
	armed     bool
	deadline  time.Time
	stalled   bool
	ww        *writeWatch
	rc        *http.ResponseController
	cancelRun context.CancelCauseFunc
}

// ReleaseSlot gives the request's admission slot back (engine.SlotHolder).
// Idempotent: the handler's deferred call is then a no-op.
func (x *exchange) ReleaseSlot() {
	if x.slotHeld {
		x.slotHeld = false
		x.slot.Release(RouteClass(x.route))
	}
}

var (
	_ http.ResponseWriter = (*exchange)(nil)
	_ http.Flusher        = (*exchange)(nil)
)

func (x *exchange) WriteHeader(code int) {
	if !x.wroteHeader && code >= 200 {
		x.status = code
		x.wroteHeader = true
		// A streamed reply is exempt from write_timeout (the relay clears
		// the deadline) but not from the per-write deadline: the same rule
		// as the relay's (upstream.RelayOptions.Stream), 2xx only, so that
		// error replies keep write_timeout.
		x.streaming = x.streamWT > 0 && code < 300 &&
			(x.run != nil && x.run.Req.Stream || upstream.IsEventStream(x.Header().Get("Content-Type")))
	}
	x.ResponseWriter.WriteHeader(code)
}

func (x *exchange) Write(b []byte) (int, error) {
	if !x.wroteHeader {
		x.WriteHeader(http.StatusOK)
	}
	if x.firstByte.IsZero() && len(b) > 0 {
		x.firstByte = time.Now()
	}
	x.arm()
	n, err := x.ResponseWriter.Write(b)
	x.bytes += int64(n)
	if err != nil {
		x.writeFailed()
	}
	return n, err
}

// Flush sends buffered bytes now (each SSE chunk).
func (x *exchange) Flush() { _ = x.FlushError() }

// FlushError is Flush with the connection's error: http.ResponseController
// prefers it, so that a relay learns that a flush failed (a client gone, or
// a stream write deadline) instead of writing on.
func (x *exchange) FlushError() error {
	if !x.wroteHeader {
		x.WriteHeader(http.StatusOK)
	}
	x.arm()
	err := x.controller().Flush()
	if err != nil {
		x.writeFailed()
		return err
	}
	if x.ww != nil {
		x.ww.end()
	}
	return nil
}

func (x *exchange) controller() *http.ResponseController {
	if x.rc == nil {
		x.rc = http.NewResponseController(x.ResponseWriter)
	}
	return x.rc
}

// arm applies the write deadline to a streamed reply's write or flush: a
// write that makes no progress for stream_write_timeout fails.
//
// Over HTTP/2 an armed deadline resets the stream when it expires, written
// to or not, so it must not stay set between chunks (the stream waits for
// its upstream there, which stream_idle_timeout bounds): a writeWatch
// stamps the write and sets a past deadline only when one has been pending
// for the whole timeout.
//
// Over HTTP/1.x a deadline only fails I/O in progress or started after it,
// so it may stay set between chunks; it is moved forward only when less
// than 15/16 of the timeout is left. A blocked write thus fails after
// between 15/16 of stream_write_timeout and all of it, and a stream of
// small events costs one deadline update every timeout/16 instead of two
// per event. finishStream bounds net/http's writes after the handler.
func (x *exchange) arm() {
	if !x.streaming {
		return
	}
	if !x.h1 {
		if x.ww == nil {
			x.controller() // before the watch's goroutine can use it
			x.ww = newWriteWatch(x.streamWT, x.expireStream)
		}
		x.ww.begin()
		return
	}
	now := time.Now()
	if x.armed && x.deadline.Sub(now) >= x.streamWT-x.streamWT/16 {
		return
	}
	x.deadline = now.Add(x.streamWT)
	if x.controller().SetWriteDeadline(x.deadline) == nil {
		x.armed = true
	}
}

// expireStream runs on the writeWatch's timer (HTTP/2) when a write has been
// pending for stream_write_timeout: it ends the run (the legs) and resets
// the stream at once, which fails the blocked write.
func (x *exchange) expireStream() {
	if x.cancelRun != nil {
		x.cancelRun(errStalledWrite)
	}
	_ = x.rc.SetWriteDeadline(time.Now())
}

// finishStream is called once the handler is done writing. Over HTTP/2 the
// watch stops. Over HTTP/1.x net/http still flushes the rest of the reply
// (the last chunk), which gets a full stream_write_timeout and no more (the
// next request on the connection clears it, serveHTTP).
func (x *exchange) finishStream() {
	if x.ww != nil {
		x.ww.stop()
	}
	if x.streaming && x.h1 && x.armed {
		x.deadline = time.Now().Add(x.streamWT)
		_ = x.controller().SetWriteDeadline(x.deadline)
	}
}

// writeFailed records a write or flush that failed at its deadline (the
// client stopped reading: no progress for stream_write_timeout) and ends the
// run, so that its legs are cancelled (decode's worker connection closed)
// and the failure is the client's, not the worker's. A failure before the
// deadline is a disconnect, which the request context already reports.
func (x *exchange) writeFailed() {
	if x.ww != nil {
		x.stalled = x.ww.fired.Load() // expireStream has ended the run
		return
	}
	if !x.armed || time.Now().Before(x.deadline) {
		return
	}
	x.stalled = true
	if x.cancelRun != nil {
		x.cancelRun(errStalledWrite)
	}
}

// Unwrap lets http.ResponseController find the connection's writer.
func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// sentStatus is the status for logs and metrics: 499 when the client left
// before any reply, 500 for a run that wrote nothing and reported nothing.
func (x *exchange) sentStatus() int {
	switch {
	case x.wroteHeader:
		return x.status
	case x.err != nil:
		return x.err.HTTPStatus()
	}
	return http.StatusOK
}
