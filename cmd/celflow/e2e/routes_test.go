//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// ACCEPTANCE 89, 130, 131, 165/166 (kv-nixl on completions): a string
// prompt is rendered once; prefill and decode stay on /v1/completions with
// prompt = T; prefill is capped and keeps unknown sampling fields; then a
// streaming completion.
func completions(t *testing.T, st *stack) {
	mode := modeName(st.gateway != nil)
	id := "e2e-completions-" + mode
	c := st.client()
	resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: model, MaxTokens: openai.Int(8), Temperature: openai.Float(0.3),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt("completions " + mode))},
	}, reqOpts(id)...)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Object != "text_completion" {
		t.Errorf("unexpected completion: %s", resp.RawJSON())
	}
	legs := st.legs(id)
	roleLegs(t, legs)
	st.assertMiss(t, id, legs)
	commonLeg(check(t, one(t, legs, "render"), "render"), id).path("/v1/completions/render").header("Epp-Profile")
	p := commonLeg(check(t, one(t, legs, "prefill"), "prefill"), id).path("/v1/completions").header("Epp-Profile", "prefill")
	T := p.ints("prompt")
	p.eq("request_id", id).eq("max_tokens", 1).eq("temperature", json.Number("0.3")).eq("stream", false).
		absent("min_tokens", "token_ids").eq("kv_transfer_params.do_remote_decode", true)
	d := commonLeg(check(t, one(t, legs, "decode"), "decode"), id).path("/v1/completions").header("Epp-Profile", "decode").header("Prefer")
	d.eq("prompt", T).eq("max_tokens", 8).eq("kv_transfer_params.do_remote_prefill", true).
		eq("kv_transfer_params.remote_port", json.Number(st.workers["prefill"].port)).absent("ec_transfer_params")

	id = "e2e-completions-stream-" + mode
	s := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model: model, MaxTokens: openai.Int(5),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt("streamed completions " + mode))},
	}, reqOpts(id)...)
	var text strings.Builder
	for n := 0; s.Next() && n < 10000; n++ {
		if ch := s.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
		}
	}
	if err := s.Err(); err != nil || text.Len() == 0 {
		t.Errorf("streamed completion: text %q, err %v", text.String(), err)
	}
	s.Close()
	legs = st.legs(id)
	check(t, one(t, legs, "prefill"), "prefill").eq("stream", false).path("/v1/completions")
	check(t, one(t, legs, "decode"), "decode").eq("stream", true).path("/v1/completions")
}

// ACCEPTANCE 140, 147, 159: a text-only generate request of 20 tokens with
// max_tokens 1, then one with an image: no render call, no encode leg (the
// shipped guard skips encode on generate), prefill and decode complete, the
// transfer params nested in sampling_params.extra_args.
func generate(t *testing.T, st *stack) {
	mode := modeName(st.gateway != nil)
	tokens := []int{1}
	for i := range 19 {
		tokens = append(tokens, 200+i*37+len(mode))
	}
	withImage := append([]int{1, 9000, 9000, 9000, 9000}, tokens[1:12]...)
	cases := []struct {
		name string
		body map[string]any
	}{
		{"text", map[string]any{"model": model, "token_ids": tokens, "sampling_params": map[string]any{"max_tokens": 1, "temperature": 0.2}}},
		{"image", map[string]any{"model": model, "token_ids": withImage, "sampling_params": map[string]any{"max_tokens": 2},
			"features": map[string]any{
				"mm_hashes":       map[string]any{"image": []string{strings.Repeat("ab", 32)}},
				"mm_placeholders": map[string]any{"image": []any{map[string]any{"offset": 1, "length": 4}}},
				"kwargs_data":     map[string]any{"image": []any{nil}},
			}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "e2e-generate-" + c.name + "-" + mode
			status, body := postJSON(t, st.url+"/inference/v1/generate", id, c.body)
			if status != http.StatusOK {
				t.Fatalf("generate: HTTP %d: %s", status, body)
			}
			legs := st.legs(id)
			roleLegs(t, legs)
			st.assertMiss(t, id, legs)
			if n := len(of(legs, "render")) + len(of(legs, "encode")); n != 0 {
				t.Errorf("generate must call neither render nor encode:\n%s", describe(legs))
			}
			sp := c.body["sampling_params"].(map[string]any)
			p := commonLeg(check(t, one(t, legs, "prefill"), "prefill"), id).path("/inference/v1/generate").header("Epp-Profile", "prefill")
			p.eq("request_id", id).eq("token_ids", c.body["token_ids"]).eq("sampling_params.max_tokens", 1).
				eq("sampling_params.extra_args.kv_transfer_params.do_remote_decode", true).
				absent("kv_transfer_params", "ec_transfer_params", "sampling_params.min_tokens", "sampling_params.extra_args.ec_transfer_params")
			d := commonLeg(check(t, one(t, legs, "decode"), "decode"), id).path("/inference/v1/generate").header("Epp-Profile", "decode").header("Prefer")
			d.eq("token_ids", c.body["token_ids"]).eq("sampling_params.max_tokens", sp["max_tokens"]).
				eq("sampling_params.extra_args.kv_transfer_params.do_remote_prefill", true).
				eq("sampling_params.extra_args.kv_transfer_params.remote_port", json.Number(st.workers["prefill"].port)).
				absent("kv_transfer_params", "ec_transfer_params")
			if f, ok := c.body["features"]; ok {
				p.eq("features", f)
				d.eq("features", f)
			}
			if c.name == "text" {
				p.eq("sampling_params.temperature", json.Number("0.2"))
			}
		})
	}
}

// postJSON posts body to url with the suite's client headers and returns the
// status and the reply body.
func postJSON(t *testing.T, url, id string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("Authorization", "Bearer e2e-key")
	req.Header.Set("Cookie", "session=e2e")
	req.Header.Add("X-Custom", "a")
	req.Header.Add("X-Custom", "b")
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if got := resp.Header.Get("X-Request-Id"); got != id {
		t.Errorf("reply x-request-id %q, want %q", got, id)
	}
	return resp.StatusCode, out
}
