package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TLS is the series of certificate reloads. Build it once per registry
// with NewTLS (serve does, whether or not TLS is on, so dashboards see
// zeros rather than gaps).
type TLS struct {
	reloads  *prometheus.CounterVec // scope, result
	notAfter *prometheus.GaugeVec   // scope
}

// TLS scopes: the listener's certificate and the upstream client's material.
const (
	TLSScopeServer   = "server"
	TLSScopeUpstream = "upstream"
)

// NewTLS registers celflow_tls_reloads_total and
// celflow_tls_certificate_expiry_timestamp_seconds on m's registry.
func NewTLS(m *Metrics) *TLS {
	f := factory{m.reg}
	t := &TLS{
		reloads: f.counterVec("tls_reloads_total",
			"TLS material reloads that found changed files, by scope (server, upstream) and result (success; failure: the previous material serves on).",
			"scope", "result"),
		notAfter: f.gaugeVec("tls_certificate_expiry_timestamp_seconds",
			"NotAfter of the certificate in use, by scope (server: the listener's; upstream: celflow's client certificate), in Unix seconds.",
			"scope"),
	}
	for _, s := range []string{TLSScopeServer, TLSScopeUpstream} {
		for _, r := range []string{"success", "failure"} {
			t.reloads.WithLabelValues(s, r)
		}
	}
	return t
}

// Reload counts one reload of a changed set.
func (t *TLS) Reload(scope string, ok bool) {
	r := "failure"
	if ok {
		r = "success"
	}
	t.reloads.WithLabelValues(scope, r).Inc()
}

// Expiry records the NotAfter of the certificate a scope uses now.
func (t *TLS) Expiry(scope string, notAfter time.Time) {
	t.notAfter.WithLabelValues(scope).Set(float64(notAfter.Unix()))
}
