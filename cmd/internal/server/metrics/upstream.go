package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
)

// Kinds of celflow_upstream_errors_total.
const (
	KindTransport = "transport"  // no response: connect, reset, TLS...
	KindTimeout   = "timeout"    // time to first byte expired
	KindCancelled = "cancelled"  // the client went away (or the run ended) mid-leg
	KindDeadline  = "deadline"   // the request deadline expired mid-leg
	KindStatus4xx = "status_4xx" // an answer 4xx other than 412
	KindStatus5xx = "status_5xx"
)

// roleLabel names the leg's role; render legs have no EPP-Profile role.
func roleLabel(r upstream.Role) string {
	switch r {
	case upstream.RoleEncode, upstream.RolePrefill, upstream.RoleDecode:
		return string(r)
	case "":
		return "render"
	}
	return ReasonOther
}

// LegErrorKind classifies one leg's result; "" is not an error. A 412 is
// conditional decode's cache miss, a normal answer.
func LegErrorKind(status int, err error) string {
	var te *upstream.TimeoutError
	var tr *upstream.TransportError
	switch {
	case err == nil:
	case errors.As(err, &te):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return KindDeadline
	case errors.As(err, &tr):
		return KindTransport
	default:
		return KindTransport
	}
	switch {
	case status >= 500:
		return KindStatus5xx
	case status >= 400 && status != 412:
		return KindStatus4xx
	}
	return ""
}

// UpstreamHook is the upstream client's leg hook (upstream.Client.OnLeg):
// it observes every leg's time to response headers by role, and counts the
// failed ones by kind.
func (m *Metrics) UpstreamHook() func(role upstream.Role, status int, d time.Duration, err error) {
	return func(role upstream.Role, status int, d time.Duration, err error) {
		r := roleLabel(role)
		m.legDur.WithLabelValues(r).Observe(d.Seconds())
		if k := LegErrorKind(status, err); k != "" {
			m.legErrors.WithLabelValues(r, k).Inc()
		}
	}
}
