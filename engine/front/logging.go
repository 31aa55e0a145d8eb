package front

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/redact"
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
		l.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
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
	e := s.log.WithField("request_id", x.id)
	if x.rejected >= 0 {
		e = e.WithField("rejected_request_id_len", x.rejected)
	}
	return e
}

// logRequest writes the one summary line of a request: route, status,
// duration, workflow and each node's status:duration. Probes log at debug
// level, client disconnects and client errors at info, upstream and
// timeout failures at warn, internal errors at error. Nothing is built when
// the level is disabled.
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
	if x.abort && x.err != nil && x.err.Kind != engine.KindCancelled && level < logrus.WarnLevel {
		level = logrus.WarnLevel
	}
	if !s.log.IsLevelEnabled(level) {
		return
	}
	f := logrus.Fields{
		"method":      r.Method,
		"path":        cutPath(r.URL.EscapedPath()),
		"status":      x.sentStatus(),
		"duration_ms": float64(time.Since(x.start).Microseconds()) / 1000,
		"bytes":       x.bytes,
	}
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
	}
	s.entry(x).WithFields(f).Log(level, msg)
}

// nodeSummary is "id=status:duration ..." in the workflow's node order.
func nodeSummary(out []engine.Outcome) string {
	var b strings.Builder
	for i, o := range out {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(o.Node)
		b.WriteByte('=')
		b.WriteString(o.Status.String())
		b.WriteByte(':')
		b.WriteString(o.Duration.Round(time.Microsecond).String())
		if o.HTTPStatus != 0 {
			b.WriteByte('/')
			b.WriteString(strconv.Itoa(o.HTTPStatus))
		}
	}
	return b.String()
}

// debugRequest logs the request's headers and body through engine/redact,
// only when debug logging is on.
func (s *Server) debugRequest(x *exchange, r *http.Request, body []byte) {
	if !s.log.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	s.entry(x).WithFields(logrus.Fields{
		"method":  r.Method,
		"path":    cutPath(r.URL.EscapedPath()),
		"headers": redact.Header(r.Header),
		"body":    redact.Body(body),
	}).Debug("request received")
}
