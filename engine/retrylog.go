package engine

import (
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Retries made visible (issue 12): every attempt the scheduler retries is
// logged (warn), recorded on the outcome (Outcome.Retries: the metrics'
// celflow_retries_total and the request summary read it) and added to the
// node's span as a "retry" event; the span also carries the reasons of all
// failed attempts (celflow.attempt.failures) beside celflow.attempt.

// Retry reasons, the closed vocabulary of celflow_retries_total{reason}.
const (
	RetryTransport   = "transport"   // no response: connect, reset, TLS...
	RetryTimeout     = "timeout"     // time to first byte or the node's timeout expired
	RetryUnavailable = "unavailable" // the upstream answered 503
	RetryStatus5xx   = "status_5xx"  // another 5xx
	RetryStatus4xx   = "status_4xx"  // a 4xx a retry predicate chose to retry
	RetryBadReply    = "bad_reply"   // a 2xx whose body did not parse
	RetryProtocol    = "protocol"    // the upstream broke the protocol
	RetryOther       = "other"
)

// RetryReasons lists the vocabulary, for pre-created metric series.
var RetryReasons = []string{RetryTransport, RetryTimeout, RetryUnavailable, RetryStatus5xx,
	RetryStatus4xx, RetryBadReply, RetryProtocol, RetryOther}

// RetryReason classifies a failed attempt's error (status: the upstream's
// answer, 0 for none).
func RetryReason(e *Error, status int) string {
	if e == nil {
		return RetryOther
	}
	switch e.Kind {
	case KindUpstreamTimeout:
		return RetryTimeout
	case KindUpstreamUnavailable:
		return RetryUnavailable
	case KindUpstreamRejected:
		if e.Status >= 500 {
			return RetryStatus5xx
		}
		return RetryStatus4xx
	case KindUpstreamProtocol:
		return RetryProtocol
	case KindBadGateway:
		switch {
		case status >= 500 || e.Status >= 500:
			return RetryStatus5xx
		case status >= 200 && status < 300:
			return RetryBadReply
		}
		return RetryTransport
	}
	return RetryOther
}

// AttemptFailure is one failed attempt that the scheduler retried.
type AttemptFailure struct {
	Attempt    int    // 1-based number of the failed attempt
	Reason     string // RetryReason
	HTTPStatus int    // the upstream's answer, 0 for none
	Endpoint   string // the endpoint (direct mode) or upstream URL the attempt went to, "" when unknown
	Error      string // the error, for logs and traces (never a client reply)
}

// AttrAttemptFailures lists the reasons of a node's retried attempts, in order.
const AttrAttemptFailures = attribute.Key("celflow.attempt.failures")

// noteRetry records, logs and traces the failure of node i's attempt that
// is about to be retried after wait. It runs on the scheduler goroutine.
func (rs *run) noteRetry(i int, c *completion, wait time.Duration) {
	o := &rs.out[i]
	f := AttemptFailure{Attempt: rs.execs[i].Attempt, Reason: RetryReason(c.err, c.res.HTTPStatus),
		HTTPStatus: c.res.HTTPStatus, Endpoint: attemptEndpoint(c.res.Attrs)}
	if c.err != nil {
		f.Error = c.err.Error()
	}
	o.Retries = append(o.Retries, f)
	fields := logrus.Fields{"node": o.Node, "attempt": f.Attempt, "next_attempt": f.Attempt + 1,
		"reason": f.Reason, "backoff_ms": float64(wait.Microseconds()) / 1000, "error": f.Error}
	if rs.r.Req != nil {
		fields["request_id"] = rs.r.Req.ID
	}
	if f.Endpoint != "" {
		fields["endpoint"] = f.Endpoint
	}
	if f.HTTPStatus != 0 {
		fields["http.response.status_code"] = f.HTTPStatus
	}
	if !rs.r.Stubbed {
		logrus.WithFields(fields).Warn("node attempt failed: retrying")
	}
	if rs.tracer != nil && rs.spans[i] != nil && rs.spans[i].IsRecording() {
		kv := []attribute.KeyValue{AttrAttempt.Int(f.Attempt), attribute.String("celflow.retry.reason", f.Reason)}
		if f.Endpoint != "" {
			kv = append(kv, attribute.String("celflow.endpoint", f.Endpoint))
		}
		if f.HTTPStatus != 0 {
			kv = append(kv, AttrHTTPStatus.Int(f.HTTPStatus))
		}
		rs.spans[i].AddEvent("retry", trace.WithAttributes(kv...))
	}
}

// attemptEndpoint is where an attempt went, from the leg attributes nodes
// return: the picked endpoint in direct mode, else the upstream URL.
func attemptEndpoint(attrs map[string]any) string {
	if s, ok := attrs["celflow.endpoint"].(string); ok {
		return s
	}
	if s, ok := attrs["celflow.upstream.url"].(string); ok {
		return s
	}
	return ""
}

// retryReasons lists an outcome's retry reasons for its span.
func retryReasons(o *Outcome) []string {
	r := make([]string, len(o.Retries))
	for k, f := range o.Retries {
		r[k] = f.Reason
	}
	return r
}
