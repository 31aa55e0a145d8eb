package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func client(srv string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(srv + "/v1/"), option.WithAPIKey("sim"), option.WithMaxRetries(0),
		option.WithRequestTimeout(20 * time.Second),
	}, opts...)...)
}

// The replies decode with the official openai-go types: chat and
// completions, JSON and SSE, with max/min tokens honoured.
func TestOpenAIChat(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 8})
	c := client(srv.URL)
	ctx := context.Background()
	cases := []struct {
		name       string
		opts       []option.RequestOption
		params     openai.ChatCompletionNewParams
		wantTokens int
		wantFinish string
	}{
		{"natural length", nil, openai.ChatCompletionNewParams{}, 8, "stop"},
		{"max_tokens cuts", nil, openai.ChatCompletionNewParams{MaxTokens: openai.Int(3)}, 3, "length"},
		{"max_completion_tokens wins", nil, openai.ChatCompletionNewParams{MaxTokens: openai.Int(3), MaxCompletionTokens: openai.Int(5)}, 5, "length"},
		{"min_tokens lengthens", []option.RequestOption{option.WithJSONSet("min_tokens", 12)}, openai.ChatCompletionNewParams{}, 12, "stop"},
		{"min 3 max 5", []option.RequestOption{option.WithJSONSet("min_tokens", 3)}, openai.ChatCompletionNewParams{MaxTokens: openai.Int(5)}, 5, "length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.params
			p.Model = "m1"
			p.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me about celflow")}
			res, err := c.Chat.Completions.New(ctx, p, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.ID, "chatcmpl-") || res.Object != "chat.completion" || res.Model != "m1" || res.Created == 0 {
				t.Errorf("envelope: id %q object %q model %q created %d", res.ID, res.Object, res.Model, res.Created)
			}
			if len(res.Choices) != 1 {
				t.Fatalf("choices: %d", len(res.Choices))
			}
			ch := res.Choices[0]
			if ch.Index != 0 || ch.Message.Role != "assistant" || string(ch.FinishReason) != tc.wantFinish {
				t.Errorf("choice: %+v", ch)
			}
			if n := len(strings.Fields(ch.Message.Content)); n != tc.wantTokens {
				t.Errorf("content %q has %d tokens, want %d", ch.Message.Content, n, tc.wantTokens)
			}
			if !strings.Contains(ch.RawJSON(), `"logprobs":null`) {
				t.Errorf("logprobs not null: %s", ch.RawJSON())
			}
			u := res.Usage
			if u.PromptTokens != 5 || u.CompletionTokens != int64(tc.wantTokens) || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage: %+v", u)
			}
		})
	}
}

func TestOpenAIChatStream(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 4})
	c := client(srv.URL)
	for _, usage := range []bool{false, true} {
		p := openai.ChatCompletionNewParams{Model: "m1", MaxTokens: openai.Int(3),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")}}
		if usage {
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		s := c.Chat.Completions.NewStreaming(context.Background(), p)
		var chunks []openai.ChatCompletionChunk
		for s.Next() {
			chunks = append(chunks, s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		// role chunk, 3 content chunks, finish chunk, [usage chunk]
		want := 5
		if usage {
			want = 6
		}
		if len(chunks) != want {
			t.Fatalf("usage=%v: %d chunks, want %d", usage, len(chunks), want)
		}
		if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || d.Content != "" {
			t.Errorf("first chunk is not the role chunk: %+v", d)
		}
		var text string
		for _, ck := range chunks[1:4] {
			if ck.Object != "chat.completion.chunk" || ck.ID != chunks[0].ID || ck.Choices[0].FinishReason != "" {
				t.Errorf("content chunk: %s", ck.RawJSON())
			}
			text += ck.Choices[0].Delta.Content
		}
		if len(strings.Fields(text)) != 3 {
			t.Errorf("streamed text %q", text)
		}
		if fr := chunks[4].Choices[0].FinishReason; fr != "length" {
			t.Errorf("finish chunk: %s", chunks[4].RawJSON())
		}
		if usage {
			last := chunks[5]
			if len(last.Choices) != 0 || last.Usage.CompletionTokens != 3 || last.Usage.PromptTokens != 3 {
				t.Errorf("usage chunk: %s", last.RawJSON())
			}
		} else if strings.Contains(chunks[4].RawJSON(), "usage") {
			t.Errorf("usage without include_usage: %s", chunks[4].RawJSON())
		}
	}
}

func TestOpenAICompletions(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}, OutputTokens: 6})
	c := client(srv.URL)
	ctx := context.Background()
	p := openai.CompletionNewParams{Model: "m2", MaxTokens: openai.Int(2),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")}}
	res, err := c.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ID, "cmpl-") || res.Object != "text_completion" || res.Model != "m2" ||
		len(res.Choices) != 1 || res.Choices[0].FinishReason != "length" || len(strings.Fields(res.Choices[0].Text)) != 2 {
		t.Errorf("completion: %s", res.RawJSON())
	}
	if res.Usage.PromptTokens != 5 || res.Usage.CompletionTokens != 2 {
		t.Errorf("usage: %+v", res.Usage)
	}
	// A token-array prompt is T itself.
	p.Prompt = openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 5, 6}}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Completions.NewStreaming(ctx, p)
	var n int
	var last openai.Completion
	for s.Next() {
		last = s.Current()
		n++
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	// 2 tokens, finish chunk, usage chunk
	if n != 4 || last.Usage.PromptTokens != 3 || last.Usage.CompletionTokens != 2 {
		t.Errorf("%d chunks, last %s", n, last.RawJSON())
	}
}

// vLLM-style 400s decode as openai errors with the message.
func TestOpenAIErrors(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleDecode}})
	c := client(srv.URL)
	cases := []struct {
		name string
		opts []option.RequestOption
		want string
	}{
		{"max_tokens 0", []option.RequestOption{option.WithJSONSet("max_tokens", 0)}, "max_tokens must be at least 1"},
		{"min over max", []option.RequestOption{option.WithJSONSet("max_tokens", 2), option.WithJSONSet("min_tokens", 3)}, "min_tokens must be less than or equal to max_tokens"},
		{"no messages", []option.RequestOption{option.WithJSONDel("messages")}, "messages: field required"},
		{"bad fault header", []option.RequestOption{option.WithHeader(FaultHeader, "explode")}, "unknown action"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}}, tc.opts...)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("want an openai.Error, got %v", err)
			}
			if apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) {
				t.Errorf("status %d message %q, want 400 containing %q", apiErr.StatusCode, apiErr.Message, tc.want)
			}
		})
	}
}
