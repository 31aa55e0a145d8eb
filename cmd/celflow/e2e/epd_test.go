//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/celflow/celflow/cmd/internal/demo"
)

const model = "e2e-model"

// A prompt long enough to fill several prefix blocks (16 tokens each), so
// that a repeat can hit the prefix caches. The tag comes first: prompts
// sharing their first blocks share a cached prefix, and only a repeat may.
func prompt(tag string) string {
	return tag + ": describe, for the end-to-end suite, how a coordinator splits one request into " +
		"render, encode, prefill and decode legs and hands the KV cache between workers."
}

// reqOpts are the client headers every request carries: a known request id
// and headers that must reach every leg (ACCEPTANCE 5, 14).
func reqOpts(id string, more ...option.RequestOption) []option.RequestOption {
	if idSafe(id) != id {
		panic("e2e: invalid client request id " + id) // celflow would replace it and the records would not match
	}
	return append([]option.RequestOption{
		option.WithHeader("X-Request-Id", id), option.WithHeaderAdd("X-Custom", "a"),
		option.WithHeaderAdd("X-Custom", "b"), option.WithHeader("Cookie", "session=e2e"),
	}, more...)
}

func modeName(gateway bool) string {
	if gateway {
		return "gateway"
	}
	return "direct"
}

// roleLegs asserts that every worker leg landed on a worker of its role
// (ACCEPTANCE 57) and that Cookie reached it (14).
func roleLegs(t *testing.T, legs []leg) {
	t.Helper()
	for _, l := range legs {
		if l.Worker != "render" && (l.Headers.Get("Epp-Profile") != l.Worker || string(l.Role) != l.Worker) {
			t.Errorf("leg %s %s with EPP-Profile %q landed on the %s worker (role %q)", l.Method, l.Path, l.Headers.Get("Epp-Profile"), l.Worker, l.Role)
		}
		if l.Headers.Get("Cookie") != "session=e2e" {
			t.Errorf("%s leg lost the client's Cookie", l.Worker)
		}
	}
}

// assertMiss checks how a conditional-decode miss came about: in direct
// mode celflow's picker predicts it and makes no decode call (ACCEPTANCE
// 57); through the gateway the gateway answers 412 itself.
func (st *stack) assertMiss(t *testing.T, id string, legs []leg) {
	t.Helper()
	for _, l := range legs {
		if l.Headers.Get("Prefer") != "" {
			t.Errorf("a worker received a conditional-decode leg on a miss:\n%s", describe(legs))
		}
	}
	if st.gateway == nil {
		return
	}
	n := 0
	for _, r := range st.records(st.gateway, id) {
		if r.Headers.Get("Prefer") == "if-available" {
			n++
			if r.Status != http.StatusPreconditionFailed || r.Upstream != "" {
				t.Errorf("gateway: conditional decode got %d via %q, want its own 412", r.Status, r.Upstream)
			}
		}
	}
	if n != 1 {
		t.Errorf("gateway saw %d conditional-decode legs, want 1", n)
	}
}

// TestEPD runs the shipped E/P/D workflow end to end in direct and gateway
// mode. ACCEPTANCE 5, 14, 36, 37, 53, 54, 56, 57, 144, 155, 157, 158, 180.
func TestEPD(t *testing.T) {
	for _, gw := range []bool{false, true} {
		t.Run(modeName(gw), func(t *testing.T) {
			t.Parallel()
			st := startStack(t, stackOpts{gateway: gw})
			t.Run("text miss then hit", func(t *testing.T) { textMissThenHit(t, st) })
			t.Run("inline image with min and max tokens", func(t *testing.T) { inlineImage(t, st) })
			t.Run("remote and inline images", func(t *testing.T) { remoteImages(t, st) })
			t.Run("streaming chat, then a streamed hit", func(t *testing.T) { streamingChat(t, st) })
			t.Run("completions", func(t *testing.T) { completions(t, st) })
			t.Run("generate", func(t *testing.T) { generate(t, st) })
		})
	}
}

// ACCEPTANCE 5, 36, 37, 53, 157: a text chat misses (412 path: render,
// prefill, decode; encode skipped with no items), then the same prompt is
// answered by conditional decode alone.
func textMissThenHit(t *testing.T, st *stack) {
	ctx := context.Background()
	c := st.client()
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(8),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("text " + modeName(st.gateway != nil)))}}
	cl := client{model: model, maxTokens: 8}

	id := "e2e-text-miss-" + modeName(st.gateway != nil)
	var hr *http.Response
	first, err := c.Chat.Completions.New(ctx, params, reqOpts(id, option.WithResponseInto(&hr))...)
	if err != nil {
		t.Fatal(err)
	}
	if got := hr.Header.Get("X-Request-Id"); got != id {
		t.Errorf("reply x-request-id %q, want %q", got, id)
	}
	if len(first.Choices) != 1 || first.Choices[0].Message.Content == "" || first.Usage.CompletionTokens < 1 || first.Usage.CompletionTokens > 8 {
		t.Errorf("unexpected reply: %s", first.RawJSON())
	}
	legs := st.legs(id)
	roleLegs(t, legs)
	st.assertMiss(t, id, legs)
	if n := len(of(legs, "encode")); n != 0 {
		t.Errorf("text-only chat: %d encode legs, want none", n)
	}
	renderChatLeg(t, one(t, legs, "render"), id, cl)
	prefillChatLeg(t, one(t, legs, "prefill"), id, cl, nil)
	decodeChatLeg(t, one(t, legs, "decode"), id, cl, nil, st.workers["prefill"].port)

	id = "e2e-text-hit-" + modeName(st.gateway != nil)
	second, err := c.Chat.Completions.New(ctx, params, reqOpts(id)...)
	if err != nil {
		t.Fatal(err)
	}
	if second.Choices[0].Message.Content != first.Choices[0].Message.Content {
		t.Errorf("the hit answered %q, the first request %q (the simulator is deterministic per prompt)",
			second.Choices[0].Message.Content, first.Choices[0].Message.Content)
	}
	legs = st.legs(id)
	roleLegs(t, legs)
	if n := len(of(legs, "prefill")) + len(of(legs, "encode")); n != 0 {
		t.Errorf("a conditional-decode hit must end the run; got:\n%s", describe(legs))
	}
	d := one(t, legs, "decode")
	condDecodeChatLeg(t, d, id, cl)
	if d.Status != http.StatusOK || d.Cache != "hit" {
		t.Errorf("conditional decode: status %d, cache %q; want 200 and a prefix-cache hit", d.Status, d.Cache)
	}
}

// ACCEPTANCE 54, 144, 155: an inline PNG with min_tokens 3 and max_tokens 5:
// every node runs, one encode leg, prefill carries the EC params, decode the
// client's min/max tokens, encode and prefill max_tokens 1 and no min_tokens.
func inlineImage(t *testing.T, st *stack) {
	id := "e2e-inline-" + modeName(st.gateway != nil)
	png := demo.SamplePNG(demo.SampleWidth, demo.SampleHeight)
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(5),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart(prompt("inline image")),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)}),
		})}}
	resp, err := st.client().Chat.Completions.New(context.Background(), params, reqOpts(id, option.WithJSONSet("min_tokens", 3))...)
	if err != nil {
		t.Fatal(err)
	}
	if u := resp.Usage.CompletionTokens; u < 3 || u > 5 {
		t.Errorf("completion tokens %d, want 3..5 (min_tokens 3, max_tokens 5)", u)
	}
	cl := client{model: model, maxTokens: 5, minTokens: 3}
	legs := st.legs(id)
	roleLegs(t, legs)
	st.assertMiss(t, id, legs)
	renderChatLeg(t, one(t, legs, "render"), id, cl)
	hash := encodeChatLeg(t, one(t, legs, "encode"), id, cl)
	prefillChatLeg(t, one(t, legs, "prefill"), id, cl, []string{hash})
	decodeChatLeg(t, one(t, legs, "decode"), id, cl, []string{hash}, st.workers["prefill"].port)
	// Order of the legs: render, encode, prefill, decode (ACCEPTANCE 36).
	var order []string
	for _, l := range legs {
		order = append(order, l.Worker)
	}
	if got := strings.Join(order, ","); got != "render,encode,prefill,decode" {
		t.Errorf("legs in order %s, want render,encode,prefill,decode", got)
	}
}

// ACCEPTANCE 158: one remote image, two remote images, one inline, and one
// inline plus one remote (a local media server, allow_loopback): each is
// 200 with one encode leg per item.
func remoteImages(t *testing.T, st *stack) {
	inline := "data:image/png;base64," + base64.StdEncoding.EncodeToString(demo.SamplePNG(20, 20))
	remote := func(w, h int) string { return fmt.Sprintf("%s/gradient/%dx%d.png", st.media.URL, w, h) }
	cases := []struct {
		name string
		urls []string
	}{
		{"one remote", []string{remote(30, 30)}},
		{"two remote", []string{remote(31, 30), remote(32, 30)}},
		{"one inline", []string{inline}},
		{"inline and remote", []string{inline, remote(33, 30)}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("e2e-images-%d-%s", i, modeName(st.gateway != nil))
			parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(prompt(c.name))}
			for _, u := range c.urls {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: u}))
			}
			_, err := st.client().Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: model,
				MaxTokens: openai.Int(4), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(parts)}}, reqOpts(id)...)
			if err != nil {
				t.Fatal(err)
			}
			legs := st.legs(id)
			roleLegs(t, legs)
			cl := client{model: model, maxTokens: 4}
			renderChatLeg(t, one(t, legs, "render"), id, cl)
			enc := of(legs, "encode")
			if len(enc) != len(c.urls) {
				t.Fatalf("%d encode legs for %d items:\n%s", len(enc), len(c.urls), describe(legs))
			}
			var hashes []string
			for _, e := range enc {
				hashes = append(hashes, encodeChatLeg(t, e, id, cl))
			}
			// Encode legs run in parallel: their arrival order is not the
			// item order, so compare as sets.
			p := one(t, legs, "prefill")
			item := check(t, p, "prefill").strs("tokens.features.mm_hashes.image")
			if js(sorted(item)) != js(sorted(hashes)) {
				t.Errorf("prefill hashes %q, encode hashes %q", item, hashes)
			}
			prefillChatLeg(t, p, id, cl, item)
			decodeChatLeg(t, one(t, legs, "decode"), id, cl, item, st.workers["prefill"].port)
		})
	}
}

// ACCEPTANCE 107, 176, 180: a streaming chat through E/P/D: prefill has
// stream:false and no stream_options, decode keeps both, the client reads
// an OpenAI stream (role, content, finish, usage); the same prompt again is
// a streamed conditional-decode hit.
func streamingChat(t *testing.T, st *stack) {
	params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(6),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("stream " + modeName(st.gateway != nil)))},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	for i, want := range []string{"miss", "hit"} {
		id := fmt.Sprintf("e2e-stream-%s-%s", want, modeName(st.gateway != nil))
		text, usage, finish := readStream(t, st.client(), params, reqOpts(id)...)
		if text == "" || usage < 1 || usage > 6 || finish == "" {
			t.Errorf("%s: stream gave text %q, usage %d, finish %q", want, text, usage, finish)
		}
		legs := st.legs(id)
		roleLegs(t, legs)
		cl := client{model: model, stream: true, maxTokens: 6}
		if i == 0 {
			st.assertMiss(t, id, legs)
			prefillChatLeg(t, one(t, legs, "prefill"), id, cl, nil)
			d := one(t, legs, "decode")
			decodeChatLeg(t, d, id, cl, nil, st.workers["prefill"].port)
			check(t, d, "decode").eq("stream_options", obj{"include_usage": true})
			continue
		}
		d := one(t, legs, "decode")
		condDecodeChatLeg(t, d, id, cl)
		if len(legs) != 2 || d.Status != http.StatusOK {
			t.Errorf("streamed hit: want render and one 200 conditional decode, got:\n%s", describe(legs))
		}
	}
}

// readStream reads a chat stream to its end and returns the content, the
// usage chunk's completion tokens and the finish reason.
func readStream(t *testing.T, c *openai.Client, p openai.ChatCompletionNewParams, opts ...option.RequestOption) (string, int64, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.Chat.Completions.NewStreaming(ctx, p, opts...)
	defer s.Close()
	var text strings.Builder
	var usage int64
	var finish, id string
	n := 0
	for s.Next() {
		ch := s.Current()
		if n++; n > 10000 {
			t.Fatal("more than 10000 chunks")
		}
		if id == "" {
			id = ch.ID
		} else if ch.ID != id {
			t.Errorf("chunk id %q, first was %q", ch.ID, id)
		}
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
			if ch.Choices[0].FinishReason != "" {
				finish = ch.Choices[0].FinishReason
			}
		}
		if ch.Usage.CompletionTokens > 0 {
			usage = ch.Usage.CompletionTokens
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return text.String(), usage, finish
}
