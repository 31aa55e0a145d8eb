package sim

import (
	"encoding/json"
	"io"
	"net/http"
)

// POST /sim/cache/probe (docs/simulator.md, Endpoints): how many leading
// tokens of a prompt this worker's KV cache holds right now, counted as
// usage.prompt_tokens_details.cached_tokens would count them if the prompt
// were sent (whole blocks, never the last token), without touching the
// cache: a probe neither makes blocks recently used nor inserts any. A
// benchmark's oracle router asks every worker before each pick, which no
// real router can; celflow never calls it.
//
// Body: {"token_ids": [int, ...], "model": M} (a text prompt's multimodal
// items are not part of a probe; model, optional, probes a LoRA adapter's
// blocks when it names one). Reply: {"cached_tokens": N, "block_size": B,
// "blocks": held, "capacity": C}.

// cacheProbeLimit bounds a probe body (a 1M-token prompt's ids).
const cacheProbeLimit = 16 << 20

func (w *Worker) serveCacheProbe(rw http.ResponseWriter, r *http.Request) {
	var body struct {
		TokenIDs []int  `json:"token_ids"`
		Model    string `json:"model"` // an adapter's name probes its blocks (lora.go)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, cacheProbeLimit+1))
	if err != nil || len(b) > cacheProbeLimit || json.Unmarshal(b, &body) != nil {
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": `want {"token_ids": [int, ...]} (at most 16 MiB)`})
		return
	}
	c := w.cache
	writeJSON(rw, http.StatusOK, map[string]int{
		"cached_tokens": c.Peek(w.probePrompt(body.TokenIDs, body.Model)),
		"block_size":    c.BlockSize(),
		"blocks":        c.Blocks(),
		"capacity":      c.Capacity(),
	})
}

// Peek is Cached without its side effect: the blocks found do not become
// recently used.
func (c *KVCache) Peek(p promptInfo) int {
	keys, _, _ := chainKeys(p, c.blockSize)
	keys = keys[:c.Cacheable(p)/c.blockSize]
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range keys {
		if _, ok := c.bm[k]; !ok {
			break
		}
		n++
	}
	return n * c.blockSize
}
