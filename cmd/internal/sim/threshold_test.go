package sim

import (
	"bytes"
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
