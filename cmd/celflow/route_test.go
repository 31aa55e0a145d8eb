package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/workflows"
)

// Cache-aware routing through the real front, the decode node and four
// `celflow sim` decode workers with a KV cache (16-token blocks): the
// follow-up turns of each conversation go where its prefix is and the
// workers serve them from cache; the truth check reads the workers'
// cached_tokens from the streamed replies (celflow_route_* on /metrics);
// and the one worker whose cache is too small to keep a conversation (one
// block) keeps not confirming the hits predicted on it, so GET /health
// lists it as mispredicting. TestCacheAwareThroughSims fails without the
// cache-aware picker (the config is refused) and without the truth check
// (no celflow_route_* series, no /health detail).
func TestCacheAwareThroughSims(t *testing.T) {
	var urls []string
	for i, blocks := range []string{"512", "512", "512", "1"} {
		u, stop := runSimAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--name", fmt.Sprintf("d%d", i),
			"--kv-cache-blocks", blocks, "--block-size", "16", "--output-tokens", "2")
		t.Cleanup(func() { stop() })
		urls = append(urls, u)
	}
	forgetful := urls[3]
	dir := t.TempDir()
	wf, err := workflows.FS.ReadFile("decode-only.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "wf.yaml", string(wf))
	cfg := writeFile(t, dir, "serve.yaml", `server: {listen: "127.0.0.1:0", drain_delay: 0s, shutdown_timeout: 2s}
upstream:
  mode: direct
  pools: {decode: ["`+strings.Join(urls, `", "`)+`"]}
  picker: cache-aware
  routing: {mispredict_window: 4}
workflow: wf.yaml
`)
	addr, logs := startServe(t, cfg, nil)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil}}
	// generate streams with usage; returns the prompt's cached_tokens.
	generate := func(ids []int) int {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"model": "sim-model", "token_ids": ids, "stream": true,
			"stream_options": map[string]any{"include_usage": true}, "sampling_params": map[string]any{"max_tokens": 2}})
		resp, err := client.Post("http://"+addr+"/inference/v1/generate", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("generate: %d %s\n%s", resp.StatusCode, body, logs.String())
		}
		cached := -1
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev struct {
				Usage *struct {
					Details *struct {
						Cached int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && line != "[DONE]" && json.Unmarshal([]byte(line), &ev) == nil &&
				ev.Usage != nil && ev.Usage.Details != nil {
				cached = ev.Usage.Details.Cached
			}
		}
		if cached < 0 {
			t.Fatal("no usage chunk with prompt_tokens_details")
		}
		return cached
	}
	health := func() []map[string]any {
		t.Helper()
		resp, err := client.Get("http://" + addr + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			Status string
			Detail struct {
				Routing struct{ Mispredicting []map[string]any }
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 || h.Status != "ok" {
			t.Fatalf("/health: %d %v %+v", resp.StatusCode, err, h)
		}
		return h.Detail.Routing.Mispredicting
	}
	if m := health(); m != nil {
		t.Fatalf("mispredicting before any request: %v", m)
	}
	followPrompt, followCached := 0, 0
	for conv := range 16 {
		var ids []int
		for turn := range 3 {
			// Each turn adds 40 tokens to the conversation (the answer and
			// the next question, as a chat template would).
			for i := range 40 {
				ids = append(ids, 1000*conv+100*turn+i+1)
			}
			got := generate(ids)
			if turn > 0 {
				followPrompt += len(ids)
				followCached += got
			}
		}
	}
	// Each worker began four conversations (ties go by rotation): the
	// forgetful one has had four predicted hits, a full window.
	if listed := health(); len(listed) != 1 || listed[0]["worker"] != "decode[3]" || listed[0]["cache_source_set_aside"] != false {
		t.Fatalf("/health mispredicting = %v, want only decode[3] (%s)\n%s", listed, forgetful, logs.String())
	}
	// The three workers that keep their conversations serve every
	// follow-up from cache as far as whole blocks allow: turn 2 (80
	// tokens) finds turn 1's 2 blocks, turn 3 (120) finds turn 2's 5:
	// 32 + 80 tokens per conversation, 12 conversations. Round-robin sends
	// each turn to the next worker: nothing cached.
	if followCached < 12*(32+80) {
		t.Errorf("follow-up turns: %d of %d prompt tokens cached, want at least %d", followCached, followPrompt, 12*(32+80))
	}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series := map[string]float64{}
	for _, ln := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(ln, "celflow_route_") {
			var v float64
			if i := strings.LastIndexByte(ln, ' '); i > 0 {
				fmt.Sscan(ln[i+1:], &v)
				series[ln[:i]] = v
			}
		}
	}
	if series[`celflow_route_predictions_total{outcome="tp",pool="decode"}`] < 1 ||
		series[`celflow_route_predictions_total{outcome="fp",pool="decode"}`] != 0 ||
		series[`celflow_route_correct_cached_tokens_total{pool="decode"}`] < float64(followCached)/2 ||
		series[`celflow_route_mispredicting{pool="decode",worker="decode[3]"}`] != 1 ||
		series[`celflow_route_mispredicting{pool="decode",worker="decode[0]"}`] != 0 {
		t.Errorf("route series: %v", series)
	}
}
