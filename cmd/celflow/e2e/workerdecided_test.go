//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestWorkerDecided runs pd-worker-decided.yaml against celflow-sim
// workers in direct mode, without render (issue 12): for chat and
// completions, streaming and not, a first request is a cache_threshold
// miss on the decode worker (never relayed) and takes prefill then decode;
// the same request again is a hit the decode worker serves alone.
func TestWorkerDecided(t *testing.T) {
	t.Parallel()
	st := startStack(t, stackOpts{workflow: "pd-worker-decided.yaml"})
	for _, tc := range []struct {
		name, path string
		stream     bool
	}{
		{"chat", "/v1/chat/completions", false},
		{"chat-stream", "/v1/chat/completions", true},
		{"completions", "/v1/completions", false},
		{"completions-stream", "/v1/completions", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := prompt("worker decided " + tc.name)
			body := map[string]any{"model": model, "max_tokens": 4, "stream": tc.stream}
			if tc.path == "/v1/completions" {
				body["prompt"] = text
			} else {
				body["messages"] = []any{map[string]any{"role": "user", "content": text}}
			}
			b, _ := json.Marshal(body)
			send := func(id string) string {
				req, _ := http.NewRequest(http.MethodPost, st.url+tc.path, strings.NewReader(string(b)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", id)
				resp, err := httpc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				out, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || strings.Contains(string(out), "cache_threshold") {
					t.Fatalf("%s: %d %s", id, resp.StatusCode, out)
				}
				if tc.stream != strings.HasSuffix(string(out), "data: [DONE]\n\n") {
					t.Fatalf("%s: stream %v, body %s", id, tc.stream, out)
				}
				return string(out)
			}

			miss := "e2e-wd-miss-" + tc.name
			send(miss)
			legs := st.legs(miss)
			dec := of(legs, "decode")
			if len(dec) != 2 || len(of(legs, "prefill")) != 1 || dec[0].Cache != "miss" {
				t.Fatalf("miss: legs\n%s", describe(legs))
			}
			check(t, dec[0], "conditional decode").header("Prefer", "if-available").eq("cache_hit_threshold", json.Number("0.8")).absent("kv_transfer_params")
			check(t, dec[1], "decode").absent("cache_hit_threshold").eq("kv_transfer_params.do_remote_prefill", true)
			check(t, one(t, legs, "prefill"), "prefill").absent("cache_hit_threshold")

			hit := "e2e-wd-hit-" + tc.name
			send(hit)
			legs = st.legs(hit)
			if len(legs) != 1 || legs[0].Worker != "decode" || legs[0].Cache != "hit" {
				t.Fatalf("hit: legs\n%s", describe(legs))
			}
		})
	}
}
