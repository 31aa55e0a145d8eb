package front

import (
	"net/http"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/admission"
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
	n, err := x.ResponseWriter.Write(b)
	x.bytes += int64(n)
	return n, err
}

// Flush sends buffered bytes now (each SSE chunk).
func (x *exchange) Flush() {
	if !x.wroteHeader {
		x.WriteHeader(http.StatusOK)
	}
	if f, ok := x.ResponseWriter.(http.Flusher); ok {
		f.Flush()
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
