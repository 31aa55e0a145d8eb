package sim

import (
	"encoding/json"
	"net/http"
)

// finishCacheThreshold is the finish reason of a request a decode worker
// refused for too small a cached fraction of its prompt (vLLM RFC #24256,
// llm-d-inference-sim).
const finishCacheThreshold = "cache_threshold"

// thresholdMet applies the request's cache_hit_threshold with the worker's
// KV cache. The cached share compared is cachedShare's: the prompt tokens
// served from cache over the prompt tokens a cache can ever serve (whole
// blocks only), not over the whole prompt, so that a fully cached prompt
// meets any threshold however far past a block boundary it ends. Below the
// threshold the worker answers at once, 200, with finish_reason
// "cache_threshold", no tokens and usage of the prompt alone (JSON, or one
// SSE event, the usage event when asked, and [DONE]), and thresholdMet
// returns false. At or above it the request is served (true).
func (w *Worker) thresholdMet(c *call, p promptInfo) bool {
	frac := cachedShare(len(p.Tokens), c.cached, w.cache.Cacheable(p))
	if frac >= *c.req.CacheHitThreshold {
		c.cache = "hit"
		c.rw.Header().Set("X-Sim-Cache", "hit")
		return true
	}
	c.cache = "miss"
	c.rw.Header().Set("X-Sim-Cache", "miss")
	g := w.plan(c)
	g.count, g.finish = 0, finishCacheThreshold
	if !c.req.Stream {
		b, err := json.Marshal(w.response(c, g, transferOut{}))
		if err != nil {
			c.fail(http.StatusInternalServerError, err.Error())
			return false
		}
		writeReply(c, b)
		return false
	}
	h := c.rw.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	c.rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.rw)
	ck := chunk{withUsage: c.req.IncludeUsage}
	finish := finishCacheThreshold
	empty := ""
	switch c.req.Format {
	case fmtChat:
		ck.ID, ck.Object, ck.Created, ck.Model = g.id, "chat.completion.chunk", g.created, g.model
		ck.Choices = []chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}, FinishReason: &finish}}
	default:
		ck.ID, ck.Object, ck.Created, ck.Model = g.id, "text_completion", g.created, g.model
		ck.Choices = []completionChunkChoice{{FinishReason: &finish}}
	}
	if !writeEvent(c.rw, rc, ck) {
		return false
	}
	if c.req.IncludeUsage {
		u := g.usage(len(p.Tokens))
		uc := chunk{ID: ck.ID, Object: ck.Object, Created: ck.Created, Model: ck.Model, Choices: []any{}, Usage: &u, withUsage: true}
		if !writeEvent(c.rw, rc, uc) {
			return false
		}
	}
	c.complete = true
	c.finalize(http.StatusOK)
	if _, err := c.rw.Write([]byte("data: [DONE]\n\n")); err != nil || rc.Flush() != nil {
		c.complete = false
	}
	return false
}

// cachedShare is the share of a prompt of n tokens that the cache served,
// counted against the cacheable tokens (the whole blocks within all but its
// last token, as vLLM caches): cached / cacheable. An empty prompt is
// wholly cached (1); a non-empty one with no whole block to cache has a
// share of 0, so only a threshold of 0 serves it.
func cachedShare(n, cached, cacheable int) float64 {
	switch {
	case n == 0:
		return 1
	case cacheable == 0:
		return 0
	}
	return float64(cached) / float64(cacheable)
}
