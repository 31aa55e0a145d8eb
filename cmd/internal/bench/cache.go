package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The cache cell (issue 20, cache-aware routing). CacheSims decode
// simulators (`celflow-sim`) with a KV cache too small for the workload
// (CacheBlocks blocks of 16 tokens each, LRU) and a prefill cost per
// uncached prompt token serve one seeded workload of multi-turn
// conversations that share a few system prompts, once per arm, each arm on
// fresh simulators (empty caches):
//   - round-robin: celflow, picker round-robin;
//   - prediction: celflow, picker cache-aware on its prediction index;
//   - events: celflow, picker cache-aware on the workers' KV events (the
//     simulators' --kv-events-endpoint and the endpoints' kv_events); "not
//     available" when the simulator binary has no such flag;
//   - oracle: no celflow: the bench asks every simulator how much of the
//     prompt it holds (POST /sim/cache/probe) and sends the request to the
//     one holding most (ties: fewest requests in flight from the bench).
//
// Every request is a streamed /inference/v1/generate with usage; the hit
// rate is the workers' own cached_tokens over the prompt tokens. Before
// each request the bench also probes every simulator, so each arm has an
// oracle hit rate of its own: what the best worker held at that moment.
// Precision and recall are celflow's truth check (celflow_route_* from its
// /metrics: correct ÷ predicted, correct ÷ reported). Load spread samples
// the simulators' vllm:num_requests_running every 20 ms: the mean over the
// samples with work of max ÷ mean. TTFT is the time to the first SSE event.
const (
	CacheSims       = 4
	CacheBlocks     = 96 // per simulator: 1536 tokens
	CacheBlockSize  = 16
	CachePrefillTok = 40 * time.Microsecond
)

// CacheOptions size the cache cell's workload (seeded, bounded).
type CacheOptions struct {
	Convs   int // conversations
	Turns   int // per conversation
	Systems int // shared system prompts
	Conc    int // conversations in flight
	Seed    uint64
}

// DefaultCacheOptions: 96 conversations of 4 turns over 4 system prompts,
// 8 at a time: about 2400 distinct blocks against 384 held.
var DefaultCacheOptions = CacheOptions{Convs: 96, Turns: 4, Systems: 4, Conc: 8, Seed: 20}

// CacheResult is what the cache cell measured.
type CacheResult struct {
	Opts   CacheOptions
	Sims   int
	Blocks int
	Arms   []CacheArm
}

// CacheArm is one routing arm.
type CacheArm struct {
	Name      string
	Available bool
	Note      string // why not available
	Requests  int
	Errors    int
	FirstErr  string

	Prompt, Cached, Best int64   // tokens: prompt, reported cached, the best worker's at send time
	Precision, Recall    float64 // NaN: no prediction
	Spread               float64 // mean over busy samples of max ÷ mean running
	TTFT                 Dist
}

// HitRate is the workers' cached tokens over the prompt tokens.
func (a CacheArm) HitRate() float64 { return ratio(a.Cached, a.Prompt) }

// OracleRate is the best worker's held tokens over the prompt tokens.
func (a CacheArm) OracleRate() float64 { return ratio(a.Best, a.Prompt) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// conversation is one seeded dialogue: a system prompt and per turn the
// tokens the turn adds (the previous answer and the next question, as a
// chat template lays them out).
type conversation struct {
	system int
	turns  [][]int
}

// cacheWorkload builds the seeded conversations and system prompts.
func cacheWorkload(o CacheOptions) (systems [][]int, convs []conversation) {
	r := rand.New(rand.NewPCG(o.Seed, 7))
	next := 1
	ids := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = next
			next++
		}
		return s
	}
	for range o.Systems {
		systems = append(systems, ids(256+r.IntN(256)))
	}
	for range o.Convs {
		c := conversation{system: r.IntN(o.Systems)}
		for range o.Turns {
			c.turns = append(c.turns, ids(48+r.IntN(96)))
		}
		convs = append(convs, c)
	}
	return systems, convs
}

// measureCache runs the four arms.
func measureCache(ctx context.Context, o Options, dir string, start starter) (*CacheResult, error) {
	co := o.Cache
	if co.Convs == 0 {
		co = DefaultCacheOptions
	}
	res := &CacheResult{Opts: co, Sims: CacheSims, Blocks: CacheBlocks}
	events, note := simHasFlag(o.Sim, "kv-events-endpoint")
	for _, arm := range []string{"round-robin", "prediction", "events", "oracle"} {
		if arm == "events" && !events {
			res.Arms = append(res.Arms, CacheArm{Name: arm, Note: note, Precision: math.NaN(), Recall: math.NaN(), Spread: math.NaN()})
			continue
		}
		a, err := runCacheArm(ctx, o, co, dir, arm, start)
		if err != nil {
			return nil, fmt.Errorf("cache cell, %s: %w", arm, err)
		}
		res.Arms = append(res.Arms, *a)
		progressCacheArm(o.Progress, a)
	}
	return res, nil
}

// simHasFlag reports whether the simulator binary knows --name (its usage
// lists it).
func simHasFlag(bin, name string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	if strings.Contains(out.String(), "-"+name) {
		return true, ""
	}
	return false, "not available: " + filepath.Base(bin) + " has no --" + name
}

// runCacheArm starts fresh simulators (and celflow, but for the oracle),
// drives the workload and reads what it measured.
func runCacheArm(ctx context.Context, o Options, co CacheOptions, dir, arm string, start starter) (*CacheArm, error) {
	a := &CacheArm{Name: arm, Available: true, Precision: math.NaN(), Recall: math.NaN()}
	var sims []*proc
	var eventAddrs []string
	for i := range CacheSims {
		args := []string{"--roles", "decode", "--name", fmt.Sprintf("d%d", i), "--kv-cache-blocks", strconv.Itoa(CacheBlocks),
			"--block-size", strconv.Itoa(CacheBlockSize), "--prefill-per-token", CachePrefillTok.String(),
			"--ttft", "1ms", "--itl", "500us", "--output-tokens", "4"}
		if arm == "events" {
			ev, err := freeAddr()
			if err != nil {
				return nil, err
			}
			ev = "tcp://" + ev
			eventAddrs = append(eventAddrs, ev)
			args = append(args, "--kv-events-endpoint", ev)
		}
		p, err := start(o.Sim, fmt.Sprintf("sim d%d (%s)", i, arm), "/health",
			func(addr string) ([]string, error) { return []string{"--listen", addr}, nil }, args...)
		if err != nil {
			return nil, err
		}
		defer p.stop()
		sims = append(sims, p)
	}
	var cf *proc
	if arm != "oracle" {
		var err error
		cf, err = start(o.Bin, "celflow cache "+arm, "/readyz", func(addr string) ([]string, error) {
			p := filepath.Join(dir, "serve-cache-"+arm+".yaml")
			return []string{"--config", p}, os.WriteFile(p, []byte(cacheConfig(arm, addr, sims, eventAddrs)), 0o644)
		}, "serve")
		if err != nil {
			return nil, err
		}
		defer cf.stop()
	}
	systems, convs := cacheWorkload(co)
	tr := NewTransport(4*co.Conc + 16)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	stopSampling := sampleSpread(hc, sims, a)
	var (
		mu      sync.Mutex
		ttfts   []time.Duration
		next    atomic.Int64
		rot     atomic.Uint64 // oracle: rotation among ties
		wg      sync.WaitGroup
		pending = make([]atomic.Int64, len(sims)) // oracle: requests in flight per simulator
		tally   truthTally                        // oracle: its probes against the replies
	)
	for range co.Conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(convs) {
					return
				}
				c := convs[i]
				prompt := append([]int(nil), systems[c.system]...)
				for _, turn := range c.turns {
					prompt = append(prompt, turn...)
					held := probeAll(ctx, hc, sims, prompt)
					// The most held wins; ties go to the fewest in flight,
					// then by rotation (a cold prompt spreads).
					first := int(rot.Add(1)-1) % len(sims)
					best := first
					for j := 1; j < len(sims); j++ {
						k := (first + j) % len(sims)
						if held[k] > held[best] || (held[k] == held[best] && pending[k].Load() < pending[best].Load()) {
							best = k
						}
					}
					url := ""
					if cf != nil {
						url = cf.url
					} else {
						url = sims[best].url
						pending[best].Add(1)
					}
					ttft, cached, err := generateStream(ctx, hc, url, prompt)
					if cf == nil {
						pending[best].Add(-1)
					}
					mu.Lock()
					a.Requests++
					if err != nil {
						a.Errors++
						if a.FirstErr == "" {
							a.FirstErr = err.Error()
						}
					} else {
						ttfts = append(ttfts, ttft)
						a.Prompt += int64(len(prompt))
						a.Cached += int64(cached)
						a.Best += int64(held[best])
						if cf == nil { // the oracle's own prediction: its probe
							tally.add(held[best], cached)
						}
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	stopSampling()
	a.TTFT = Summarise(ttfts)
	if cf != nil && arm != "round-robin" {
		p, r, err := routeTruth(hc, cf.url)
		if err != nil {
			return nil, err
		}
		a.Precision, a.Recall = p, r
	}
	if cf == nil {
		// The oracle sent where its probe said: precision and recall of
		// the probes against the replies (1 when the probe is exact).
		a.Precision, a.Recall = tally.get()
	}
	if a.Errors > 0 && a.Errors == a.Requests {
		return nil, fmt.Errorf("every request failed: %s", a.FirstErr)
	}
	return a, nil
}

// truthTally is the oracle arm's probes against the replies.
type truthTally struct {
	mu                           sync.Mutex
	predicted, reported, correct int64
}

func (t *truthTally) add(predicted, reported int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.predicted += int64(predicted)
	t.reported += int64(reported)
	t.correct += int64(min(predicted, reported))
}

func (t *truthTally) get() (precision, recall float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ratio(t.correct, t.predicted), ratio(t.correct, t.reported)
}

// cacheConfig is the serve config of an arm: direct mode, the simulators
// as the decode pool, decode-only on generate.
func cacheConfig(arm, listen string, sims []*proc, events []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server: {listen: %q, drain_delay: 0s, shutdown_timeout: 2s}\n", listen)
	b.WriteString("upstream:\n  mode: direct\n  pools:\n    decode:\n")
	for i, s := range sims {
		if arm == "events" {
			fmt.Fprintf(&b, "      - {url: %q, kv_events: %q}\n", s.url, events[i])
		} else {
			fmt.Fprintf(&b, "      - %q\n", s.url)
		}
	}
	if arm == "round-robin" {
		b.WriteString("  picker: round-robin\n")
	} else {
		b.WriteString("  picker: cache-aware\n") // default weights, no /metrics scrape
	}
	b.WriteString("telemetry: {log_level: warn, log_format: json, tracing: {enabled: false}}\n")
	b.WriteString(`workflow:
  apiVersion: celflow/v1
  kind: Workflow
  metadata: {name: bench-cache, version: "1"}
  routes: [generate]
  nodes:
    - id: decode
      type: decode
`)
	return b.String()
}

// probeAll asks every simulator how many leading tokens of prompt it
// holds (0 on any failure).
func probeAll(ctx context.Context, hc *http.Client, sims []*proc, prompt []int) []int {
	body, _ := json.Marshal(map[string]any{"token_ids": prompt})
	out := make([]int, len(sims))
	var wg sync.WaitGroup
	for i, s := range sims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/sim/cache/probe", bytes.NewReader(body))
			if err != nil {
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var r struct {
				Cached int `json:"cached_tokens"`
			}
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&r) == nil {
				out[i] = r.Cached
			}
		}()
	}
	wg.Wait()
	return out
}

// generateStream sends one streamed generate request with usage and
// returns the time to its first event and the usage's cached_tokens.
func generateStream(ctx context.Context, hc *http.Client, base string, prompt []int) (time.Duration, int, error) {
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "token_ids": prompt, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "sampling_params": map[string]any{"max_tokens": 4}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/inference/v1/generate", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var ttft time.Duration
	cached := -1
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if ttft == 0 {
			ttft = time.Since(t0)
		}
		if line == "[DONE]" {
			break
		}
		var ev struct {
			Usage *struct {
				D *struct {
					C int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Usage != nil && ev.Usage.D != nil {
			cached = ev.Usage.D.C
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if cached < 0 {
		return 0, 0, fmt.Errorf("no usage with prompt_tokens_details in the stream")
	}
	return ttft, cached, nil
}

// sampleSpread samples the simulators' running requests every 20 ms until
// the returned func is called, which stores the spread in a.
func sampleSpread(hc *http.Client, sims []*proc, a *CacheArm) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var sum float64
		var n int
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				a.Spread = math.NaN()
				if n > 0 {
					a.Spread = sum / float64(n)
				}
				return
			case <-tick.C:
			}
			var total, most float64
			for _, s := range sims {
				r := simRunning(hc, s.url)
				total += r
				most = max(most, r)
			}
			if total > 0 {
				sum += most / (total / float64(len(sims)))
				n++
			}
		}
	}()
	return func() { close(done); <-finished }
}

// simRunning is a simulator's vllm:num_requests_running (0 on failure).
func simRunning(hc *http.Client, base string) float64 {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "vllm:num_requests_running") {
			if f := strings.Fields(line); len(f) >= 2 {
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				return v
			}
		}
	}
	return 0
}

// routeTruth reads celflow's truth check: precision and recall of its
// predictions on the decode pool.
func routeTruth(hc *http.Client, base string) (precision, recall float64, err error) {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	vals := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"celflow_route_predicted_cached_tokens_total", "celflow_route_reported_cached_tokens_total", "celflow_route_correct_cached_tokens_total"} {
			if strings.HasPrefix(line, name+`{pool="decode"}`) {
				f := strings.Fields(line)
				vals[name], _ = strconv.ParseFloat(f[len(f)-1], 64)
			}
		}
	}
	if len(vals) != 3 {
		return 0, 0, fmt.Errorf("celflow's /metrics has no celflow_route_* series for the decode pool")
	}
	c := vals["celflow_route_correct_cached_tokens_total"]
	p, r := math.NaN(), math.NaN()
	if d := vals["celflow_route_predicted_cached_tokens_total"]; d > 0 {
		p = c / d
	}
	if d := vals["celflow_route_reported_cached_tokens_total"]; d > 0 {
		r = c / d
	}
	return p, r, nil
}

func pctOf(f float64) string {
	if math.IsNaN(f) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

// renderCache is the report's section for the cell.
func renderCache(b io.Writer, r *CacheResult) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Cache-aware routing\n\n")
	if r == nil {
		p("Not run.\n\n")
		return
	}
	o := r.Opts
	p("%d decode simulators, each with a KV cache of %d blocks of %d tokens (LRU) and a prefill cost of %s\n", r.Sims, r.Blocks, CacheBlockSize, CachePrefillTok)
	p("per uncached prompt token; %d conversations of %d turns over %d shared system prompts (256–511 tokens;\n", o.Convs, o.Turns, o.Systems)
	p("48–143 tokens a turn), %d at a time, seeded (%d): more distinct blocks than the caches hold, so they\n", o.Conc, o.Seed)
	p("evict. Each arm starts on fresh simulators. Hit rate: the workers' own `cached_tokens` over the prompt\n")
	p("tokens; oracle: what the best simulator held when each request was sent (`POST /sim/cache/probe`).\n")
	p("Precision and recall: celflow's truth check (`celflow_route_*`), for the oracle its probes against the\n")
	p("replies. Spread: max ÷ mean of the simulators' running requests, sampled every 20 ms. celflow's\n")
	p("cache-aware arms run the defaults: cache_weight 1, load_weight 0.5, load from celflow's own legs and relays (no\n")
	p("`/metrics` scrape). The oracle arm sends to the simulators directly (no celflow hop).\n\n")
	p("| arm | requests | hit rate | oracle hit rate | precision | recall | load spread (max/mean) | TTFT p50 | TTFT p99 | errors |\n")
	p("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range r.Arms {
		if !a.Available {
			p("| %s | %s | | | | | | | | |\n", a.Name, a.Note)
			continue
		}
		spread := "—"
		if !math.IsNaN(a.Spread) {
			spread = fmt.Sprintf("%.2f", a.Spread)
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %d |\n", a.Name, a.Requests, pctOf(a.HitRate()), pctOf(a.OracleRate()),
			pctOf(a.Precision), pctOf(a.Recall), spread, ms(a.TTFT.P50), ms(a.TTFT.P99), a.Errors)
	}
	p("\n")
}

func progressCacheArm(w io.Writer, a *CacheArm) {
	progress(w, "cache %-11s %4d requests: hit %s (oracle %s), precision %s recall %s, spread %.2f, TTFT p50 %s p99 %s%s",
		a.Name, a.Requests, pctOf(a.HitRate()), pctOf(a.OracleRate()), pctOf(a.Precision), pctOf(a.Recall), a.Spread,
		round(a.TTFT.P50), round(a.TTFT.P99), errNote(a.Errors, a.FirstErr))
}

// cacheChecks are the issue 20 targets of the cell: the event arm within
// 2% of the oracle's hit rate, its precision and recall at least 99%.
func cacheChecks(r *CacheResult) []Check {
	const src = "issue 20"
	names := []string{"cache: event-index hit rate within 2% of the oracle's", "cache: event-index precision and recall ≥ 99%"}
	var ev, or *CacheArm
	if r != nil {
		for i := range r.Arms {
			switch r.Arms[i].Name {
			case "events":
				ev = &r.Arms[i]
			case "oracle":
				or = &r.Arms[i]
			}
		}
	}
	if ev == nil || !ev.Available || or == nil {
		why := "cell not run"
		if ev != nil {
			why = ev.Note
		}
		return []Check{{names[0], src, why, notMeasure}, {names[1], src, why, notMeasure}}
	}
	hit := Check{Target: names[0], Source: src,
		Measured: fmt.Sprintf("%s vs oracle arm %s", pctOf(ev.HitRate()), pctOf(or.HitRate()))}
	hit.Verdict = verdict(ev.HitRate() >= or.HitRate()-0.02)
	pr := Check{Target: names[1], Source: src, Measured: fmt.Sprintf("%s / %s", pctOf(ev.Precision), pctOf(ev.Recall))}
	pr.Verdict = verdict(ev.Precision >= 0.99 && ev.Recall >= 0.99)
	return []Check{hit, pr}
}
