package front

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// Refusals are logged in aggregate. Under overload every refused request
// used to log its own summary line (158 MB in 30 s at twice the admission
// bound), and every failed TLS handshake a warning: the log became the
// bottleneck and buried everything else. Each refusal is still counted in
// metrics (requests_total by code, the admission and connection series);
// the log gets, per kind, one line for the first refusal after a quiet
// spell and then at most one line per refusalInterval with the count
// ("admission: 12345 requests refused with 429 overloaded in the last
// 10s"). With debug logging on, refused requests keep their own summary
// lines too, at debug level.

// refusalInterval is the longest a refusal waits to be logged, and the
// shortest gap between two lines of the same kind.
const refusalInterval = 10 * time.Second

// Refusal kinds: the request refusals by error code, the connection
// refusals by ConnObserver reason, and net/http's complaints.
const (
	refusalTLSHandshake = "tls_handshake"
	refusalAcceptError  = "accept_error"
)

// refusalMsgs are the lines' texts (%d is the count); emit appends the
// interval.
var refusalMsgs = map[string]string{
	"overloaded":          "admission: %d request(s) refused with 429 overloaded",
	"queue_timeout":       "admission: %d request(s) refused with 429 queue_timeout",
	"shutting_down":       "%d request(s) refused with 503 shutting_down",
	RefusedMaxConnections: "%d connection(s) refused at accept: server.max_connections reached",
	RefusedResets:         "%d connection(s) refused at accept: their address went over server.reset_limit",
	refusalTLSHandshake:   "%d TLS handshake(s) failed",
	refusalAcceptError:    "%d accept error(s) (file-descriptor limit?); net/http retries",
}

// refusalKindOf is the aggregated kind of a request's summary line, "" for
// a request logged on its own.
func refusalKindOf(x *exchange) string {
	if x.err == nil || x.probe || x.abort {
		return ""
	}
	switch x.err.Kind {
	case engine.KindOverloaded, engine.KindQueueTimeout, engine.KindShuttingDown:
		return x.err.Code()
	}
	return ""
}

// refusalLog counts refusals per kind and logs them in aggregate. The zero
// interval means refusalInterval. A nil *refusalLog drops everything.
type refusalLog struct {
	log   *logrus.Logger
	every time.Duration

	mu     sync.Mutex
	kinds  map[string]*refusalCount
	closed bool
}

type refusalCount struct {
	n     int         // refusals since the last line
	last  string      // the latest sample (a handshake error's text)
	timer *time.Timer // armed while the kind is in an aggregation interval
}

func newRefusalLog(l *logrus.Logger, every time.Duration) *refusalLog {
	if every <= 0 {
		every = refusalInterval
	}
	return &refusalLog{log: l, every: every, kinds: map[string]*refusalCount{}}
}

// add counts one refusal of kind.
func (a *refusalLog) add(kind string) { a.addSample(kind, "") }

// addSample counts one refusal of kind, sample being its own text (kept
// for the next line: the latest one is logged with the count).
func (a *refusalLog) addSample(kind, sample string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	k := a.kinds[kind]
	if k == nil {
		k = &refusalCount{}
		a.kinds[kind] = k
	}
	if sample != "" {
		k.last = sample
	}
	if k.timer != nil || a.closed {
		k.n++
		a.mu.Unlock()
		return
	}
	// The first refusal after a quiet spell is logged at once; the next
	// ones are summed up when the interval ends.
	k.timer = time.AfterFunc(a.every, func() { a.flush(kind) })
	last := k.last
	k.last = ""
	a.mu.Unlock()
	a.emit(kind, 1, last, true)
}

// flush ends an interval of kind: the count is logged and a new interval
// starts, or, when nothing was refused, the kind falls quiet.
func (a *refusalLog) flush(kind string) {
	a.mu.Lock()
	k := a.kinds[kind]
	n, last := k.n, k.last
	k.n, k.last = 0, ""
	if n == 0 || a.closed {
		k.timer = nil
		a.mu.Unlock()
		return
	}
	k.timer.Reset(a.every)
	a.mu.Unlock()
	a.emit(kind, n, last, false)
}

// close logs what is still counted and stops the timers (end of Run).
func (a *refusalLog) close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.closed = true
	type pending struct {
		kind, last string
		n          int
	}
	var out []pending
	for kind, k := range a.kinds {
		if k.timer != nil {
			k.timer.Stop()
			k.timer = nil
		}
		if k.n > 0 {
			out = append(out, pending{kind, k.last, k.n})
			k.n = 0
		}
	}
	a.mu.Unlock()
	for _, p := range out {
		a.emit(p.kind, p.n, p.last, false)
	}
}

// emit logs one line: the first refusal after a quiet spell (first), or
// the count of an interval.
func (a *refusalLog) emit(kind string, n int, last string, first bool) {
	f := logrus.Fields{"refusal": kind, "count": n}
	if last != "" {
		f["last"] = last
	}
	msg, ok := refusalMsgs[kind]
	if !ok {
		msg = kind + ": %d refusal(s)"
	}
	msg = fmt.Sprintf(msg, n)
	if first {
		msg += "; more are summed up every " + a.every.String()
	} else {
		msg += " in the last " + a.every.String()
	}
	a.log.WithFields(f).Warn(msg)
}

// errorLogWriter is http.Server.ErrorLog's destination: net/http's
// complaints go to the log at warn level, except the ones a client can
// cause at will (a failed TLS handshake: a port scan, a client without
// the CA) and accept errors (EMFILE repeats every retry), which are
// aggregated and counted.
type errorLogWriter struct {
	out io.Writer // the logger's warn-level writer
	agg *refusalLog
	obs ConnObserver
}

func (w *errorLogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	switch {
	case strings.HasPrefix(line, "http: TLS handshake error"):
		if w.obs != nil {
			w.obs.TLSHandshakeFailed()
		}
		w.agg.addSample(refusalTLSHandshake, line)
		return len(p), nil
	case strings.HasPrefix(line, "http: Accept error"):
		w.agg.addSample(refusalAcceptError, line)
		return len(p), nil
	}
	return w.out.Write(p)
}
