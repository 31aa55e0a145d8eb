package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/celflow/celflow/cmd/internal/server/front"
)

// connMetrics are the front's connection-level series: connections refused
// at accept, early resets, failed TLS handshakes. Their log lines are
// aggregated (front/refusallog.go); these counters count every one.
type connMetrics struct {
	refused    *prometheus.CounterVec // reason
	resets     prometheus.Counter
	handshakes prometheus.Counter
}

func newConnMetrics(f factory) *connMetrics {
	c := &connMetrics{
		refused: f.counterVec("connections_refused_total",
			"Client connections closed at accept, by reason (max_connections: server.max_connections reached; client_resets: the address went over server.reset_limit).",
			"reason"),
		resets: f.counter("client_early_resets_total",
			"Requests their client abandoned early (an HTTP/2 stream reset or a closed connection before the reply, or within 1s of arrival), counted against server.reset_limit."),
		handshakes: f.counter("tls_handshake_failures_total",
			"Failed TLS handshakes on the listener (logged in aggregate)."),
	}
	for _, r := range []string{front.RefusedMaxConnections, front.RefusedResets} {
		c.refused.WithLabelValues(r)
	}
	return c
}

// ConnObserver is the front's Options.Conns.
func (m *Metrics) ConnObserver() front.ConnObserver { return m.conns }

func (c *connMetrics) ConnRefused(reason string) { c.refused.WithLabelValues(reason).Inc() }
func (c *connMetrics) EarlyReset()               { c.resets.Inc() }
func (c *connMetrics) TLSHandshakeFailed()       { c.handshakes.Inc() }
