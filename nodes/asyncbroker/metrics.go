package asyncbroker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/celflow/celflow/connectors/async"
)

// Metrics are the async front's and dispatcher's Prometheus series. A nil
// *Metrics records nothing.
type Metrics struct {
	submits      *prometheus.CounterVec
	dispatches   prometheus.Counter
	redeliveries prometheus.Counter
	deadLetters  prometheus.Counter
	fenced       prometheus.Counter
	claimErrors  prometheus.Counter
	waiters      prometheus.Gauge
	waitRefused  prometheus.Counter
	served       *prometheus.CounterVec
	budget       prometheus.Gauge
	running      prometheus.Gauge
	depth        *prometheus.GaugeVec
	oldest       *prometheus.GaugeVec
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		submits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "celflow_async_submits_total",
			Help: "Queued-mode submits by outcome (created, reattached, conflict, full)."}, []string{"outcome"}),
		dispatches: prometheus.NewCounter(prometheus.CounterOpts{Name: "celflow_async_dispatches_total",
			Help: "Queued requests the dispatcher started running."}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "celflow_async_redeliveries_total",
			Help: "Requests taken over from a claimer that stopped renewing (XAUTOCLAIM)."}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{Name: "celflow_async_dead_letters_total",
			Help: "Requests dead-lettered after max_deliveries."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "celflow_async_fenced_finishes_total",
			Help: "Results dropped because the claim had been taken over."}),
		claimErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "celflow_async_claim_errors_total",
			Help: "Claims and result stores Redis refused or failed (memory limit, read-only, away); the dispatcher backs off and retries."}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{Name: "celflow_async_waiters",
			Help: "Long-polls (GET ?wait and wait mode) this replica holds."}),
		waitRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "celflow_async_waits_refused_total",
			Help: "Long-polls answered at once because async.max_waiters were held."}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "celflow_async_results_served_total",
			Help: "GET /v1/requests/{id} answers by kind (result, pending, unknown)."}, []string{"kind"}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{Name: "celflow_async_gate_budget",
			Help: "The dispatcher's current in-flight budget per pool (halved on a worker 429)."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "celflow_async_dispatched_in_flight",
			Help: "Queued requests this replica is running."}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "celflow_async_queue_depth",
			Help: "Entries in each queue lane (queued and claimed)."}, []string{"queue", "lane"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "celflow_async_oldest_age_seconds",
			Help: "Age of the oldest entry of each queue lane."}, []string{"queue", "lane"}),
	}
	reg.MustRegister(m.submits, m.dispatches, m.redeliveries, m.deadLetters, m.fenced, m.claimErrors, m.waiters, m.waitRefused, m.served,
		m.budget, m.running, m.depth, m.oldest)
	return m
}

func (m *Metrics) submitted(o async.Outcome) {
	if m == nil {
		return
	}
	name := map[async.Outcome]string{async.Created: "created", async.Reattached: "reattached",
		async.Conflict: "conflict", async.FullTenant: "full", async.FullQueue: "full"}[o]
	m.submits.WithLabelValues(name).Inc()
}

func (m *Metrics) servedKind(kind string) {
	if m != nil {
		m.served.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) claimed(n int, st async.Claimed) {
	if m == nil {
		return
	}
	m.dispatches.Add(float64(n))
	m.redeliveries.Add(float64(st.Redelivered))
	m.deadLetters.Add(float64(st.DeadLettered))
}

// pollDepths refreshes the depth gauges every interval until ctx ends.
func (m *Metrics) pollDepths(ctx context.Context, b *async.Builtin, every time.Duration) {
	if m == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if ds, err := b.Depths(ctx); err == nil {
			for _, d := range ds {
				m.depth.WithLabelValues(d.Queue, d.Lane).Set(float64(d.Length))
				m.oldest.WithLabelValues(d.Queue, d.Lane).Set(d.OldestAge.Seconds())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Metrics) fencedInc() {
	if m != nil {
		m.fenced.Inc()
	}
}

func (m *Metrics) gauge(budget, running int) {
	if m != nil {
		m.budget.Set(float64(budget))
		m.running.Set(float64(running))
	}
}

func (m *Metrics) claimErrorInc() {
	if m == nil {
		return
	}
	m.claimErrors.Inc()
}

func (m *Metrics) waitersAdd(d int) {
	if m == nil {
		return
	}
	m.waiters.Add(float64(d))
}

func (m *Metrics) waitRefusedInc() {
	if m == nil {
		return
	}
	m.waitRefused.Inc()
}
