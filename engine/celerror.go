package engine

import (
	"strings"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// The run-time CEL error policy. An expression can fail at run
// time for some requests only (a division by zero, an index past the end,
// a missing map key, .value() of an empty optional, a bad conversion or
// regex); one such expression must not turn every matching request into a
// 500 unnoticed. Under the workflow's `defaults.on_cel_error`:
//
//   - "safe" reads the failed expression as its safe value:
//     a guard as false (the node is skipped), an edge condition as false
//     (the edge does not hold), a target rule's `if` as false (the rule
//     does not match), a retry rule's `if` as false (no retry);
//   - "fail" (the default, docs/acceptance.md 49: a failed guard is never
//     skipped unless the workflow says so) ends the request with a 500
//     naming the node only.
//
// Either way the event is recorded on the outcome (Outcome.CELErrors: the
// metrics' celflow_cel_errors_total{node,expr} reads it), logged at most
// once per celenv.ErrorLogInterval per (node, expr) with the error and the
// request id, and added to the node's span as a "cel_error" event.
// foreach lists are not covered: a failed list has no safe value.

// OnCELError values of `defaults.on_cel_error`.
const (
	OnCELErrorSafe = "safe"
	OnCELErrorFail = "fail"
)

// CELError is one run-time evaluation error of an expression of a node.
type CELError struct {
	// Expr names the expression by kind and a short stable identifier,
	// never by its text nor by request data (a bounded metric label):
	// "guard", "edge:<from>-><to>", "target[<k>].if", "retry.if".
	Expr  string
	Error string // the evaluation error, for logs and traces (never a client reply)
	Fails bool   // on_cel_error: fail made it the run's error (a 500)
}

// Effect says what the policy did with the error, for explain.
func (ce CELError) Effect() string {
	if ce.Fails {
		return "the request fails with 500 (on_cel_error: fail)"
	}
	var s string
	switch {
	case ce.Expr == "guard":
		s = "read as false: the node is skipped"
	case strings.HasPrefix(ce.Expr, "edge:"):
		s = "read as false: the edge does not hold"
	case strings.HasPrefix(ce.Expr, "target["):
		s = "read as false: the rule does not match"
	case ce.Expr == "retry.if":
		s = "read as false: no retry"
	default:
		s = "read as its safe value"
	}
	return s + " (on_cel_error: safe)"
}

// AttrCELExpr and AttrCELError annotate a "cel_error" span event.
const (
	AttrCELExpr  = attribute.Key("celflow.cel.expr")
	AttrCELError = attribute.Key("celflow.cel.error")
)

// celFails says whether the workflow's policy turns CEL errors into 500s.
func (w *Workflow) celFails() bool { return w.onCELError == OnCELErrorFail }

// celError records a run-time error of node i's expression expr and says
// whether the policy fails the request (the caller then fails the run with
// its own client message; otherwise it uses the expression's safe value).
func (rs *run) celError(i int, expr string, err error) bool {
	o := &rs.out[i]
	ce := CELError{Expr: expr, Error: err.Error(), Fails: rs.w.celFails()}
	o.CELErrors = append(o.CELErrors, ce)
	policy := rs.w.policy()
	if !rs.r.Stubbed && rs.w.celLog != nil {
		if ok, suppressed := rs.w.celLog.Admit(o.Node, expr); ok {
			fields := logrus.Fields{"node": o.Node, "expr": expr, "error": ce.Error, "on_cel_error": policy}
			if rs.r.Req != nil {
				fields["request_id"] = rs.r.Req.ID
			}
			if suppressed > 0 {
				fields["suppressed"] = suppressed
			}
			logrus.WithFields(fields).Warn("CEL expression failed at run time")
		}
	}
	// A node whose span already ended (an edge condition is evaluated after
	// its source node ended) gets the event on the request's span; the
	// others get it when their span ends (endSpan).
	if rs.tracer != nil && rs.decided[i] {
		if sp := trace.SpanFromContext(rs.ctx); sp.IsRecording() {
			sp.AddEvent("cel_error", trace.WithAttributes(celEventAttrs(o.Node, ce)...))
		}
	}
	return rs.w.celFails()
}

func (w *Workflow) policy() string {
	if w.onCELError == "" {
		return OnCELErrorFail
	}
	return w.onCELError
}

func celEventAttrs(node string, ce CELError) []attribute.KeyValue {
	return []attribute.KeyValue{AttrNodeID.String(node), AttrCELExpr.String(ce.Expr), AttrCELError.String(ce.Error)}
}

// OnCELError is the workflow's run-time CEL error policy ("safe" or "fail").
func (w *Workflow) OnCELError() string { return w.policy() }
