package front

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/redact"
)

// NewLogger builds celflow's logger: JSON lines, or text when format is
// "text" or when format is "" and out is a terminal.
func NewLogger(out io.Writer, format string, level logrus.Level) (*logrus.Logger, error) {
	l := logrus.New()
	if err := ConfigureLogger(l, out, format, level); err != nil {
		return nil, err
	}
	return l, nil
}

// ConfigureLogger applies NewLogger's rules to an existing logger (serve
// configures logrus's standard logger, which nodes log through).
func ConfigureLogger(l *logrus.Logger, out io.Writer, format string, level logrus.Level) error {
	switch format {
	case "json", "text":
	case "":
		format = "json"
		if isTerminal(out) {
			format = "text"
		}
	default:
		return fmt.Errorf("unknown log format %q (want json or text)", format)
	}
	l.SetOutput(out)
	l.SetLevel(level)
	if format == "text" {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.RFC3339Nano})
	} else {
		l.SetFormatter(&JSONFormatter{TimestampFormat: time.RFC3339Nano})
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// entry is the request's log entry: the canonical id on every line, and the
// length (never the value) of a rejected inbound id.
func (s *Server) entry(x *exchange) *logrus.Entry {
	return &logrus.Entry{Logger: s.log, Data: requestFields(x, 0)}
}

// requestFields starts a request's fields (request_id, and
// rejected_request_id_len when an inbound id was rejected) with room for n
// more, so the caller's inserts never grow the map.
func requestFields(x *exchange, n int) logrus.Fields {
	f := make(logrus.Fields, n+2)
	f["request_id"] = x.id
	if x.rejected >= 0 {
		f["rejected_request_id_len"] = x.rejected
	}
	return f
}

// summaryFields is the most logRequest adds to requestFields: method, path,
// status, duration_ms, bytes, route, workflow, nodes, error, code, partial.
const summaryFields = 11

// logRequest writes the one summary line of a request: route, status,
// duration, workflow and each node's status:duration. Probes log at debug
// level, client disconnects and client errors at info, upstream and
// timeout failures at warn, internal errors at error; a reply ended
// abnormally (partial) at warn or above; a refusal (429, 503 shutting_down)
// at debug, counted in refusallog.go's aggregate line. Nothing is built when
// the level is disabled; otherwise the fields are one map, handed to logrus
// without WithField/WithFields copies (logrus still clones it once to log).
func (s *Server) logRequest(x *exchange, r *http.Request) {
	level := logrus.InfoLevel
	switch {
	case x.probe && x.err == nil:
		level = logrus.DebugLevel
	case x.err == nil, x.err.Kind == engine.KindCancelled:
	case x.err.Kind == engine.KindInternal:
		level = logrus.ErrorLevel
	case x.err.HTTPStatus() >= 500:
		level = logrus.WarnLevel
	}
	if x.abort && x.err != nil && x.err.Kind != engine.KindCancelled && level > logrus.WarnLevel {
		// an abnormal end is at least a warning (logrus levels grow less severe)
		level = logrus.WarnLevel
	}
	if kind := refusalKindOf(x); kind != "" {
		// Refusals come in floods: logged in aggregate (refusallog.go),
		// each one's own line at debug level only.
		s.refusals.add(kind)
		level = logrus.DebugLevel
	}
	if !s.log.IsLevelEnabled(level) {
		return
	}
	f := requestFields(x, summaryFields)
	f["method"] = r.Method
	f["path"] = cutPath(r.URL.EscapedPath())
	f["status"] = x.sentStatus()
	f["duration_ms"] = float64(time.Since(x.start).Microseconds()) / 1000
	f["bytes"] = x.bytes
	if x.route != 0 {
		f["route"] = x.route.String()
	}
	if rep := x.report; rep != nil {
		f["workflow"] = rep.Workflow
		f["nodes"] = nodeSummary(rep.Outcomes)
	}
	msg := "request"
	if x.err != nil {
		f["error"] = x.err.Error()
		f["code"] = x.err.Code()
		if x.err.Kind == engine.KindCancelled {
			msg = "request cancelled by the client"
		}
	}
	if x.abort {
		f["partial"] = true
		msg = "partial response: the reply was ended abnormally"
		if x.stalled { // a client failure, not the worker's (stream_write_timeout)
			msg = "partial response: stream ended, the client stopped reading"
		}
	}
	(&logrus.Entry{Logger: s.log, Data: f}).Log(level, msg)
}

// summaryBufs holds nodeSummary's scratch buffers: the summary is built in
// one and copied once into its string.
var summaryBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// nodeSummary is "id=status:duration[/http][:attempts=N][:failover=reason/outcome,...] ..." in the
// workflow's node order; attempts=N appears when the node was retried
// (issue 12: "prefill=succeeded:41ms/200:attempts=2" says its first attempt
// failed; each retry has its own log line with the reason).
func nodeSummary(out []engine.Outcome) string {
	if len(out) == 0 {
		return ""
	}
	bp := summaryBufs.Get().(*[]byte)
	b := (*bp)[:0]
	for i, o := range out {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, o.Node...)
		b = append(b, '=')
		b = append(b, o.Status.String()...)
		b = append(b, ':')
		b = append(b, o.Duration.Round(time.Microsecond).String()...)
		if o.HTTPStatus != 0 {
			b = append(b, '/')
			b = strconv.AppendInt(b, int64(o.HTTPStatus), 10)
		}
		if o.Attempt > 1 {
			b = append(b, ":attempts="...)
			b = strconv.AppendInt(b, int64(o.Attempt), 10)
		}
		for k, f := range o.Failovers { // decode failover: ":failover=reset/continued,kv_pull/failed"
			if k == 0 {
				b = append(b, ":failover="...)
			} else {
				b = append(b, ',')
			}
			b = append(b, f.Reason...)
			b = append(b, '/')
			b = append(b, f.Outcome...)
		}
	}
	s := string(b)
	if cap(b) <= 64<<10 { // a huge workflow's buffer is not kept
		*bp = b
		summaryBufs.Put(bp)
	}
	return s
}

// debugRequest logs the request's headers and body through internal/redact,
// only when debug logging is on.
func (s *Server) debugRequest(x *exchange, r *http.Request, body []byte) {
	if !s.log.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	f := requestFields(x, 4)
	f["method"] = r.Method
	f["path"] = cutPath(r.URL.EscapedPath())
	f["headers"] = redact.Header(r.Header)
	f["body"] = redact.Body(body)
	(&logrus.Entry{Logger: s.log, Data: f}).Debug("request received")
}
