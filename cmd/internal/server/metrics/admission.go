package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/engine"
)

// Admission series (cmd/internal/server/admission; docs/operations.md). The route label
// is the route's path (RouteLabel of class int(route), front.RouteClass).
var waitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

type admissionMetrics struct {
	admitted *prometheus.CounterVec   // route
	rejected *prometheus.CounterVec   // route, reason
	wait     *prometheus.HistogramVec // route, result

	// Per class (int(engine.Route)), resolved once: the fast path of every
	// request counts without hashing label values.
	byClass []classSeries

	watch sync.Once

	// priorityErrors is celflow_cel_errors_total{node="",expr="priority"}.
	priorityErrors prometheus.Counter
}

type classSeries struct {
	admitted prometheus.Counter
	rejected map[admission.Reason]prometheus.Counter
}

// series returns the class's counters, nil outside the routes.
func (a *admissionMetrics) series(class int) *classSeries {
	if class <= 0 || class >= len(a.byClass) {
		return nil
	}
	return &a.byClass[class]
}

func newAdmissionMetrics(f factory) *admissionMetrics {
	a := &admissionMetrics{
		admitted: f.counterVec("admission_admitted_total",
			"Inference requests admitted, by route (at once or after a wait).", "route"),
		rejected: f.counterVec("admission_rejected_total",
			"Inference requests not admitted, by route and reason (queue_full, queue_timeout, shutting_down, cancelled).",
			"route", "reason"),
		wait: f.histogramVec("admission_wait_seconds",
			"Time spent in the admission queue by requests that had to wait, by route and result (admitted, rejected).",
			waitBuckets, "route", "result"),
	}
	a.byClass = make([]classSeries, len(engine.Routes)+1)
	for _, rt := range engine.Routes {
		l := RouteLabel(rt)
		cs := &a.byClass[int(rt)]
		cs.admitted = a.admitted.WithLabelValues(l)
		cs.rejected = map[admission.Reason]prometheus.Counter{}
		for _, r := range admission.Reasons {
			cs.rejected[r] = a.rejected.WithLabelValues(l, r.String())
		}
	}
	return a
}

// AdmissionObserver is the front's Options.AdmissionObserver.
func (m *Metrics) AdmissionObserver() admission.Observer { return (*admissionObserver)(m.admission()) }

type admissionObserver admissionMetrics

func (o *admissionObserver) Admitted(class int, waited time.Duration) {
	a := (*admissionMetrics)(o)
	if cs := a.series(class); cs != nil {
		cs.admitted.Inc()
	} else {
		a.admitted.WithLabelValues(RouteLabel(engine.Route(class))).Inc()
	}
	if waited > 0 {
		a.wait.WithLabelValues(RouteLabel(engine.Route(class)), "admitted").Observe(waited.Seconds())
	}
}

// PriorityError implements admission.PriorityObserver.
func (o *admissionObserver) PriorityError() { o.priorityErrors.Inc() }

func (o *admissionObserver) Rejected(class int, r admission.Reason, waited time.Duration) {
	a := (*admissionMetrics)(o)
	if cs := a.series(class); cs != nil && cs.rejected[r] != nil {
		cs.rejected[r].Inc()
	} else {
		a.rejected.WithLabelValues(RouteLabel(engine.Route(class)), r.String()).Inc()
	}
	if waited > 0 {
		a.wait.WithLabelValues(RouteLabel(engine.Route(class)), "rejected").Observe(waited.Seconds())
	}
}

// WatchAdmission exports the in-flight view as gauges read at scrape time:
// celflow_admission_in_flight{route}, celflow_admission_queue_depth{route},
// celflow_admission_limit{route} and celflow_admission_max_in_flight (0:
// no bound). Only the first call registers.
func (m *Metrics) WatchAdmission(v admission.View) {
	m.admission().watch.Do(func() { m.reg.MustRegister(&viewCollector{v}) })
}

var (
	inFlightDesc = prometheus.NewDesc(Namespace+"_admission_in_flight",
		"Admitted inference requests not yet finished, by route.", []string{"route"}, nil)
	queueDesc = prometheus.NewDesc(Namespace+"_admission_queue_depth",
		"Inference requests waiting for admission, by route.", []string{"route"}, nil)
	limitDesc = prometheus.NewDesc(Namespace+"_admission_limit",
		"The in-flight bound of a route (0: none).", []string{"route"}, nil)
	maxDesc = prometheus.NewDesc(Namespace+"_admission_max_in_flight",
		"The whole server's in-flight bound (0: none).", nil, nil)
)

type viewCollector struct{ v admission.View }

func (c *viewCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- queueDesc
	ch <- limitDesc
	ch <- maxDesc
}

func (c *viewCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range engine.Routes {
		l, class := RouteLabel(rt), int(rt)
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(c.v.ClassInFlight(class)), l)
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(c.v.ClassQueued(class)), l)
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(c.v.ClassLimit(class)), l)
	}
	ch <- prometheus.MustNewConstMetric(maxDesc, prometheus.GaugeValue, float64(c.v.Limit()))
}

func (m *Metrics) admission() *admissionMetrics { return m.adm }
