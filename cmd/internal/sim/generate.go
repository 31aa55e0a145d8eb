package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// genPlan is what the fake model will answer for one request.
type genPlan struct {
	seed      uint64
	cached    int // prompt tokens served from the KV cache
	choices   int
	count     int // tokens per choice
	finish    string
	ttft, itl time.Duration
	id        string // chatcmpl-…, cmpl-… or the generate request_id
	model     string
	created   int64
	det       *determ // deterministic (continuable) mode, nil otherwise
}

func (g genPlan) token(c, i int) int {
	if g.det != nil {
		return WordID(g.det.word(c, g.det.tail+i))
	}
	return WordID(outputWord(g.seed, c, i))
}

func (g genPlan) text(c, i int) string {
	if g.det != nil {
		return g.det.text(c, g.det.tail+i)
	}
	if i == 0 {
		return outputWord(g.seed, c, i)
	}
	return " " + outputWord(g.seed, c, i)
}

// plan sizes the answer: OutputTokens long, at least min_tokens, cut to
// max_tokens (finish_reason "length" when the cut shortened it).
func (w *Worker) plan(c *call) genPlan {
	req := c.req
	g := genPlan{
		seed: seedOf(req.Prompt.Tokens), cached: c.cached, choices: req.N, count: w.cfg.OutputTokens, finish: "stop",
		ttft: w.cfg.TTFT + w.prefillCost(c), itl: w.cfg.ITL, model: req.Model, created: time.Now().Unix(),
	}
	if g.model == "" {
		g.model = w.cfg.Model
	}
	g.count = max(g.count, int(req.MinTokens))
	if req.MaxTokens.Set && req.MaxTokens.V < int64(g.count) {
		g.count, g.finish = int(req.MaxTokens.V), "length"
	}
	if w.deterministic(req) {
		g.det = newDeterm(req.Prompt.Tokens)
		g.count, g.finish = g.det.length(w.cfg.OutputTokens, req.MinTokens, req.MaxTokens)
	}
	if c.fault.TTFT != nil {
		g.ttft = *c.fault.TTFT
	}
	if c.fault.ITL != nil {
		g.itl = *c.fault.ITL
	}
	// vLLM derives reply ids from X-Request-Id when the client sends one.
	base := c.r.Header.Get("X-Request-Id")
	if base == "" {
		base = randHex(16)
	}
	switch req.Format {
	case fmtChat:
		g.id = "chatcmpl-" + base
	case fmtCompletions:
		g.id = "cmpl-" + base
	default:
		g.id = req.RequestID
		if g.id == "" {
			g.id = base
		}
	}
	return g
}

func (g genPlan) usage(prompt int) usage {
	n := g.choices * g.count
	return usage{PromptTokens: prompt, CompletionTokens: n, TotalTokens: prompt + n,
		PromptTokensDetails: promptTokensDetails{CachedTokens: g.cached}}
}

// generate writes the answer, as JSON or SSE, with the configured latency.
// It stops as soon as the caller goes away.
func (w *Worker) generate(c *call, out transferOut) {
	g := w.plan(c)
	if c.req.Stream {
		w.stream(c, g)
		return
	}
	ctx := c.r.Context()
	if k, ok := g.killPoint(c.fault); ok {
		// A worker killed while generating: nothing of the reply was
		// written yet, the caller gets no response.
		if k.sent > 0 && !sleep(ctx, g.ttft+time.Duration(k.sent-1)*g.itl) {
			return
		}
		w.die(c, k, false)
		return
	}
	if !sleep(ctx, g.ttft+time.Duration(max(g.count-1, 0))*g.itl) || !sleep(ctx, c.fault.SlowHeaders) {
		return
	}
	b, err := json.Marshal(w.response(c, g, out))
	if err != nil {
		c.fail(http.StatusInternalServerError, err.Error())
		return
	}
	writeReply(c, b)
}

// writeReply writes a 200 JSON reply, or half of it and a reset when the
// request's fault says reset-mid-stream. stall-body and trickle send the
// headers first, then wait or drip the body (the reply is not complete if
// the caller leaves first).
func writeReply(c *call, b []byte) {
	h := c.rw.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	c.rw.WriteHeader(http.StatusOK)
	if c.fault.ResetMidStream {
		c.rw.Write(b[:len(b)/2])
		resetConn(c.rw, true)
		return
	}
	if c.fault.StallBody > 0 || c.fault.Trickle > 0 {
		slowBody(c, b)
		return
	}
	c.complete = true
	c.finalize(http.StatusOK)
	if _, err := c.rw.Write(b); err != nil {
		c.complete = false
	}
}

// slowBody plays stall-body and trickle: the headers go out at once, then
// the silence, then the body (byte by byte, trickle apart, when
// trickling). Every wait ends when the caller leaves; the handler's
// deferred finalize then records the call as cancelled.
func slowBody(c *call, b []byte) {
	rc := http.NewResponseController(c.rw)
	_ = rc.Flush()
	ctx := c.r.Context()
	if !sleep(ctx, c.fault.StallBody) {
		return
	}
	step := 1
	if c.fault.Trickle <= 0 {
		step = len(b)
	}
	for i := 0; i < len(b); i += step {
		if i > 0 && !sleep(ctx, c.fault.Trickle) {
			return
		}
		end := min(i+step, len(b))
		if end == len(b) {
			c.complete = true
			c.finalize(http.StatusOK)
		}
		if _, err := c.rw.Write(b[i:end]); err != nil {
			c.complete = false
			return
		}
		_ = rc.Flush()
	}
}

// response builds the non-streaming reply of the request's format.
func (w *Worker) response(c *call, g genPlan, out transferOut) any {
	u := g.usage(len(c.req.Prompt.Tokens))
	switch c.req.Format {
	case fmtChat:
		r := chatResponse{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.model, Usage: u, transferOut: out}
		for ci := range g.choices {
			var text string
			for i := range g.count {
				text += g.text(ci, i)
			}
			r.Choices = append(r.Choices, chatChoice{Index: ci, FinishReason: g.finish,
				Message: chatMessageOut{Role: "assistant", Content: text, ToolCalls: []any{}}})
			if c.req.ReturnTokenIDs {
				r.Choices[ci].TokenIDs = g.answerIDs(ci)
				r.PromptTokenIDs = c.req.Prompt.Tokens
			}
		}
		return r
	case fmtCompletions:
		r := completionResponse{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model, Usage: u, transferOut: out}
		for ci := range g.choices {
			var text string
			for i := range g.count {
				text += g.text(ci, i)
			}
			r.Choices = append(r.Choices, completionChoice{Index: ci, Text: text, FinishReason: g.finish})
			if c.req.ReturnTokenIDs {
				r.Choices[ci].TokenIDs, r.Choices[ci].PromptTokenIDs = g.answerIDs(ci), c.req.Prompt.Tokens
			}
		}
		return r
	}
	r := generateResponse{RequestID: g.id, Model: g.model, Created: g.created, Usage: u, transferOut: out}
	for ci := range g.choices {
		r.Choices = append(r.Choices, generateChoice{Index: ci, FinishReason: g.finish, TokenIDs: g.answerIDs(ci)})
	}
	return r
}
