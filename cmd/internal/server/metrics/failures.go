package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Failures made visible (issue 12): retries by node and reason, ejections
// and re-admissions of direct-mode endpoints by pool, and the healthy
// endpoints per pool. Labels stay bounded: node ids come from the loaded
// workflow, reasons from engine.RetryReasons, pools are the three roles.
type failureMetrics struct {
	retries      *prometheus.CounterVec // node, reason
	celErrors    *prometheus.CounterVec // node, expr
	ejections    *prometheus.CounterVec // pool
	readmissions *prometheus.CounterVec // pool
	drains       *prometheus.CounterVec // pool
	up           atomic.Pointer[upstream.Client]
}

var (
	descHealthy = prometheus.NewDesc(Namespace+"_endpoints_healthy",
		"Direct-mode endpoints currently in rotation (neither ejected nor draining), by pool.", []string{"pool"}, nil)
	descDraining = prometheus.NewDesc(Namespace+"_endpoints_draining",
		"Direct-mode endpoints that said they are draining (a 503 with Retry-After or Connection: close) and take no new legs, by pool.", []string{"pool"}, nil)
	descEndpoints = prometheus.NewDesc(Namespace+"_endpoints",
		"Direct-mode endpoints configured, by pool.", []string{"pool"}, nil)
)

func newFailureMetrics(f factory) *failureMetrics {
	fm := &failureMetrics{}
	fm.retries = f.counterVec("retries_total",
		"Node attempts that failed and were retried, by node and reason (transport, timeout, unavailable, status_5xx, status_4xx, bad_reply, protocol, other).",
		"node", "reason")
	// expr is engine.CELError.Expr ("guard", "edge:a->b", "target[0].if",
	// "retry.if") or "priority": a kind and an identifier from the loaded
	// configs, never the expression text or request data.
	fm.celErrors = f.counterVec("cel_errors_total",
		"CEL expressions that failed at run time, by node and expression (guard, edge:<from>-><to>, target[<k>].if, retry.if; priority with node \"\" for admission.priority).",
		"node", "expr")
	fm.ejections = f.counterVec("endpoint_ejections_total",
		"Direct-mode endpoints taken out of rotation by passive health, by pool.", "pool")
	fm.readmissions = f.counterVec("endpoint_readmissions_total",
		"Direct-mode endpoints back in rotation after an ejection expired, by pool.", "pool")
	fm.drains = f.counterVec("endpoint_drains_total",
		"Drain signals from direct-mode endpoints (a 503 with Retry-After or Connection: close), by pool; not failures.", "pool")
	for _, r := range []upstream.Role{upstream.RoleEncode, upstream.RolePrefill, upstream.RoleDecode} {
		fm.ejections.WithLabelValues(string(r))
		fm.readmissions.WithLabelValues(string(r))
		fm.drains.WithLabelValues(string(r))
	}
	f.reg.MustRegister(healthCollector{fm})
	return fm
}

// healthCollector reads the watched client's pools at scrape time.
type healthCollector struct{ fm *failureMetrics }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHealthy
	ch <- descDraining
	ch <- descEndpoints
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	up := c.fm.up.Load()
	if up == nil {
		return
	}
	for _, p := range up.Health() {
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, float64(p.Healthy), string(p.Role))
		ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, float64(p.Draining), string(p.Role))
		ch <- prometheus.MustNewConstMetric(descEndpoints, prometheus.GaugeValue, float64(p.Endpoints), string(p.Role))
	}
}

// WatchUpstream makes c the client whose pools the endpoint gauges report.
// Call it when c starts serving (at start, and after a reload that built a
// new client), not before: a reload that fails keeps the old client.
func (m *Metrics) WatchUpstream(c *upstream.Client) {
	if c != nil {
		m.failures.up.Store(c)
	}
}

// HealthHook is the upstream client's health hook (Client.SetHealthHook):
// it counts ejections and re-admissions by pool.
func (m *Metrics) HealthHook() func(upstream.HealthEvent) { return m.healthEvent }

func (m *Metrics) healthEvent(ev upstream.HealthEvent) {
	pool := roleLabel(ev.Role)
	if ev.Draining {
		m.failures.drains.WithLabelValues(pool).Inc()
		return
	}
	if ev.Ejected {
		m.failures.ejections.WithLabelValues(pool).Inc()
	} else {
		m.failures.readmissions.WithLabelValues(pool).Inc()
	}
}

// observeRetries counts one outcome's retried attempts.
func (m *Metrics) observeRetries(o *engine.Outcome) {
	for k := range o.Retries {
		m.failures.retries.WithLabelValues(o.Node, retryReasonLabel(o.Retries[k].Reason)).Inc()
	}
}

// observeCELErrors counts one outcome's run-time CEL errors.
func (m *Metrics) observeCELErrors(o *engine.Outcome) {
	for k := range o.CELErrors {
		m.failures.celErrors.WithLabelValues(o.Node, o.CELErrors[k].Expr).Inc()
	}
}

func retryReasonLabel(r string) string {
	for _, v := range engine.RetryReasons {
		if r == v {
			return r
		}
	}
	return engine.RetryOther
}
