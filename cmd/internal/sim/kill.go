package sim

import (
	"fmt"
	"net/http"
	"os"
)

// FaultExitCode is the exit status of a worker that an exit-after fault
// ended (0, 1 and 2 are Main's own).
const FaultExitCode = 3

// killPoint is where a reply dies: after sent of its tokens, by the
// process exiting (exit) or by the connection being aborted.
type killPoint struct {
	sent int
	exit bool
}

// killPoint finds where the faults cut-after=K and exit-after=K end this
// reply, if they do. K counts answer tokens; in deterministic mode it counts
// from the base of the prompt (determ.go), so a continuation that starts at
// or past K is not killed again and the same header fault can ride on both
// legs of a failover. A fault fires when its point lies within the reply:
// K = t0 (the tokens the prompt already holds) only for a fresh prompt
// (K = 0 cuts right after the headers), K = t0 + count after the last token
// but before the finish event. The earlier point wins; exit wins a tie.
func (g genPlan) killPoint(f Fault) (killPoint, bool) {
	t0 := 0
	if g.det != nil {
		t0 = g.det.tail
	}
	var best killPoint
	found := false
	for _, k := range []struct {
		at   *int
		exit bool
	}{{f.ExitAfter, true}, {f.CutAfter, false}} {
		if k.at == nil {
			continue
		}
		sent := *k.at - t0
		if sent < 0 || sent > g.count || sent == 0 && t0 > 0 {
			continue
		}
		if !found || sent < best.sent {
			best, found = killPoint{sent: sent, exit: k.exit}, true
		}
	}
	return best, found
}

// die plays a kill point: what was written goes out (written: a stream
// whose headers went out; flushing before any write would send a 200
// status line), then either the process exits at once (no deferred
// cleanup, like a crash or SIGKILL: the kernel closes its sockets) or the
// connection is aborted.
func (w *Worker) die(c *call, k killPoint, written bool) {
	if written {
		_ = http.NewResponseController(c.rw).Flush()
	}
	if k.exit {
		fmt.Fprintf(os.Stderr, "celflow-sim %s: fault exit-after: exiting (status %d) after %d tokens of a %s reply\n", w.cfg.Name, FaultExitCode, k.sent, c.role)
		os.Exit(FaultExitCode)
	}
	abortConn(c.rw)
}

// abortConn ends the reply abnormally without a reset: on HTTP/1.1 the
// connection is closed, so a chunked body lacks its terminating chunk (and
// a reply without headers gets none); on HTTP/2, where the connection
// cannot be taken over, the handler aborts, which resets the stream
// (RST_STREAM).
func abortConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
