package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// vLLM RFC #24256 as llm-d-inference-sim implements it: a decode request
// carrying cache_hit_threshold is answered at once with finish_reason
// "cache_threshold" and no tokens when the cached fraction of its prompt is
// below the threshold (JSON, or one SSE event), and served otherwise; the
// threshold rules over Prefer: if-available.
func TestWorkerCacheHitThreshold(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		stream           bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"the quick brown fox jumps over the lazy dog again and again and again, past one KV block"}],"cache_hit_threshold":0.8%s}`, false},
		{"chat stream", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"the quick brown fox jumps over the lazy dog again and again and again, past one KV block"}],"cache_hit_threshold":0.8,"stream":true,"stream_options":{"include_usage":true}%s}`, true},
		{"completions", "/v1/completions", `{"model":"m","prompt":"the quick brown fox jumps over the lazy dog again and again and again, past one KV block","cache_hit_threshold":0.8%s}`, false},
		{"completions stream", "/v1/completions", `{"model":"m","prompt":"the quick brown fox jumps over the lazy dog again and again and again, past one KV block","cache_hit_threshold":0.8,"stream":true%s}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
			body := strings.Replace(tc.body, "%s", "", 1)
			status, h, b := post(t, srv.URL+tc.path, body, "EPP-Profile: decode", "Prefer: if-available")
			if status != 200 || h.Get("X-Sim-Cache") != "miss" || !bytes.Contains(b, []byte(`"finish_reason":"cache_threshold"`)) {
				t.Fatalf("miss: %d %s %s", status, h.Get("X-Sim-Cache"), b)
			}
			if tc.stream {
				events := bytes.Count(b, []byte("data: "))
				want := 2 // the finish event and [DONE]
				if strings.Contains(tc.body, "include_usage") {
					want = 3
				}
				if events != want || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
					t.Fatalf("stream of %d events:\n%s", events, b)
				}
			} else {
				m := decodeJSON(t, b)
				u := m["usage"].(map[string]any)
				if fmt.Sprint(u["completion_tokens"]) != "0" || fmt.Sprint(u["prompt_tokens"]) == "0" {
					t.Fatalf("usage %v", u)
				}
			}
			if w.PrefixCache().Len() != 0 {
				t.Fatal("a cache_threshold answer must not insert")
			}
			// A plain decode caches the prompt; the same request is then served.
			if status, _, b := post(t, srv.URL+tc.path, plain(tc.body), "EPP-Profile: decode"); status != 200 {
				t.Fatalf("decode: %d %s", status, b)
			}
			status, h, b = post(t, srv.URL+tc.path, body, "EPP-Profile: decode", "Prefer: if-available")
			if status != 200 || h.Get("X-Sim-Cache") != "hit" || bytes.Contains(b, []byte("cache_threshold")) {
				t.Fatalf("hit: %d %s %s", status, h.Get("X-Sim-Cache"), b)
			}
		})
	}
}

// plain is a case body without its threshold.
func plain(body string) string {
	return strings.Replace(strings.Replace(body, `,"cache_hit_threshold":0.8`, "", 1), "%s", "", 1)
}

func TestWorkerCacheHitThresholdEdges(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
	const p = `{"model":"m","prompt":"hello there","cache_hit_threshold":%s}`
	// 0: any cached fraction is enough.
	if status, h, b := post(t, srv.URL+"/v1/completions", strings.Replace(p, "%s", "0", 1), "EPP-Profile: decode"); status != 200 || h.Get("X-Sim-Cache") != "hit" {
		t.Fatalf("threshold 0: %d %s", status, b)
	}
	for _, bad := range []string{"1.5", "-0.1"} {
		if status, _, b := post(t, srv.URL+"/v1/completions", strings.Replace(p, "%s", bad, 1), "EPP-Profile: decode"); status != http.StatusBadRequest {
			t.Fatalf("threshold %s: %d %s", bad, status, b)
		}
	}
}

func TestCachedShare(t *testing.T) {
	for _, tc := range []struct {
		n, cached, cacheable int
		want                 float64
	}{
		{0, 0, 0, 1},     // an empty prompt is wholly cached
		{10, 0, 0, 0},    // shorter than a block: nothing can hit
		{17, 16, 16, 1},  // just over a block, fully cached: 16/17 of the prompt but all of what can hit
		{33, 16, 32, .5}, // half of the cacheable blocks
		{100, 0, 96, 0},
	} {
		if got := cachedShare(tc.n, tc.cached, tc.cacheable); got != tc.want {
			t.Errorf("cachedShare(%d, %d, %d) = %v, want %v", tc.n, tc.cached, tc.cacheable, got, tc.want)
		}
	}
}

// Thresholds that can be met: a repeated prompt of more than one block meets
// cache_hit_threshold 0.8 wherever it ends, although only its whole blocks
// are cached (cached_tokens is below 80% of the prompt), because the share
// is counted against the cacheable tokens. A prompt that is not longer
// than one block has nothing to cache and never meets it.
func TestWorkerThresholdBlockGranularity(t *testing.T) {
	url, stop := runMainAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode")
	defer stop()
	for _, tc := range []struct {
		words int // the prompt is BOS and this many words
		hit   bool
	}{
		{9, false}, {15, false}, // 10 and 16 tokens: no whole block within all but the last token
		{16, true}, {19, true}, {31, true}, {32, true}, {39, true}, {60, true},
	} {
		t.Run(fmt.Sprint(tc.words+1, "tokens"), func(t *testing.T) {
			text := words(fmt.Sprintf("g%d-", tc.words), tc.words)
			plainBody := `{"model":"m","prompt":"` + text + `","max_tokens":1}`
			withT := `{"model":"m","prompt":"` + text + `","max_tokens":1,"cache_hit_threshold":0.8}`
			if status, h, b := post(t, url+"/v1/completions", withT, "EPP-Profile: decode"); status != 200 || h.Get("X-Sim-Cache") != "miss" {
				t.Fatalf("first: %d %s %s", status, h.Get("X-Sim-Cache"), b)
			}
			n, _ := cachedUsage(t, url, "/v1/completions", plainBody) // caches the prompt
			status, h, b := post(t, url+"/v1/completions", withT, "EPP-Profile: decode")
			if status != 200 || (h.Get("X-Sim-Cache") == "hit") != tc.hit {
				t.Fatalf("repeat of %d tokens: %d %s, want hit %v: %s", n, status, h.Get("X-Sim-Cache"), tc.hit, b)
			}
			var r struct {
				Usage struct {
					Details struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if want := (n - 1) / 16 * 16; r.Usage.Details.CachedTokens != want {
				t.Fatalf("cached_tokens %d, want %d", r.Usage.Details.CachedTokens, want)
			}
		})
	}
}
