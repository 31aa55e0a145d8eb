// Package metrics is celflow's Prometheus instrumentation: one registry
// with the request, node, upstream-leg and build series, served on
// GET /metrics.
//
// Label values are bounded by construction: routes, workflow names, node
// ids and types come from the loaded config; statuses, reasons, roles and
// error kinds from closed vocabularies (free text maps to "other"). No
// request id, URL or endpoint address is ever a label.
package metrics

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every celflow series.
const Namespace = "celflow"

// Buckets, in seconds. Requests and legs span a fast decode-only hop (ms)
// to minute-long generations; nodes and TTFT are mostly sub-second.
var (
	requestBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	nodeBuckets    = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	ttftBuckets    = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	handBuckets    = []float64{.00005, .0001, .0002, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}
	fanoutBuckets  = []float64{0, 1, 2, 4, 8, 16, 32, 64, 128}
)

// Metrics owns celflow's registry. All methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec   // route, workflow, code
	requestDur   *prometheus.HistogramVec // route, workflow
	inFlight     prometheus.Gauge
	nodeDur      *prometheus.HistogramVec // workflow, node, type
	nodeOutcomes *prometheus.CounterVec   // workflow, node, type, status, reason
	legDur       *prometheus.HistogramVec // role
	legErrors    *prometheus.CounterVec   // role, kind
	ttft         *prometheus.HistogramVec // route
	handover     prometheus.Histogram
	fanout       *prometheus.HistogramVec // workflow, node
	condDecode   *prometheus.CounterVec   // result
	aggregated   prometheus.Counter
	abandoned    prometheus.Counter
	reloads      *prometheus.CounterVec // result
	buildInfo    *prometheus.GaugeVec   // version, goversion
	failures     *failureMetrics        // retries, ejections, healthy endpoints (failures.go)
	fo           *failoverMetrics       // decode failovers (failover.go)
	adm          *admissionMetrics      // admission.go
	conns        *connMetrics           // conn.go
	kv           *kvMetrics             // kvevents.go
}

// New builds the registry with celflow's series, the Go runtime and the
// process collectors. build_info carries Version (see mainVersion) until
// SetBuildInfo replaces it.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg}
	m.requests = f.counterVec("requests_total",
		"Client requests answered, by route, workflow and HTTP status code (499: client went away).",
		"route", "workflow", "code")
	m.requestDur = f.histogramVec("request_duration_seconds",
		"Client request duration, to the end of the reply (whole stream included).",
		requestBuckets, "route", "workflow")
	m.inFlight = f.gauge("requests_in_flight", "Client requests being served.")
	m.nodeDur = f.histogramVec("node_duration_seconds",
		"Duration of nodes that ran (all attempts and items), skipped and omitted nodes excluded.",
		nodeBuckets, "workflow", "node", "type")
	m.nodeOutcomes = f.counterVec("node_outcomes_total",
		"Node outcomes by status and reason (guard_false, ended, no_edge, no_items, an error code, other).",
		"workflow", "node", "type", "status", "reason")
	m.legDur = f.histogramVec("upstream_leg_duration_seconds",
		"Upstream leg time until response headers or failure, by role (render, encode, prefill, decode).",
		requestBuckets, "role")
	m.legErrors = f.counterVec("upstream_errors_total",
		"Failed upstream legs by role and kind (transport, timeout, cancelled, deadline, status_4xx, status_5xx).",
		"role", "kind")
	m.ttft = f.histogramVec("stream_ttft_seconds",
		"Time from request arrival to the first byte of a streamed reply.", ttftBuckets, "route")
	m.handover = f.histogram("handover_seconds",
		"Hand-over time: prefill answer received to decode request on the wire.", handBuckets)
	m.fanout = f.histogramVec("fanout_items",
		"Items per fan-out node execution (0: the node had no items).", fanoutBuckets, "workflow", "node")
	m.condDecode = f.counterVec("conditional_decode_total",
		"Conditional decode results: hit (decode answered), miss (412), error.", "result")
	m.aggregated = f.counter("aggregated_fallback_total",
		"Requests that took an aggregated fallback path (decode without prefill's KV).")
	m.abandoned = f.counter("prefill_abandoned_total",
		"Requests whose client left after prefill answered and before decode was sent (the KV lease frees the blocks).")
	m.reloads = f.counterVec("config_reloads_total", "Config reloads by result (success, failure).", "result")
	m.buildInfo = f.gaugeVec("build_info", "Always 1; labels carry the celflow version and Go version.",
		"version", "goversion")
	m.failures = newFailureMetrics(f)
	f.reg.MustRegister(routeCollector{m.failures}) // route.go
	m.fo = newFailoverMetrics(f)
	m.adm = newAdmissionMetrics(f)
	m.adm.priorityErrors = m.failures.celErrors.WithLabelValues("", "priority")
	m.conns = newConnMetrics(f)
	m.kv = &kvMetrics{}
	m.reg.MustRegister(kvCollector{m.kv})
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Pre-create the closed-vocabulary series so dashboards see zeros, not gaps.
	for _, r := range []string{"hit", "miss", "error"} {
		m.condDecode.WithLabelValues(r)
	}
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	m.SetBuildInfo(mainVersion())
	return m
}

// Version is the celflow version that New puts in celflow_build_info. The
// celflow binary's main sets it once, before serving, to the version the
// Makefile stamped into it (cmd/internal/buildversion); it is the same for
// every registry of the process, so a package variable is no per-generation
// state. Empty: the main module's version from the build, or "dev".
var Version string

// mainVersion is Version, else the main module's version from the build, else "dev".
func mainVersion() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Registry is the underlying registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text (or negotiated
// OpenMetrics/protobuf) format, for GET /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // promhttp_metric_handler_errors_total
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// SetBuildInfo sets celflow_build_info{version,goversion} 1, replacing the
// previous version.
func (m *Metrics) SetBuildInfo(version string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}

// ConfigReload counts a config reload attempt.
func (m *Metrics) ConfigReload(ok bool) {
	r := "failure"
	if ok {
		r = "success"
	}
	m.reloads.WithLabelValues(r).Inc()
}

// InFlight marks a request as started and returns the function that marks
// it done: `defer m.InFlight()()`.
func (m *Metrics) InFlight() (done func()) {
	m.inFlight.Inc()
	return m.inFlight.Dec
}

// ObserveTTFT records a streamed reply's time to first byte, measured from
// request arrival. The front calls it once per streaming request, when the
// first body byte is written.
func (m *Metrics) ObserveTTFT(route string, d time.Duration) {
	m.ttft.WithLabelValues(route).Observe(d.Seconds())
}

// ObserveHandover records one hand-over time (prefill answer → decode
// request on the wire, docs/benchmarks.md, Hand-over); the decode node calls it.
func (m *Metrics) ObserveHandover(d time.Duration) { m.handover.Observe(d.Seconds()) }
