package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/celflow/celflow/engine"
)

// failoverMetrics count decode failovers (docs/operations.md, Failover).
type failoverMetrics struct {
	total *prometheus.CounterVec // node, reason, outcome
	stall prometheus.Histogram
}

// stallBuckets, in seconds: from the break to the continuation's first
// byte, one prefill plus a decode's first token.
var stallBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newFailoverMetrics(f factory) *failoverMetrics {
	return &failoverMetrics{
		total: f.counterVec("failovers_total",
			"Decode replies whose leg broke mid-reply while failover was on, by node, what broke (reason: reset, idle_timeout, error_event, truncated, kv_pull) and what came of it (outcome: continued, failed, budget, off, refused_*).",
			"node", "reason", "outcome"),
		stall: f.histogram("failover_stall_seconds",
			"Time from a decode leg's break to its continuation's first byte, for failovers that continued.",
			stallBuckets),
	}
}

// observeFailovers counts one outcome's failovers.
func (m *Metrics) observeFailovers(o *engine.Outcome) {
	for _, f := range o.Failovers {
		m.fo.total.WithLabelValues(o.Node, failoverLabel(f.Reason), failoverLabel(f.Outcome)).Inc()
		if f.Stall > 0 {
			m.fo.stall.Observe(f.Stall.Seconds())
		}
	}
}

// failoverLabel keeps a reason or outcome a label: the node types' closed
// vocabularies are short snake_case words; anything else is "other".
func failoverLabel(s string) string {
	if s == "" || len(s) > 32 {
		return ReasonOther
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && c != '_' {
			return ReasonOther
		}
	}
	return s
}
