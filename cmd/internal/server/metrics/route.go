package metrics

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The truth check of cache-aware routing (docs/operations.md, Cache-aware
// routing), read from the watched upstream client at scrape time: its
// predictions by outcome and in tokens, per pool, and each scored
// endpoint's standing. Labels stay bounded and carry no address: pools are
// the configured ones, a worker is <pool>[<index>] as configured (as the KV
// event series name it); the log line names its URL. The counters live in the client, so a reload that
// builds a new client (a changed upstream section) starts them over, which
// Prometheus reads as a counter reset.
var (
	descRoutePredictions = prometheus.NewDesc(Namespace+"_route_predictions_total",
		"Decode legs whose cached prefix was predicted (cache-aware picker, predicted conditional-decode hits), by pool and outcome against the worker's cached_tokens: tp (predicted and cached), fp (predicted, none cached), fn (none predicted, cached), tn.",
		[]string{"pool", "outcome"}, nil)
	descRoutePredicted = prometheus.NewDesc(Namespace+"_route_predicted_cached_tokens_total",
		"Prompt tokens predicted cached on the picked worker, by pool.", []string{"pool"}, nil)
	descRouteReported = prometheus.NewDesc(Namespace+"_route_reported_cached_tokens_total",
		"Prompt tokens the workers reported cached (usage.prompt_tokens_details.cached_tokens) on legs with a prediction, by pool.", []string{"pool"}, nil)
	descRouteCorrect = prometheus.NewDesc(Namespace+"_route_correct_cached_tokens_total",
		"Per leg the smaller of predicted and reported cached tokens, by pool: precision = correct / predicted, recall = correct / reported.", []string{"pool"}, nil)
	descRoutePrompt = prometheus.NewDesc(Namespace+"_route_prompt_tokens_total",
		"Prompt tokens of the legs with a prediction, by pool: the prefix-cache hit rate is reported / prompt.", []string{"pool"}, nil)
	descRouteMispredicting = prometheus.NewDesc(Namespace+"_route_mispredicting",
		"1 while the endpoint's last upstream.routing.mispredict_window predicted hits fell below mispredict_precision, by pool and worker (<pool>[<index>]).",
		[]string{"pool", "worker"}, nil)
	descRoutePrecision = prometheus.NewDesc(Namespace+"_route_window_precision",
		"Share of the predicted cached tokens the worker confirmed over the endpoint's last full window, by pool and worker (<pool>[<index>]; absent before one).",
		[]string{"pool", "worker"}, nil)
)

type routeCollector struct{ fm *failureMetrics }

func (c routeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRoutePredictions, descRoutePredicted, descRouteReported,
		descRouteCorrect, descRoutePrompt, descRouteMispredicting, descRoutePrecision} {
		ch <- d
	}
}

func (c routeCollector) Collect(ch chan<- prometheus.Metric) {
	up := c.fm.up.Load()
	if up == nil {
		return
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, p := range up.RouteStats() {
		counter(descRoutePredictions, p.TP, p.Pool, "tp")
		counter(descRoutePredictions, p.FP, p.Pool, "fp")
		counter(descRoutePredictions, p.FN, p.Pool, "fn")
		counter(descRoutePredictions, p.TN, p.Pool, "tn")
		counter(descRoutePredicted, p.PredictedTokens, p.Pool)
		counter(descRouteReported, p.ReportedTokens, p.Pool)
		counter(descRouteCorrect, p.CorrectTokens, p.Pool)
		counter(descRoutePrompt, p.PromptTokens, p.Pool)
		for i, e := range p.Endpoints {
			pos := p.Pool + "[" + strconv.Itoa(i) + "]"
			v := 0.0
			if e.Mispredicting {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descRouteMispredicting, prometheus.GaugeValue, v, p.Pool, pos)
			if !math.IsNaN(e.Precision) {
				ch <- prometheus.MustNewConstMetric(descRoutePrecision, prometheus.GaugeValue, e.Precision, p.Pool, pos)
			}
		}
	}
}
