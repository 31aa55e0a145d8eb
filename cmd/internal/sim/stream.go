package sim

import (
	"encoding/json"
	"net/http"
)

// stream writes the answer as SSE: headers at once, then after TTFT the role
// chunk (chat), one content chunk per token and choice, ITL apart, a finish
// chunk per choice, the usage chunk when stream_options.include_usage, and
// `data: [DONE]`. Every event is flushed as it is written.
func (w *Worker) stream(c *call, g genPlan) {
	ctx := c.r.Context()
	if !sleep(ctx, c.fault.SlowHeaders) {
		return
	}
	h := c.rw.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	c.rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.rw)
	_ = rc.Flush()
	if !sleep(ctx, g.ttft) {
		return
	}
	withUsage := c.req.IncludeUsage
	ids := newStreamIDs(g, c.req)
	kill, killing := g.killPoint(c.fault)
	send := func(choices any) bool {
		ck := chunk{Choices: choices, withUsage: withUsage}
		switch c.req.Format {
		case fmtChat:
			ck.ID, ck.Object, ck.Created, ck.Model = g.id, "chat.completion.chunk", g.created, g.model
			ck.PromptTokenIDs = ids.chatPrompt()
		case fmtCompletions:
			ck.ID, ck.Object, ck.Created, ck.Model = g.id, "text_completion", g.created, g.model
		default:
			ck.RequestID = g.id
		}
		return writeEvent(c.rw, rc, ck)
	}
	if c.req.Format == fmtChat {
		for ci := range g.choices {
			empty := ""
			if !send([]chatChunkChoice{{Index: ci, Delta: chatDelta{Role: "assistant", Content: &empty}}}) {
				return
			}
		}
	}
	if killing && kill.sent == 0 {
		w.die(c, kill, true)
		return
	}
	for i := range g.count {
		if i > 0 && !sleep(ctx, g.itl) {
			return
		}
		for ci := range g.choices {
			if !send(ids.choices(g.tokenChoices(c.req.Format, ci, i, nil), ci, i)) {
				return
			}
		}
		if i == 0 && c.fault.ResetMidStream {
			resetConn(c.rw, true)
			return
		}
		if killing && kill.sent == i+1 {
			w.die(c, kill, true)
			return
		}
	}
	for ci := range g.choices {
		if !send(ids.choices(g.tokenChoices(c.req.Format, ci, -1, &g.finish), ci, -1)) {
			return
		}
	}
	if withUsage {
		u := g.usage(len(c.req.Prompt.Tokens))
		ck := chunk{Choices: []any{}, Usage: &u, withUsage: true}
		switch c.req.Format {
		case fmtChat:
			ck.ID, ck.Object, ck.Created, ck.Model = g.id, "chat.completion.chunk", g.created, g.model
		case fmtCompletions:
			ck.ID, ck.Object, ck.Created, ck.Model = g.id, "text_completion", g.created, g.model
		default:
			ck.RequestID = g.id
		}
		if !writeEvent(c.rw, rc, ck) {
			return
		}
	}
	c.complete = true
	c.finalize(http.StatusOK)
	if _, err := c.rw.Write([]byte("data: [DONE]\n\n")); err != nil || rc.Flush() != nil {
		c.complete = false
	}
}

// tokenChoices is the choices array of one event: token i of choice ci, or
// (i < 0) the finish event of choice ci.
func (g genPlan) tokenChoices(f format, ci, i int, finish *string) any {
	switch f {
	case fmtChat:
		var d chatDelta
		if i >= 0 {
			t := g.text(ci, i)
			d.Content = &t
		}
		return []chatChunkChoice{{Index: ci, Delta: d, FinishReason: finish}}
	case fmtCompletions:
		var t string
		if i >= 0 {
			t = g.text(ci, i)
		}
		return []completionChunkChoice{{Index: ci, Text: t, FinishReason: finish}}
	}
	ids := []int{}
	if i >= 0 {
		ids = append(ids, g.token(ci, i))
	}
	return []generateChunkChoice{{Index: ci, FinishReason: finish, TokenIDs: ids}}
}

// writeEvent writes one `data:` event and flushes it; false when the caller
// is gone.
func writeEvent(w http.ResponseWriter, rc *http.ResponseController, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := w.Write(buf); err != nil {
		return false
	}
	return rc.Flush() == nil
}
