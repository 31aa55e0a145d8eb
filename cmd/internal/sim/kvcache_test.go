package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Only whole blocks are cached, a prompt's last token never counts (vLLM
// recomputes it), and a block hits only under the same prefix.
func TestKVCacheCached(t *testing.T) {
	c := NewKVCache(100, 16)
	c.Insert(prompt(40)) // blocks at 16 and 32; the 8-token tail is not a block
	cases := []struct {
		name              string
		p                 promptInfo
		cached, cacheable int
	}{
		{"same prompt", prompt(40), 32, 32},
		{"exactly two blocks: the last token is recomputed", prompt(32), 16, 16},
		{"one block and one token", prompt(17), 16, 16},
		{"longer prompt sharing two blocks", prompt(70), 32, 64},
		{"shorter than a block", prompt(10), 0, 0},
		{"empty", promptInfo{}, 0, 0},
		{"other image in the second block", promptInfo{Tokens: prompt(40).Tokens, Items: []item{{Hash: "img", Offset: 20, Length: 2}}}, 16, 32},
		{"other first token: nothing chains", promptInfo{Tokens: append([]int{7}, prompt(40).Tokens[1:]...)}, 0, 32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Cached(tc.p); got != tc.cached {
				t.Errorf("cached %d, want %d", got, tc.cached)
			}
			if got := c.Cacheable(tc.p); got != tc.cacheable {
				t.Errorf("cacheable %d, want %d", got, tc.cacheable)
			}
		})
	}
	if c.Blocks() != 2 {
		t.Errorf("%d blocks, want 2 (lookups insert nothing)", c.Blocks())
	}
}

// Capacity counts blocks; the least recently used block goes first, and of
// one prompt its later blocks go before its earlier ones.
func TestKVCacheEviction(t *testing.T) {
	other := func(n int) promptInfo { // a prompt sharing no block with prompt(n)
		p := prompt(n)
		for i := range p.Tokens {
			p.Tokens[i] += 1000
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		capacity int
		steps    func(c *KVCache)
		p        promptInfo
		cached   int
		blocks   int
	}{
		{"fits", 4, func(c *KVCache) { c.Insert(prompt(65)) }, prompt(65), 64, 4},
		{"a prompt larger than the cache keeps its first blocks", 2, func(c *KVCache) { c.Insert(prompt(65)) }, prompt(65), 32, 2},
		{"the older prompt is evicted", 4, func(c *KVCache) { c.Insert(prompt(49)); c.Insert(other(49)) }, prompt(49), 16, 4},
		{"a lookup refreshes", 4, func(c *KVCache) {
			c.Insert(prompt(33))
			c.Insert(other(33))
			c.Cached(prompt(33))
			third := prompt(17)
			third.Tokens[0] = 5
			c.Insert(third) // one new block: evicts other's, the least recently used
		}, prompt(33), 32, 4},
		{"block size 4", 100, func(c *KVCache) { c.Insert(prompt(10)) }, prompt(10), 8, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := 16
			if strings.Contains(tc.name, "block size 4") {
				bs = 4
			}
			c := NewKVCache(tc.capacity, bs)
			tc.steps(c)
			if got := c.Cached(tc.p); got != tc.cached {
				t.Errorf("cached %d, want %d", got, tc.cached)
			}
			if got := c.Blocks(); got != tc.blocks {
				t.Errorf("%d blocks, want %d", got, tc.blocks)
			}
		})
	}
}

// cachedUsage sends body to path and returns usage.prompt_tokens and
// usage.prompt_tokens_details.cached_tokens, from the JSON reply or from the
// stream's usage event.
func cachedUsage(t *testing.T, url, path, body string) (prompt, cached int) {
	t.Helper()
	status, _, b := post(t, url+path, body, "EPP-Profile: decode")
	if status != 200 {
		t.Fatalf("%s: %d %s", path, status, b)
	}
	doc := b
	if strings.Contains(body, `"stream":true`) {
		doc = nil
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"prompt_tokens_details"`) {
				doc = []byte(d)
			}
		}
		if doc == nil {
			t.Fatalf("no usage event in\n%s", b)
		}
	}
	var r struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      *struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(doc, &r); err != nil || r.Usage.Details == nil || r.Usage.Details.CachedTokens == nil {
		t.Fatalf("no usage.prompt_tokens_details.cached_tokens (%v) in %s", err, doc)
	}
	return r.Usage.PromptTokens, *r.Usage.Details.CachedTokens
}

// words is a prompt text of n distinct words.
func words(tag string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", tag, i)
	}
	return strings.Join(w, " ")
}

// A real `celflow-sim` reports cached_tokens as vLLM does: 0 the first
// time, the whole cached blocks on a repeat (chat and completions, JSON and
// streamed usage), and a longer prompt sharing the start hits its blocks.
func TestSimCachedTokens(t *testing.T) {
	url, stop := runMainAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--block-size", "16")
	defer stop()
	for _, tc := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"%s"}],"max_tokens":2}`},
		{"chat stream", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"%s"}],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`},
		{"completions", "/v1/completions", `{"model":"m","prompt":"%s","max_tokens":2}`},
		{"completions stream", "/v1/completions", `{"model":"m","prompt":"%s","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := words(strings.ReplaceAll(tc.name, " ", "")+"w", 40)
			body := strings.Replace(tc.body, "%s", text, 1)
			n, cached := cachedUsage(t, url, tc.path, body)
			if cached != 0 {
				t.Fatalf("first request: cached_tokens %d, want 0", cached)
			}
			want := (n - 1) / 16 * 16
			if _, cached = cachedUsage(t, url, tc.path, body); cached != want || want == 0 {
				t.Fatalf("repeat of %d tokens: cached_tokens %d, want %d", n, cached, want)
			}
			longer := strings.Replace(tc.body, "%s", text+" "+words("more", 40), 1)
			if _, c := cachedUsage(t, url, tc.path, longer); c < want-16 || c == 0 {
				// Chat templates close the user turn after the text, so the
				// shared run may end one block earlier than the repeat's.
				t.Fatalf("longer prompt: cached_tokens %d, want about %d", c, want)
			}
		})
	}
}

// Prefill time is proportional to the uncached prompt tokens: a first
// request pays for all its tokens.
func TestSimPrefillCost(t *testing.T) {
	w, err := NewWorker(Config{PrefillPerToken: time.Millisecond, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		role           Role
		tokens, cached int
		kv             map[string]json.RawMessage
		want           time.Duration
	}{
		{"nothing cached", RoleDecode, 100, 0, nil, 100 * time.Millisecond},
		{"96 cached", RoleDecode, 100, 96, nil, 4 * time.Millisecond},
		{"prefill", RolePrefill, 100, 32, map[string]json.RawMessage{"do_remote_decode": json.RawMessage("true")}, 68 * time.Millisecond},
		{"decode pulling its KV", RoleDecode, 100, 0, map[string]json.RawMessage{"do_remote_prefill": json.RawMessage("true")}, 0},
		{"encode", RoleEncode, 100, 0, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &call{role: tc.role, cached: tc.cached, req: &request{Prompt: prompt(tc.tokens), KV: tc.kv}}
			if got := w.prefillCost(c); got != tc.want {
				t.Errorf("prefill cost %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := NewWorker(Config{PrefillPerToken: -time.Millisecond}); err == nil {
		t.Error("a negative prefill-per-token was accepted")
	}
	// End to end: a first request of 60 tokens at 2ms each cannot answer in
	// less than 120ms (a lower bound only: the machine may be slow).
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, PrefillPerToken: 2 * time.Millisecond})
	start := time.Now()
	status, _, b := post(t, srv.URL+"/v1/completions", `{"prompt":"`+words("cost", 59)+`","max_tokens":1}`, "EPP-Profile: decode")
	if status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Errorf("first request answered in %v, want at least 120ms of prefill", d)
	}
}

// scrape reads a worker's /metrics as Prometheus text and returns each
// sample (name{labels} -> value) of the vllm: series.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				if l.GetName() == "model_name" || l.GetName() == "engine" {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

// A real `celflow-sim` serves GET /metrics with vLLM's series, names and
// labels, and values that follow its state: running requests and the KV
// blocks they hold while a stream is open, prefix cache queries and hits
// in tokens, prompt and generation tokens.
func TestSimMetrics(t *testing.T) {
	url, stop := runMainAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--model", "mm",
		"--kv-cache-blocks", "64", "--output-tokens", "3", "--itl", "200ms")
	defer stop()
	const lbl = "{engine=0,model_name=mm}"
	m := scrape(t, url)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:gpu_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total"} {
		if v, ok := m[name+lbl]; !ok || v != 0 {
			t.Errorf("%s%s: %v (present %v), want 0 at start", name, lbl, v, ok)
		}
	}
	if m["vllm:cache_config_info{engine=0}"] != 1 {
		t.Errorf("vllm:cache_config_info missing: %v", m)
	}

	// A stream whose first token has arrived is running; 3 tokens 200ms
	// apart keep it running while the metrics are read.
	body := `{"model":"mm","prompt":"` + words("met", 40) + `","stream":true}`
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	m = scrape(t, url)
	// 41 prompt tokens (BOS and 40 words) + 3 output = 44 tokens: 3 blocks of 64.
	if m["vllm:num_requests_running"+lbl] != 1 || m["vllm:kv_cache_usage_perc"+lbl] != 3.0/64 {
		t.Errorf("during the stream: running %v, usage %v, want 1 and 3/64", m["vllm:num_requests_running"+lbl], m["vllm:kv_cache_usage_perc"+lbl])
	}
	io.Copy(io.Discard, r)
	resp.Body.Close()
	n, _ := cachedUsage(t, url, "/v1/completions", `{"model":"mm","prompt":"`+words("met", 40)+`","max_tokens":1}`)
	if n != 41 {
		t.Fatalf("prompt of %d tokens, want 41", n)
	}
	m = scrape(t, url)
	for name, want := range map[string]float64{
		"vllm:num_requests_running":       0,
		"vllm:num_requests_waiting":       0,
		"vllm:kv_cache_usage_perc":        0,
		"vllm:prefix_cache_queries_total": 82, // two lookups of 41 tokens
		"vllm:prefix_cache_hits_total":    32, // the repeat: two whole blocks
		"vllm:prompt_tokens_total":        82,
		"vllm:generation_tokens_total":    4, // 3 streamed + 1
	} {
		if got := m[name+lbl]; got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
