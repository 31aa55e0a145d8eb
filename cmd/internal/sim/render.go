package sim

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
)

// renderResponse is vLLM's GenerateRequest as the render endpoints return it.
type renderResponse struct {
	RequestID        string         `json:"request_id"`
	TokenIDs         []int          `json:"token_ids"`
	Features         any            `json:"features"`
	SamplingParams   map[string]any `json:"sampling_params"`
	Model            string         `json:"model"`
	Stream           bool           `json:"stream"`
	StreamOptions    any            `json:"stream_options"`
	CacheSalt        any            `json:"cache_salt"`
	Priority         int            `json:"priority"`
	KVTransferParams any            `json:"kv_transfer_params"`
}

// render serves POST /v1/chat/completions/render (one object) and
// POST /v1/completions/render (a one-element array), docs/protocol.md, render.
func (w *Worker) render(f format) func(*call) {
	return func(c *call) {
		c.role = RoleRender
		w.rec.update(c.rec, func(x *Record) { x.Role = RoleRender })
		if !w.roles[RoleRender] {
			c.fail(http.StatusNotFound, "worker "+w.cfg.Name+" does not serve render")
			return
		}
		if !w.applyFaults(c) {
			return
		}
		req, err := parseRequest(f, c.body)
		if err != nil {
			c.fail(http.StatusBadRequest, err.Error())
			return
		}
		c.req = req
		if !sleep(c.r.Context(), c.fault.SlowHeaders) {
			return
		}
		items := req.Prompt.Items
		for i := range items {
			blob := base64.StdEncoding.EncodeToString(kwargsBlob(items[i].Hash, items[i].Length))
			items[i].Kwargs = &blob
		}
		model := req.Model
		if model == "" {
			model = w.cfg.Model
		}
		sp := map[string]any{"n": req.N, "max_tokens": nil, "min_tokens": req.MinTokens}
		if req.MaxTokens.Set {
			sp["max_tokens"] = req.MaxTokens.V
		}
		id := c.r.Header.Get("X-Request-Id")
		if id == "" {
			id = randHex(16)
		}
		out := renderResponse{
			RequestID: id, TokenIDs: req.Prompt.Tokens, Features: featuresJSON(items, true),
			SamplingParams: sp, Model: model, Stream: req.Stream,
		}
		var v any = out
		if f == fmtCompletions {
			v = []renderResponse{out}
		}
		b, err := json.Marshal(v)
		if err != nil {
			c.fail(http.StatusInternalServerError, err.Error())
			return
		}
		writeReply(c, b)
	}
}
