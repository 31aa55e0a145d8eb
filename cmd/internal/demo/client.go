package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Reply is what the demo client read from celflow.
type Reply struct {
	Status      int
	ContentType string
	Answer      string // the assistant's text: message content, or the streamed deltas joined
	Chunks      int    // SSE data events, [DONE] excluded (0 for JSON)
	Error       string // the OpenAI error message of a non-2xx reply
}

// post sends one chat request with x-request-id id, and the trace context
// of ctx when tracing is on, and reads the whole reply.
func post(ctx context.Context, c *http.Client, url, id string, body []byte) (*Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	injectTrace(ctx, req.Header)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := &Reply{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type")}
	switch {
	case resp.StatusCode/100 != 2:
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) == nil {
			r.Error = e.Error.Message
		}
		return r, nil
	case strings.HasPrefix(r.ContentType, "text/event-stream"):
		return r, readSSE(resp.Body, r)
	default:
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
				Text    string                   `json:"text"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil {
			return r, fmt.Errorf("reading the reply: %w", err)
		}
		if len(out.Choices) > 0 {
			r.Answer = out.Choices[0].Message.Content + out.Choices[0].Text
		}
		return r, nil
	}
}

// readSSE joins the content deltas of an OpenAI chat stream.
func readSSE(body io.Reader, r *Reply) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var answer strings.Builder
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		r.Chunks++
		var ch struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return fmt.Errorf("stream chunk %d: %w", r.Chunks, err)
		}
		if len(ch.Choices) > 0 {
			answer.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	r.Answer = answer.String()
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if !done {
		return fmt.Errorf("stream ended without [DONE] after %d chunks", r.Chunks)
	}
	return nil
}
