package upstream

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// setCacheSource installs s for the named pool.
func (c *Client) setCacheSource(pool string, s CacheSource) {
	if err := c.SetCacheSource(pool, s); err != nil {
		panic(err)
	}
}

// mapSource is a CacheSource from a table: base → cached tokens of any
// prompt; a base missing from the table has no view (ok false).
type mapSource struct {
	mu   sync.Mutex
	held map[string]int
	asks int
}

func (m *mapSource) Cached(base string, k CacheKey) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asks++
	n, ok := m.held[base]
	return min(n, len(k.Tokens)/16*16), ok
}

func toks(n, seed int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(seed*100000 + i)
	}
	return out
}

func mustPickKey(t *testing.T, c *Client, pool string, k CacheKey) *Target {
	t.Helper()
	tg, err := c.PickKey(RoleDecode, pool, k)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// The cache-aware picker sends a prompt where the prediction index says
// its prefix is, and spreads prompts nobody holds by load (ties by
// rotation); without cache-aware the same calls are plain rotation.
func TestCacheAwareFollowsIndex(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickCacheAware}, 4, RoleDecode)
	conv := toks(100, 1) // 6 full blocks; 96 cacheable tokens (99 rounded down)
	first := mustPickKey(t, c, "", CacheKey{Tokens: conv})
	if first.Route == nil || first.Route.CachedBlocks != 0 || first.Route.Source != SourceIndex {
		t.Fatalf("first pick route = %+v, want a cold index prediction", first.Route)
	}
	c.RecordPrefix(first, conv)
	first.Done(false)
	// The next turn extends the conversation: same first 100 tokens.
	next := append(append([]int64{}, conv...), toks(40, 2)...)
	for range 8 {
		tg := mustPickKey(t, c, "", CacheKey{Tokens: next})
		if tg.Base != first.Base {
			t.Fatalf("follow-up went to %s, the prefix is on %s", tg.Base, first.Base)
		}
		if r := tg.Route; r.CachedBlocks != 6 || r.Predicted != 96 || r.Score <= 0 {
			t.Fatalf("route = %+v, want 6 cached blocks (96 tokens) and a positive score", r)
		}
		tg.Done(false)
	}
	// Unknown prompts spread over every endpoint (nobody holds them).
	seen := map[string]bool{}
	for i := range 4 {
		tg := mustPickKey(t, c, "", CacheKey{Tokens: toks(50, 10+i)})
		seen[tg.Base] = true
		tg.Done(false)
	}
	if len(seen) != 4 {
		t.Errorf("cold prompts went to %d endpoints, want all 4 in rotation", len(seen))
	}
}

// Load balances the cache term: a holder with legs in flight loses a
// partial hit to an idle endpoint, keeps a full one.
func TestCacheAwareLoadTerm(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickCacheAware}, 2, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	holder, other := p.eps[0], p.eps[1]
	full := toks(161, 3) // 160 cacheable tokens
	c.RecordPrefix(&Target{ep: holder}, full)
	// Three legs in flight on the holder: load term 0.5 × 3/4 = 0.375.
	holder.inflight.Add(3)
	defer holder.inflight.Add(-3)
	tg := mustPickKey(t, c, "", CacheKey{Tokens: full})
	if tg.ep != holder {
		t.Errorf("a full hit (1.0) on a loaded holder (−0.375) lost to an idle cold endpoint")
	}
	tg.Done(false)
	// A prompt sharing only 2 of its 10 blocks with the holder: 0.2−0.375 < 0.
	part := append(append([]int64{}, full[:32]...), toks(129, 4)...)
	tg = mustPickKey(t, c, "", CacheKey{Tokens: part})
	if tg.ep != other {
		t.Errorf("a 20%% hit on a loaded holder beat the idle endpoint (route %+v)", tg.Route)
	}
	tg.Done(false)
	// Weights: load_weight 0 is pure cache, the loaded holder wins again.
	c2, _ := newDirect(t, Config{Picker: pickCacheAware, Routing: Routing{CacheWeight: 1}}, 2, RoleDecode)
	p2 := c2.impl.pools[roleIndex(RoleDecode)]
	c2.RecordPrefix(&Target{ep: p2.eps[0]}, full)
	p2.eps[0].inflight.Add(3)
	tg = mustPickKey(t, c2, "", CacheKey{Tokens: part})
	if tg.ep != p2.eps[0] {
		t.Errorf("load_weight 0: the holder of 2 blocks did not win")
	}
}

// A CacheSource's view wins over the prediction index where it has one;
// where it says ok false the index decides for that endpoint.
func TestCacheAwareSourceFirst(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickCacheAware}, 3, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	prompt := toks(200, 5)
	// The index believes endpoint 0 holds it (celflow sent it there) ...
	c.RecordPrefix(&Target{ep: p.eps[0]}, prompt)
	// ... but the workers' events say 0 evicted it and 1 holds 128 tokens;
	// 2 has no view (not subscribed).
	src := &mapSource{held: map[string]int{p.eps[0].base: 0, p.eps[1].base: 128}}
	c.setCacheSource("decode", src)
	tg := mustPickKey(t, c, "", CacheKey{Tokens: prompt})
	if tg.ep != p.eps[1] || tg.Route.Source != SourceEvents || tg.Route.CachedBlocks != 8 {
		t.Fatalf("picked %s route %+v, want endpoint 1 from events with 8 blocks", tg.Base, tg.Route)
	}
	tg.Done(false)
	// Endpoint 2 gets the index's view: record there, it now beats 1.
	c.RecordPrefix(&Target{ep: p.eps[2]}, prompt)
	tg = mustPickKey(t, c, "", CacheKey{Tokens: prompt})
	if tg.ep != p.eps[2] || tg.Route.Source != SourceIndex || tg.Route.Predicted != 192 {
		t.Fatalf("picked %s route %+v, want endpoint 2 from the index with 192 tokens", tg.Base, tg.Route)
	}
	tg.Done(false)
}

// Predicted conditional-decode hits read the same view: the source's
// (events) where it has one.
func TestPredictHitUsesSource(t *testing.T) {
	c, _ := newDirect(t, Config{}, 2, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	prompt := toks(64, 6) // 4 full blocks
	if _, hit := c.PredictHit(prompt); hit {
		t.Fatal("a hit on an empty index")
	}
	c.setCacheSource("decode", &mapSource{held: map[string]int{p.eps[1].base: 64}})
	tg, hit := c.PredictHit(prompt)
	if !hit || tg.ep != p.eps[1] || tg.Route == nil || tg.Route.Source != SourceEvents || tg.Route.Predicted != 48 {
		t.Fatalf("hit %v target %+v, want a hit on endpoint 1 from events predicting 48 tokens", hit, tg)
	}
	tg.Done(false)
	// The source says 0 holds nothing: its index entry does not count.
	c.RecordPrefix(&Target{ep: p.eps[0]}, prompt)
	c.setCacheSource("decode", &mapSource{held: map[string]int{p.eps[0].base: 0}})
	if tg, hit := c.PredictHit(prompt); hit {
		t.Fatalf("hit on %s: the source said 0 holds nothing and 1 has no index entry", tg.Base)
	}
}

// Without the cache-aware picker nothing is predicted on a pick: targets
// carry no Route, and the rotation is today's.
func TestRoundRobinCarriesNoPrediction(t *testing.T) {
	c, _ := newDirect(t, Config{}, 2, RoleDecode)
	prompt := toks(64, 7)
	a := mustPickKey(t, c, "", CacheKey{Tokens: prompt})
	c.RecordPrefix(a, prompt)
	b := mustPickKey(t, c, "", CacheKey{Tokens: prompt})
	if a.Route != nil || b.Route != nil || a.Base == b.Base {
		t.Errorf("round-robin: routes %+v %+v, bases %s %s; want no prediction and a rotation", a.Route, b.Route, a.Base, b.Base)
	}
}

// The truth check counts outcomes and tokens per pool, and an endpoint
// whose events-based predictions keep missing is reported and its source
// view set aside for distrust_for: the index decides for it meanwhile.
func TestTruthMispredictingSourceDistrusted(t *testing.T) {
	c, clk := newDirect(t, Config{Picker: pickCacheAware, Routing: Routing{MispredictWindow: 4, DistrustFor: time.Minute}}, 2, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	liar := p.eps[0]
	src := &mapSource{held: map[string]int{liar.base: 1 << 20, p.eps[1].base: 0}}
	c.setCacheSource("decode", src)
	for i := range 4 {
		tg := mustPickKey(t, c, "", CacheKey{Tokens: toks(65, 20+i)})
		if tg.ep != liar || tg.Route.Source != SourceEvents || tg.Route.Predicted != 64 {
			t.Fatalf("pick %d: %s %+v, want the liar from events", i, tg.Base, tg.Route)
		}
		tg.Done(false)
		tg.ObserveCached(0) // the worker held nothing
	}
	st := c.RouteStats()
	if len(st) != 1 || st[0].FP != 4 || st[0].TP != 0 || st[0].PredictedTokens != 256 || st[0].CorrectTokens != 0 || st[0].PromptTokens != 260 {
		t.Fatalf("stats %+v, want 4 false positives of 64 predicted tokens each", st)
	}
	if e := st[0].Endpoints[0]; !e.Mispredicting || !e.Distrusted || e.Precision != 0 {
		t.Fatalf("liar %+v, want mispredicting, distrusted, precision 0", e)
	}
	// Set aside: the index decides (it holds nothing), so the pick has no
	// events prediction for the liar.
	tg := mustPickKey(t, c, "", CacheKey{Tokens: toks(65, 30)})
	if tg.Route.Source == SourceEvents && tg.ep == liar {
		t.Fatalf("the distrusted source still decided for the liar: %+v", tg.Route)
	}
	tg.Done(false)
	tg.ObserveCached(16) // a hit nobody predicted
	if st := c.RouteStats(); st[0].FN != 1 || st[0].ReportedTokens != 16 {
		t.Errorf("stats %+v, want one false negative of 16 tokens", st[0])
	}
	// After distrust_for the source is asked again.
	clk.t = clk.t.Add(time.Minute + time.Second)
	tg = mustPickKey(t, c, "", CacheKey{Tokens: toks(65, 31)})
	if tg.ep != liar || tg.Route.Source != SourceEvents {
		t.Errorf("after distrust_for: %s %+v, want the source's view again", tg.Base, tg.Route)
	}
}

// An index-based window that recovers clears the report.
func TestTruthRecovers(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickCacheAware, Routing: Routing{MispredictWindow: 2}}, 1, RoleDecode)
	prompt := toks(33, 40)
	pick := func(got int) {
		tg := mustPickKey(t, c, "", CacheKey{Tokens: prompt})
		c.RecordPrefix(tg, prompt)
		tg.Done(false)
		tg.ObserveCached(got)
	}
	pick(0) // cold: predicted 0, not judged
	pick(0) // predicted 32, none: precision 0 once two are in
	pick(0)
	if e := c.RouteStats()[0].Endpoints[0]; !e.Mispredicting || e.Precision != 0 || e.Distrusted {
		t.Fatalf("endpoint %+v, want mispredicting (precision 0), not distrusted (index predictions)", e)
	}
	pick(32)
	pick(32)
	if e := c.RouteStats()[0].Endpoints[0]; e.Mispredicting || e.Precision != 1 {
		t.Errorf("endpoint %+v, want recovered with precision 1", e)
	}
}

func TestRoutingConfigErrors(t *testing.T) {
	base := Config{Mode: modeDirect, Pools: map[Role][]Endpoint{RoleDecode: {{URL: "http://d:1"}}}}
	for _, tc := range []struct {
		r    Routing
		want string
	}{
		{Routing{CacheWeight: -1}, "upstream.routing.cache_weight: must be a number ≥ 0"},
		{Routing{LoadWeight: math.NaN()}, "upstream.routing.load_weight: must be a number ≥ 0"},
		{Routing{MetricsInterval: -time.Second}, "upstream.routing.metrics_interval: must be ≥ 0s"},
		{Routing{MispredictPrecision: 1.5}, "upstream.routing.mispredict_precision: must be between 0 and 1"},
		{Routing{MispredictWindow: -2}, "upstream.routing.mispredict_window: must be > 0"},
		{Routing{MispredictWindow: 1 << 20}, "upstream.routing.mispredict_window: must be at most 65536"},
		{Routing{DistrustFor: -time.Second}, "upstream.routing.distrust_for: must be > 0"},
	} {
		cfg := base
		cfg.Routing = tc.r
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.r, err, tc.want)
		}
		var fe *FieldError
		if errors.As(err, &fe) && !strings.HasPrefix(fe.Ptr, "/routing/") {
			t.Errorf("%+v: pointer %q, want under /routing", tc.r, fe.Ptr)
		}
	}
	cfg := base
	cfg.Picker = "cache"
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), `"cache-aware"`) {
		t.Errorf("unknown picker: %v", err)
	}
	d, err := withDefaults(base)
	if err != nil || d.Routing.CacheWeight != 1 || d.Routing.LoadWeight != 0.5 || d.Routing.MispredictWindow != DefaultMispredictWindow ||
		d.Routing.MispredictPrecision != DefaultMispredictPrecision || d.Routing.DistrustFor != DefaultDistrustFor || d.Routing.MetricsInterval != 0 {
		t.Errorf("defaults %+v, %v", d.Routing, err)
	}
}

func TestParseLoad(t *testing.T) {
	for _, tc := range []struct {
		text        string
		run, wait   float64
		errContains string
	}{
		{"# HELP x\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2\n", 3, 2, ""},
		// Two engines are summed; a timestamp after the value is fine; a
		// longer name sharing the prefix is not the gauge.
		{"vllm:num_requests_running{engine=\"0\"} 1 1700000000\nvllm:num_requests_running{engine=\"1\"} 4\nvllm:num_requests_running_total 99\nvllm:num_requests_waiting 0\n", 5, 0, ""},
		{"up 1\n", 0, 0, "no vllm:num_requests_running"},
	} {
		r, w, err := parseLoad(strings.NewReader(tc.text))
		if tc.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errContains) {
				t.Errorf("%q: err %v, want %q", tc.text, err, tc.errContains)
			}
			continue
		}
		if err != nil || r != tc.run || w != tc.wait {
			t.Errorf("%q: %v %v %v, want %v %v", tc.text, r, w, err, tc.run, tc.wait)
		}
	}
}

// With metrics_interval set, a pick scrapes the workers' /metrics (over
// real HTTP) and their own running and waiting requests join the load: the
// busy worker loses a tie it would win by rotation.
func TestScrapedLoad(t *testing.T) {
	var busyHits, idleHits sync.WaitGroup
	busyHits.Add(1)
	idleHits.Add(1)
	var once1, once2 sync.Once
	serve := func(running, waiting int, once *sync.Once, wg *sync.WaitGroup) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, "vllm:num_requests_running{engine=\"0\"} %d\nvllm:num_requests_waiting{engine=\"0\"} %d\n", running, waiting)
			once.Do(wg.Done)
		}))
	}
	busy := serve(5, 3, &once1, &busyHits)
	defer busy.Close()
	idle := serve(0, 0, &once2, &idleHits)
	defer idle.Close()
	c, err := New(Config{Mode: modeDirect, Picker: pickCacheAware, Routing: Routing{MetricsInterval: time.Hour},
		Pools: map[Role][]Endpoint{RoleDecode: {{URL: busy.URL}, {URL: idle.URL}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdle()
	p := c.impl.pools[roleIndex(RoleDecode)]
	// The first pick starts both scrapes; wait for each to have answered
	// and its figures to be stored.
	mustPickKey(t, c, "", CacheKey{}).Done(false)
	busyHits.Wait()
	idleHits.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for p.eps[0].scraped.at.Load() == 0 || p.eps[1].scraped.at.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("scraped figures never stored")
		}
		time.Sleep(time.Millisecond)
	}
	for range 4 {
		tg := mustPickKey(t, c, "", CacheKey{})
		if tg.Base != idle.URL {
			t.Fatalf("picked %s (load %v), want the idle worker", tg.Base, tg.Route.Load)
		}
		tg.Done(false)
	}
	if r, w, ok := p.eps[0].scraped.figures(time.Now().UnixNano(), time.Hour); !ok || r != 5 || w != 3 {
		t.Errorf("busy figures %v %v %v, want 5 3", r, w, ok)
	}
}

// BenchmarkPickCacheAware: one scored pick of a 2000-token prompt among 8
// decode endpoints whose indexes each hold other conversations, against
// round-robin's pick of the same prompt.
func BenchmarkPickCacheAware(b *testing.B) {
	for _, picker := range []string{pickRoundRobin, pickCacheAware} {
		b.Run(picker, func(b *testing.B) {
			c, _ := newDirect(b, Config{Picker: picker}, 8, RoleDecode)
			p := c.impl.pools[roleIndex(RoleDecode)]
			for i, e := range p.eps {
				for k := range 50 {
					c.RecordPrefix(&Target{ep: e}, toks(2000, 1000*i+k))
				}
			}
			prompt := CacheKey{Tokens: toks(2000, 3007)} // held by endpoint 3
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				tg, err := c.PickKey(RoleDecode, "", prompt)
				if err != nil {
					b.Fatal(err)
				}
				tg.Done(false)
			}
		})
	}
}

// A short prompt (short_prompt_tokens) is a predicted hit wherever it goes:
// under cache-aware, to the least loaded endpoint.
func TestShortPromptByLoad(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickCacheAware, ShortPromptTokens: 8}, 3, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	p.eps[0].inflight.Add(2)
	p.eps[1].inflight.Add(1)
	for range 3 {
		tg, hit := c.PredictHit(toks(5, 1))
		if !hit || tg.ep != p.eps[2] {
			t.Fatalf("hit %v on %s, want the idle endpoint 2", hit, tg.Base)
		}
		tg.Done(false)
	}
}

// A reply being relayed counts in its endpoint's load until it ends: a
// stream's leg leaves in-flight at its headers.
func TestRelayCountsInLoad(t *testing.T) {
	c, _ := newDirect(t, Config{Picker: pickCacheAware}, 2, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	first := mustPickKey(t, c, "", CacheKey{Tokens: toks(20, 1)})
	first.Done(false) // headers arrived
	end := first.StartRelay()
	for range 4 {
		tg := mustPickKey(t, c, "", CacheKey{Tokens: toks(20, 2)})
		if tg.ep == first.ep {
			t.Fatalf("picked the endpoint relaying a reply (load %v) over an idle one", tg.Route.Load)
		}
		tg.Done(false)
	}
	end()
	end() // idempotent
	if n := first.ep.relaying.Load(); n != 0 {
		t.Fatalf("relaying = %d after end", n)
	}
	if got := p.load(first.ep, 0); got != 0 {
		t.Errorf("load %v after the relay ended", got)
	}
	// Without a prediction (round-robin) nothing is counted.
	rr, _ := newDirect(t, Config{}, 1, RoleDecode)
	tg := mustPickKey(t, rr, "", CacheKey{})
	tg.StartRelay()
	if n := rr.impl.pools[roleIndex(RoleDecode)].eps[0].relaying.Load(); n != 0 {
		t.Errorf("round-robin target counted a relay: %d", n)
	}
}

// Without cache-aware, a predicted conditional-decode hit among several
// holders goes by legs in flight alone, as before: relays do not count.
func TestPredictHitLoadUnchangedWithoutCacheAware(t *testing.T) {
	c, _ := newDirect(t, Config{}, 2, RoleDecode)
	p := c.impl.pools[roleIndex(RoleDecode)]
	prompt := toks(32, 9)
	for _, e := range p.eps {
		c.RecordPrefix(&Target{ep: e}, prompt)
	}
	p.eps[0].relaying.Add(5)
	seen := map[*endpoint]bool{}
	for range 4 {
		tg, hit := c.PredictHit(prompt)
		if !hit {
			t.Fatal("no hit")
		}
		seen[tg.ep] = true
		tg.Done(false)
	}
	if len(seen) != 2 {
		t.Errorf("holders picked: %d, want both by rotation (relays are not load without cache-aware)", len(seen))
	}
}
