package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/workflows"
)

// Issue 20, LoRA in the cache key, through serve: two real sims serving
// the base model and the adapter "sql", the cache-aware picker. The same
// token ids sent under the base model and then under the adapter are never
// predicted a hit for the adapter (the worker has none of its blocks:
// celflow_route_predictions_total{outcome="fp"} stays 0), and the repeats
// under each are predicted and confirmed: precision 100% over the mixed
// workload. Without the adapter in the key every adapter request after its
// base twin is a false positive.
func TestLoRACacheKeyThroughServe(t *testing.T) {
	var urls []string
	for i := range 2 {
		u, stop := runSimAsync(t, "--listen", "127.0.0.1:0", "--roles", "decode", "--name", fmt.Sprintf("d%d", i),
			"--block-size", "16", "--output-tokens", "2", "--lora", "sql")
		t.Cleanup(func() { stop() })
		urls = append(urls, u)
	}
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
workflow: wf.yaml
`)
	addr, logs := startServe(t, cfg, nil)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: nil}}
	generate := func(model string, ids []int) int {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"model": model, "token_ids": ids, "sampling_params": map[string]any{"max_tokens": 2}})
		resp, err := client.Post("http://"+addr+"/inference/v1/generate", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("generate: %d %s\n%s", resp.StatusCode, body, logs.String())
		}
		var r struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		return r.Usage.Details.Cached
	}
	ids := func(from, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = from + i
		}
		return out
	}
	const (
		fp        = `celflow_route_predictions_total{outcome="fp",pool="decode"}`
		tp        = `celflow_route_predictions_total{outcome="tp",pool="decode"}`
		predicted = `celflow_route_predicted_cached_tokens_total{pool="decode"}`
		correct   = `celflow_route_correct_cached_tokens_total{pool="decode"}`
	)
	// The pools' model lists arrive in the background from the first
	// pick; until then nothing is predicted or recorded. A base-model
	// prompt repeated is predicted once they are in.
	warm := 0
	waitFor(t, "a predicted hit (the adapter list in)", func() bool {
		p := ids(900_000+warm*100, 40)
		warm++
		generate("sim-model", p)
		generate("sim-model", p)
		return metric(t, addr, tp) >= 1
	})
	fp0 := metric(t, addr, fp)
	const n = 8
	for i := range n {
		p := ids(10_000+i*1000, 16*(2+i%3)+3)
		first, then := "sim-model", "sql"
		if i%2 == 1 {
			first, then = then, first
		}
		generate(first, p)
		if c := generate(then, p); c != 0 {
			t.Fatalf("prompt %d: the worker reports %d cached under %s after %s", i, c, then, first)
		}
		if got := metric(t, addr, fp); got != fp0 {
			t.Fatalf("prompt %d under %s after %s: %v false positives, want %v (predicted the other model's blocks)", i, then, first, got, fp0)
		}
	}
	tp0 := metric(t, addr, tp)
	for i := range n {
		p := ids(10_000+i*1000, 16*(2+i%3)+3)
		for _, model := range []string{"sim-model", "sql"} {
			if c := generate(model, p); c != len(p)/16*16 {
				t.Fatalf("repeat of prompt %d under %s: %d cached", i, model, c)
			}
		}
	}
	if got := metric(t, addr, tp) - tp0; got != 2*n {
		t.Fatalf("%v predicted hits over the %d repeats, want every one", got, 2*n)
	}
	if f := metric(t, addr, fp); f != fp0 {
		t.Fatalf("%v false positives", f-fp0)
	}
	if p, c := metric(t, addr, predicted), metric(t, addr, correct); p == 0 || c/p < 0.99 {
		t.Fatalf("precision %v/%v", c, p)
	}
}
