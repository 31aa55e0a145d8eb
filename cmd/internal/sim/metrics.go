package sim

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// simMetrics is a worker's GET /metrics: the subset of vLLM's (v1 engine)
// Prometheus series that load- and cache-aware routers read, with vLLM's
// names and labels (model_name, engine), so that a scraper written for vLLM
// reads the simulator unchanged. Counters carry the _total suffix that
// vLLM's prometheus_client appends on the wire (client_golang exposes the
// name as given). Each worker has its own
// registry: two simulators in one process do not share series.
type simMetrics struct {
	reg *prometheus.Registry

	running, waiting   prometheus.Gauge
	usage, usageLegacy prometheus.Gauge
	queries, hits      prometheus.Counter
	prompt, generation prometheus.Counter

	// mu guards the running requests' block counts behind kv_cache_usage_perc.
	mu     sync.Mutex
	inUse  int // KV blocks held by running requests
	blocks int // the cache's capacity in blocks
}

func newSimMetrics(model string, kv *KVCache) *simMetrics {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	m := &simMetrics{reg: prometheus.NewRegistry(), blocks: kv.Capacity()}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(c)
		return c
	}
	m.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	m.usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
	m.usageLegacy = gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: use vllm:kv_cache_usage_perc.")
	m.queries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	m.hits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	m.prompt = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.generation = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{"engine": "0", "block_size": strconv.Itoa(kv.BlockSize()),
			"num_gpu_blocks": strconv.Itoa(kv.Capacity()), "enable_prefix_caching": "True"},
	})
	info.Set(1)
	m.reg.MustRegister(info)
	return m
}

func (m *simMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// lookup counts one prefix cache query of prompt tokens, cached of them hits.
func (m *simMetrics) lookup(prompt, cached int) {
	m.queries.Add(float64(prompt))
	m.hits.Add(float64(cached))
}

// start marks a request running that holds blocks KV blocks (its prompt and
// output, as vLLM allocates them); the returned func ends it.
func (m *simMetrics) start(blocks int) (end func()) {
	m.running.Inc()
	m.addBlocks(blocks)
	var once sync.Once
	return func() {
		once.Do(func() {
			m.running.Dec()
			m.addBlocks(-blocks)
		})
	}
}

func (m *simMetrics) addBlocks(d int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inUse += d
	u := min(float64(m.inUse)/float64(m.blocks), 1)
	m.usage.Set(u)
	m.usageLegacy.Set(u)
}
