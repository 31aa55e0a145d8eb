package conditionaldecode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Worker-decided conditional decode (vLLM RFC #24256, as llm-d's routing
// sidecar uses it): the leg carries cache_hit_threshold, and a decode
// worker holding too little of the prompt answers at once, 200, with
// finish_reason "cache_threshold" and no tokens, as JSON or as an SSE
// stream whose first event carries it. judge reads the start of the reply
// to tell that miss from a hit. A miss is never relayed; a hit is relayed
// whole, the bytes judge read replayed in front of the rest.

// probeLimit bounds what judge reads: a cache_threshold reply carries no
// tokens and is small, so a reply (or a stream start) longer than this
// without a verdict is a hit.
const probeLimit = 16 << 10

type verdict uint8

const (
	verdictHit verdict = iota
	verdictMiss
)

const finishCacheThreshold = "cache_threshold"

// judge reads the start of a 2xx reply and decides. On a hit resp.Body is
// replaced by one that replays what was read. Errors: the client left or
// the deadline passed (their kinds), the reply stalled past
// stream_idle_timeout (upstream_timeout), or a read failed (bad_gateway).
func (n *ConditionalDecode) judge(ctx context.Context, resp *http.Response) (verdict, *engine.Error) {
	sse := isEventStream(resp.Header.Get("Content-Type"))
	if !sse && resp.ContentLength > probeLimit {
		upstream.ReleaseBodyBounds(resp.Body)
		return verdictHit, nil // longer than any cache_threshold reply: no read at all
	}
	body := resp.Body
	var stalled atomic.Bool
	if n.idle > 0 {
		t := time.AfterFunc(n.idle, func() { stalled.Store(true); body.Close() })
		defer t.Stop()
		body = &idleBody{ReadCloser: body, t: t, d: n.idle}
	}
	var head []byte
	var v verdict
	var err error
	if sse {
		head, v, err = probeStream(body)
	} else {
		head, v, err = probeJSON(body)
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return v, engine.AsError(ctx.Err())
		case stalled.Load():
			return v, engine.Errorf(engine.KindUpstreamTimeout, "reply stalled for %s before the cache verdict", n.idle)
		}
		var te *upstream.TimeoutError
		if errors.As(err, &te) { // idle_timeout or body_timeout before the verdict
			e := engine.Errorf(engine.KindUpstreamTimeout, "upstream %s before the cache verdict", te.Error())
			e.Cause = err
			return v, e
		}
		e := engine.Errorf(engine.KindBadGateway, "upstream reply could not be read")
		e.Cause = err
		return v, e
	}
	if v == verdictHit {
		orig := resp.Body
		upstream.ReleaseBodyBounds(orig) // a relayed hit has no total bound
		resp.Body = replay{Reader: io.MultiReader(bytes.NewReader(head), orig), Closer: orig}
	}
	return v, nil
}

// probeJSON reads a whole JSON reply of at most probeLimit bytes and checks
// its first choice's finish_reason; a longer one is a hit.
func probeJSON(r io.Reader) ([]byte, verdict, error) {
	head, err := io.ReadAll(io.LimitReader(r, probeLimit+1))
	if err != nil {
		return head, verdictHit, err
	}
	if len(head) > probeLimit || !bytes.Contains(head, []byte(finishCacheThreshold)) {
		return head, verdictHit, nil
	}
	v, _ := judgeChunk(head)
	return head, v, nil
}

// probeStream reads SSE events until one decides: the first event whose
// first choice carries a finish_reason or any output (text, content, token
// ids, tool calls) decides, a miss when that finish_reason is
// cache_threshold. Events without a choice or with an empty delta (chat's
// role event) are read past; [DONE], a non-JSON event, the end of the body
// or probeLimit bytes without a verdict make a hit (the reply is relayed
// as it is).
func probeStream(r io.Reader) ([]byte, verdict, error) {
	buf := make([]byte, 0, 4<<10)
	scanned := 0 // buf[:scanned] holds complete events already judged
	for len(buf) <= probeLimit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		for {
			ev, next := nextEvent(buf, scanned)
			if next < 0 {
				break
			}
			scanned = next
			if v, decided := judgeEvent(ev); decided {
				return buf, v, nil
			}
		}
		if err == io.EOF {
			return buf, verdictHit, nil
		}
		if err != nil {
			return buf, verdictHit, err
		}
	}
	return buf, verdictHit, nil
}

// nextEvent returns the event starting at buf[from:] when it is complete
// (ended by a blank line), and the offset after it; -1 when incomplete.
func nextEvent(buf []byte, from int) ([]byte, int) {
	rest := buf[from:]
	for i := 0; i < len(rest); i++ {
		if rest[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(rest) && rest[i+1] == '\n':
			return rest[:i], from + i + 2
		case i+2 < len(rest) && rest[i+1] == '\r' && rest[i+2] == '\n':
			return rest[:i], from + i + 3
		}
	}
	return nil, -1
}

// judgeEvent joins an event's data lines and judges them.
func judgeEvent(ev []byte) (verdict, bool) {
	var data []byte
	for _, line := range bytes.Split(ev, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		d, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments, event:, id:, retry:
		}
		d = bytes.TrimPrefix(d, []byte(" "))
		if data != nil {
			data = append(data, '\n')
		}
		data = append(data, d...)
	}
	if data == nil {
		return verdictHit, false // a comment or keep-alive: read on
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		return verdictHit, true
	}
	return judgeChunk(data)
}

// probeReply is what judge reads of a reply or stream event.
type probeReply struct {
	Choices []struct {
		FinishReason *string           `json:"finish_reason"`
		Text         string            `json:"text"`
		TokenIDs     []json.RawMessage `json:"token_ids"`
		Message      *json.RawMessage  `json:"message"`
		Delta        *struct {
			Content          string            `json:"content"`
			ReasoningContent string            `json:"reasoning_content"`
			ToolCalls        []json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// judgeChunk judges one JSON document (a whole reply or one event): decided
// when its first choice finished or carries output; a miss when it finished
// with cache_threshold. A document that does not parse decides a hit.
func judgeChunk(b []byte) (verdict, bool) {
	var p probeReply
	if err := json.Unmarshal(b, &p); err != nil {
		return verdictHit, true
	}
	if len(p.Choices) == 0 {
		return verdictHit, false
	}
	c := p.Choices[0]
	if c.FinishReason != nil {
		if *c.FinishReason == finishCacheThreshold {
			return verdictMiss, true
		}
		return verdictHit, true
	}
	d := c.Delta
	out := c.Text != "" || len(c.TokenIDs) > 0 || c.Message != nil ||
		(d != nil && (d.Content != "" || d.ReasoningContent != "" || len(d.ToolCalls) > 0))
	return verdictHit, out
}

func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// replay is a reply body with its start put back.
type replay struct {
	io.Reader
	io.Closer
}

// idleBody re-arms the stall timer after every read that returned data.
type idleBody struct {
	io.ReadCloser
	t *time.Timer
	d time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
	}
	return n, err
}
