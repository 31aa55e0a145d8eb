package upstream

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Cache-aware routing (docs/operations.md, Cache-aware routing). With
// picker "cache-aware", a decode leg (the decode role's pool, and a named
// pool, which may serve decode) goes to the endpoint with the best score
//
//	score = cache_weight × cached / cacheable − load_weight × load / (max load + 1)
//
// cached is how many of the prompt's tokens the endpoint is believed to
// hold, counted as vLLM counts usage.prompt_tokens_details.cached_tokens
// (whole blocks, never the prompt's last token); cacheable is the most any
// endpoint could hold ((len−1) rounded down to whole blocks). The belief
// comes from the pool's CacheSource (the workers' own KV events) when one is
// installed and has a trustworthy view of that endpoint, else from the
// prediction index (prefix.go: what celflow sent there). load is the
// endpoint's legs in flight (picked, reply headers not yet back) and the
// replies being relayed from it (Target.StartRelay) plus, when
// routing.metrics_interval is set, the worker's own vllm:num_requests_running
// and vllm:num_requests_waiting (scrape.go). max load is over the eligible
// endpoints of this pick, so the load term is between 0 and load_weight.
// Ties go to the next endpoint in rotation. A prompt whose tokens are
// unknown (a chat request without a render node) scores on load alone.
//
// The prompt's key (CacheKey) also names its LoRA adapter, resolved from
// the request's model by the pool's own model list (adapters.go), and its
// media items, folded in as vLLM folds them into its block hashes
// (cachekey.go); before a pool's model list is in, a prompt naming a model
// scores on load alone.
//
// Prefill and encode pools under "cache-aware" pick the least loaded
// endpoint: the prediction index is fed by decode legs and the truth check
// reads decode's usage, so only decode has a cache view to score on.

const pickCacheAware = "cache-aware"

// Routing is upstream.routing: the cache-aware picker's weights, the
// optional scrape of each worker's own load, and the truth check of the
// predictions (truth.go).
type Routing struct {
	// CacheWeight and LoadWeight weigh the score's two terms; both 0
	// (unset) means the defaults, 1 and 0.5. Either alone may be 0: pure
	// load, pure cache.
	CacheWeight float64
	LoadWeight  float64
	// MetricsInterval > 0 reads each decode endpoint's GET /metrics at most
	// that often (on demand: a pick that finds the figures older starts one
	// scrape), adding vLLM's running and waiting requests to its load.
	// Figures older than three intervals are not used. 0: off.
	MetricsInterval time.Duration
	// MetricsTimeout bounds one scrape (default 1s).
	MetricsTimeout time.Duration
	// MispredictWindow is how many predicted hits of one endpoint are
	// judged together (default 32); MispredictPrecision the share of the
	// predicted cached tokens the worker must confirm over that window
	// (default 0.5); below it the endpoint is reported as mispredicting and
	// its CacheSource view is not used for DistrustFor (default 30s).
	MispredictWindow    int
	MispredictPrecision float64
	DistrustFor         time.Duration
}

// Defaults of Routing.
//
// The load weight's default, 0.5, is measured (`celflow bench --only
// cache`, docs/benchmarks.md): with 1 the KV-event arm stayed 3.5 points of
// hit rate below the oracle (the load term moved conversations off the
// worker holding them); with 0.5 it matched the oracle and had the lowest
// TTFT of 0, 0.25, 0.5 and 1.
const (
	DefaultCacheWeight         = 1.0
	DefaultLoadWeight          = 0.5
	DefaultMetricsTimeout      = time.Second
	DefaultMispredictWindow    = 32
	DefaultMispredictPrecision = 0.5
	DefaultDistrustFor         = 30 * time.Second
)

// routingDefaults checks r and fills in its defaults; problems go to bad
// with the key's pointer under /upstream.
func routingDefaults(r Routing, bad func(ptr, format string, a ...any)) Routing {
	weight := func(v *float64, key string) {
		if math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0 {
			bad("/routing/"+key, "must be a number ≥ 0, got %v", *v)
			*v = 1
		}
	}
	weight(&r.CacheWeight, "cache_weight")
	weight(&r.LoadWeight, "load_weight")
	if r.CacheWeight == 0 && r.LoadWeight == 0 {
		r.CacheWeight, r.LoadWeight = DefaultCacheWeight, DefaultLoadWeight
	}
	if r.MetricsInterval < 0 {
		bad("/routing/metrics_interval", "must be ≥ 0s, got %s", r.MetricsInterval)
	}
	defDur(&r.MetricsTimeout, DefaultMetricsTimeout, "/routing/metrics_timeout", bad)
	defInt(&r.MispredictWindow, DefaultMispredictWindow, "/routing/mispredict_window", bad)
	if r.MispredictWindow > 1<<16 {
		bad("/routing/mispredict_window", "must be at most 65536, got %d", r.MispredictWindow)
	}
	switch p := r.MispredictPrecision; {
	case p == 0:
		r.MispredictPrecision = DefaultMispredictPrecision
	case math.IsNaN(p) || p < 0 || p > 1:
		bad("/routing/mispredict_precision", "must be between 0 and 1, got %v", p)
	}
	defDur(&r.DistrustFor, DefaultDistrustFor, "/routing/distrust_for", bad)
	return r
}

// RouteInfo is how a target was chosen by its cached prefix: the picker's
// score and its terms, for span attributes, and the prediction the truth
// check compares with the worker's reply (Target.ObserveCached).
type RouteInfo struct {
	Picker       string  // "cache-aware", or "predict" for a conditional-decode hit
	Score        float64 // the winning score (cache-aware)
	CachedBlocks int     // predicted cached blocks of PrefixBlockTokens on the endpoint
	Load         float64 // the endpoint's load term before weighting: in-flight legs + relays + running + waiting
	Source       string  // "events" (the pool's CacheSource) or "index" (the prediction index)
	PromptTokens int
	// Predicted is the cached_tokens the worker is predicted to report.
	Predicted int
}

// Sources of a prediction.
const (
	SourceEvents = "events"
	SourceIndex  = "index"
)

// PickKey picks for a prompt: from the named pool a target rule chose
// (pool != ""), else the role's. Under the cache-aware picker a decode or
// named pool scores its endpoints by k's cached prefix and their load, and
// the target carries the prediction (Target.Route); otherwise it is Pick or
// PickPool. In gateway mode the gateway (and the EPP) decide.
func (c *Client) PickKey(r Role, pool string, k CacheKey, exclude ...string) (*Target, error) {
	ci := c.impl
	if pool == "" {
		if !ci.direct || roleIndex(r) < 0 || ci.pools[roleIndex(r)] == nil {
			return ci.pick(r, exclude)
		}
		return ci.pickIn(ci.pools[roleIndex(r)], exclude, k), nil
	}
	if !ci.direct {
		return c.PickPool(pool, exclude...)
	}
	p := ci.poolNamed(pool)
	if p == nil {
		return nil, fmt.Errorf("%w: no pool named %q", ErrNoEndpoint, pool)
	}
	return ci.pickIn(p, exclude, k), nil
}

// pickIn picks from p: scored when p is cache-aware, by rotation or load
// otherwise.
func (c *client) pickIn(p *pool, exclude []string, k CacheKey) *Target {
	if !p.cacheAware {
		// No score, but the prediction index records the prompt under its
		// media items and its adapter when the pool's list names it
		// (conditional decode predicts from it); before the list is in, as
		// the base model's.
		t := p.take(p.choose(exclude))
		if len(k.Tokens) > 0 && t.ep != nil && t.ep.prefix != nil {
			k, _ = c.lora(p, k)
			t.key = k
			t.key.Tokens = nil
		}
		return t
	}
	if p.scraper != nil {
		p.scraper.bind(c.rt)
	}
	k, known := c.lora(p, k)
	pr := c.newPrompt(k)
	defer pr.free()
	// Before the pool's adapter list is in, the model may be an adapter,
	// whose blocks are not the base model's (adapters.go): load alone.
	pr.blind = !known
	e, ri := p.chooseScored(exclude, pr, c.cacheSourceOf(p))
	t := p.take(e)
	t.Route = ri
	t.key, t.unnamed = k, !known
	t.key.Tokens = nil
	return t
}

// prompt is what scoring needs of one prompt, computed once per pick.
type prompt struct {
	key       CacheKey
	bs        int
	cacheable int      // tokens any worker could report cached: (len−1) in whole blocks
	hs        []uint64 // chained names of the full blocks (prefix.go)
	buf       *[]uint64
	blind     bool // no cache prediction: every endpoint holds 0 of it
}

func (c *client) newPrompt(k CacheKey) *prompt {
	bs := c.cfg.PrefixBlockTokens
	pr := &prompt{key: k, bs: bs}
	if n := len(k.Tokens); n > 0 {
		pr.cacheable = (n - 1) / bs * bs
	}
	if nb := len(k.Tokens) / bs; nb > 0 {
		pr.buf = hashBufs.Get().(*[]uint64)
		hs, ok := blockNames(k, bs, (*pr.buf)[:0])
		if !ok { // items without offsets: the index cannot name the blocks
			hs = hs[:0]
		}
		pr.hs = hs
	}
	return pr
}

func (pr *prompt) free() {
	if pr.buf != nil {
		*pr.buf = pr.hs[:0]
		hashBufs.Put(pr.buf)
		pr.buf, pr.hs = nil, nil
	}
}

// cachedOn is how many of pr's tokens e is believed to hold, capped at
// what the worker can report, and where the belief comes from.
func (p *pool) cachedOn(e *endpoint, pr *prompt, src CacheSource, now int64) (int, string) {
	if len(pr.key.Tokens) == 0 || pr.blind {
		return 0, SourceIndex
	}
	if src != nil && !e.truth.distrusted(now) {
		if n, ok := src.Cached(e.base, pr.key); ok {
			return max(0, min(n, pr.cacheable)), SourceEvents
		}
	}
	if e.prefix == nil || len(pr.hs) == 0 {
		return 0, SourceIndex
	}
	return min(e.prefix.longest(pr.hs)*pr.bs, pr.cacheable), SourceIndex
}

// candidate is one eligible endpoint of a scored pick.
type candidate struct {
	e      *endpoint
	cached int
	src    string
	load   float64
}

// chooseScored is choose for a cache-aware pool: the same passes (healthy
// and not excluded; healthy; any), scoring the eligible endpoints of the
// first pass that has one.
func (p *pool) chooseScored(exclude []string, pr *prompt, src CacheSource) (*endpoint, *RouteInfo) {
	now := p.now().UnixNano()
	p.sweep(now)
	var stack [16]candidate
	for pass := 0; pass < 3; pass++ {
		ok := func(e *endpoint) bool {
			return pass == 2 || (e.healthy(now) && (pass == 1 || !e.excluded(exclude)))
		}
		if e, ri := p.best(ok, pr, src, now, stack[:0]); e != nil {
			return e, ri
		}
	}
	return p.eps[0], nil // unreachable: pass 2 accepts every endpoint
}

// best scores the eligible endpoints in rotation order; the first of the
// highest score wins.
func (p *pool) best(ok func(*endpoint) bool, pr *prompt, src CacheSource, now int64, cs []candidate) (*endpoint, *RouteInfo) {
	n := uint64(len(p.eps))
	start := p.next.Add(1) - 1
	maxLoad := 0.0
	for k := range n {
		e := p.eps[(start+k)%n]
		if !ok(e) {
			continue
		}
		cached, from := p.cachedOn(e, pr, src, now)
		c := candidate{e: e, cached: cached, src: from, load: p.load(e, now)}
		maxLoad = max(maxLoad, c.load)
		cs = append(cs, c)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	w := p.routing
	bi, bestScore := -1, 0.0
	for i, c := range cs {
		s := -w.LoadWeight * c.load / (maxLoad + 1)
		if pr.cacheable > 0 {
			s += w.CacheWeight * float64(c.cached) / float64(pr.cacheable)
		}
		if bi < 0 || s > bestScore {
			bi, bestScore = i, s
		}
	}
	c := cs[bi]
	return c.e, &RouteInfo{Picker: pickCacheAware, Score: bestScore, CachedBlocks: c.cached / pr.bs, Load: c.load,
		Source: c.src, PromptTokens: len(pr.key.Tokens), Predicted: c.cached}
}

// load is e's load term: its legs in flight and replies being relayed,
// plus the worker's running and waiting requests when scraped recently
// enough. It may start a scrape.
func (p *pool) load(e *endpoint, now int64) float64 {
	l := float64(e.inflight.Load())
	if p.cacheAware { // other pickers keep today's load: legs to their headers
		l += float64(e.relaying.Load())
	}
	if p.routing.MetricsInterval > 0 && p.scraper != nil {
		p.scraper.refresh(e, now)
		if r, w, ok := e.scraped.figures(now, p.routing.MetricsInterval); ok {
			l += r + w
		}
	}
	return l
}

// StartRelay counts the target's reply as being relayed to the client
// until end is called (end may be called more than once): a leg stops
// counting as in flight when its reply headers arrive (Done), and a stream
// starts with its headers, so without this a worker streaming a dozen
// replies would look idle. Only targets with a prediction (Route) count:
// they are the cache-aware picker's; for others it does nothing.
func (t *Target) StartRelay() (end func()) {
	if t == nil || t.Route == nil || t.ep == nil {
		return func() {}
	}
	e := t.ep
	e.relaying.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			e.relaying.Add(-1)
		}
	}
}

// WithDefaults is r with its defaults filled in, as New applies them (an
// invalid value is left for New to report).
func (r Routing) WithDefaults() Routing {
	return routingDefaults(r, func(string, string, ...any) {})
}
