package metrics

import (
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/engine"
)

// Reasons, the closed vocabulary of celflow_node_outcomes_total{reason}
// besides error codes (engine.Error.Code) and "" for succeeded nodes.
const (
	ReasonGuardFalse = "guard_false" // skipped: its when: guard was false
	ReasonEnded      = "ended"       // skipped: another node answered first
	ReasonNoEdge     = "no_edge"     // omitted: none of its incoming edges fired
	ReasonNoItems    = "no_items"    // skipped: a fan-out node with an empty list
	ReasonCancelled  = "cancelled"   // cancelled with no error recorded
	ReasonTimeout    = "timeout"     // timed out with no error recorded
	ReasonOther      = "other"       // anything else: free text never becomes a label
)

// errorCodes are the codes engine.Error.Code can return; with the reasons
// above they bound the reason label.
var errorCodes = func() map[string]bool {
	m := map[string]bool{}
	for k := range 256 { // every Kind, including ones added later
		m[(&engine.Error{Kind: engine.Kind(k), Status: 400}).Code()] = true
		m[(&engine.Error{Kind: engine.Kind(k), Status: 500}).Code()] = true
	}
	return m
}()

// codeLabels caches the status code label values ("200", "412", ...).
var codeLabels = func() []string {
	s := make([]string, 600)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func codeLabel(status int) string {
	if status >= 0 && status < len(codeLabels) {
		return codeLabels[status]
	}
	return ReasonOther
}

// ObserveRequest counts one client request that has no report (rejected
// before a workflow ran: 404, 405, 413, 400 invalid_json...). workflow may
// be "". route must be a route template or a fixed name ("unmatched"),
// never a raw path (RouteLabel, RouteUnmatched).
func (m *Metrics) ObserveRequest(route, workflow string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, workflow, codeLabel(status)).Inc()
	m.requestDur.WithLabelValues(route, workflow).Observe(d.Seconds())
}

// ObserveReport records one finished request from its run report: the
// request counter and duration (rep.Duration; Observe uses the front's
// own), node durations and outcomes,
// fan-out sizes, conditional-decode results, hand-over times (a node's
// output "handover", a time.Duration), aggregated fallbacks, and
// (from run, which may be nil) abandoned prefills. status is the HTTP
// status the client got (499 when it went away). rep may be nil, which
// counts the request alone with a zero duration.
func (m *Metrics) ObserveReport(route string, status int, rep *engine.Report, run *engine.Run) {
	var d time.Duration
	if rep != nil {
		d = rep.Duration
	}
	m.observe(route, status, d, rep, run)
}

// observe is ObserveReport with the request duration given apart.
func (m *Metrics) observe(route string, status int, d time.Duration, rep *engine.Report, run *engine.Run) {
	if rep == nil {
		m.ObserveRequest(route, "", status, d)
		return
	}
	wf := rep.Workflow
	m.ObserveRequest(route, wf, status, d)
	aggregated := false
	for i := range rep.Outcomes {
		o := &rep.Outcomes[i]
		if o.Status == engine.StatusPending {
			continue
		}
		reason := Reason(o)
		m.observeRetries(o)
		m.observeCELErrors(o)
		m.observeFailovers(o)
		m.nodeOutcomes.WithLabelValues(wf, o.Node, o.Type, o.Status.String(), reason).Inc()
		ran := o.Status != engine.StatusSkipped && o.Status != engine.StatusOmitted
		if ran {
			m.nodeDur.WithLabelValues(wf, o.Node, o.Type).Observe(o.Duration.Seconds())
		}
		if (ran || reason == ReasonNoItems) && isFanOut(o) {
			m.fanout.WithLabelValues(wf, o.Node).Observe(float64(len(o.Items)))
		}
		if o.Type == "conditional-decode" {
			if r := condResult(o); r != "" {
				m.condDecode.WithLabelValues(r).Inc()
			}
		}
		if v, ok := o.Outputs["aggregated"].(bool); ok && v {
			aggregated = true
		}
		// A node that measured the hand-over (decode: prefill answer → its
		// request on the wire) reports it as the output "handover".
		if v, ok := o.Outputs["handover"].(time.Duration); ok {
			m.handover.Observe(v.Seconds())
		}
	}
	if aggregated {
		m.aggregated.Inc()
	}
	if run != nil && run.Abandoned() {
		m.abandoned.Inc()
	}
}

// isFanOut: the node had items, or its type is a fan-out type (an empty
// list leaves no items to look at).
func isFanOut(o *engine.Outcome) bool {
	if len(o.Items) > 0 {
		return true
	}
	t, ok := engine.LookupType(o.Type)
	return ok && t.FanOut
}

// condResult classifies a conditional-decode outcome: it answered (hit),
// got or predicted a 412 (miss), or failed otherwise (error). A node that
// did not run counts nowhere.
func condResult(o *engine.Outcome) string {
	switch {
	case o.Responded:
		return "hit"
	case o.HTTPStatus == 412:
		return "miss"
	case o.Status == engine.StatusFailed || o.Status == engine.StatusTimedOut:
		return "error"
	}
	return ""
}

// Reason maps an outcome to the bounded reason label. Skip and omit
// reasons are matched from the engine's text; failures use the error's
// code; anything unrecognised is "other".
func Reason(o *engine.Outcome) string {
	switch o.Status {
	case engine.StatusSucceeded, engine.StatusPending:
		return ""
	case engine.StatusSkipped:
		if r := textReason(o.Reason); r != "" {
			return r
		}
		return ReasonOther
	case engine.StatusOmitted:
		if r := textReason(o.Reason); r != "" {
			return r
		}
		return ReasonNoEdge // omitted means no incoming edge fired
	}
	if o.Err != nil {
		if c := o.Err.Code(); errorCodes[c] {
			return c
		}
		return ReasonOther
	}
	switch o.Status {
	case engine.StatusCancelled:
		return ReasonCancelled
	case engine.StatusTimedOut:
		return ReasonTimeout
	}
	return ReasonOther
}

// textReason recognises the engine's skip/omit reasons however they are
// spelled ("guard false", "guard_false", "no incoming edge fired"...).
func textReason(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "":
		return ""
	case strings.HasPrefix(s, "guard") || strings.HasPrefix(s, "when"):
		return ReasonGuardFalse
	case strings.HasPrefix(s, "ended") || strings.HasPrefix(s, "run ended"):
		return ReasonEnded
	case strings.Contains(s, "no item") || strings.Contains(s, "no_item") || strings.Contains(s, "empty"):
		return ReasonNoItems
	case strings.Contains(s, "edge"):
		return ReasonNoEdge
	}
	return ""
}
