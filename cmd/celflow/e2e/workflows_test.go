//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/celflow/celflow/cmd/internal/demo"
)

// TestTokensIn runs epd-tokens-in.yaml through the gateway. ACCEPTANCE 55,
// 114, 125, 129, 149, 156: encode and prefill use /inference/v1/generate
// (kwargs in, transfer params under sampling_params.extra_args), decode and
// conditional decode keep the client's path and body shape.
func TestTokensIn(t *testing.T) {
	t.Parallel()
	st := startStack(t, stackOpts{gateway: true, workflow: "epd-tokens-in.yaml"})
	c := st.client()

	// ACCEPTANCE 156: the request of item 155 (an inline PNG, min_tokens 3,
	// max_tokens 5) with tokens-in on: encode and prefill use
	// /inference/v1/generate, the reply is 200, and the client's min/max
	// tokens reach decode alone.
	t.Run("chat with an inline PNG", func(t *testing.T) {
		id := "e2e-tokens-in-chat"
		png := demo.SamplePNG(demo.SampleWidth, demo.SampleHeight)
		var hr *http.Response
		resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(5),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart(prompt("tokens-in chat")),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)}),
			})}}, reqOpts(id, option.WithJSONSet("min_tokens", 3), option.WithResponseInto(&hr))...)
		if err != nil {
			t.Fatal(err)
		}
		if hr.StatusCode != http.StatusOK {
			t.Errorf("reply status %d, want 200", hr.StatusCode)
		}
		if resp.Choices[0].Message.Content == "" {
			t.Errorf("empty answer: %s", resp.RawJSON())
		}
		if u := resp.Usage.CompletionTokens; u < 3 || u > 5 {
			t.Errorf("completion tokens %d, want 3..5 (min_tokens 3, max_tokens 5)", u)
		}
		legs := st.legs(id)
		roleLegs(t, legs)
		st.assertMiss(t, id, legs)
		e := commonLeg(check(t, one(t, legs, "encode"), "encode"), id).path("/inference/v1/generate").header("Epp-Profile", "encode")
		e.eq("model", model).eq("stream", false).eq("sampling_params.max_tokens", 1).ints("token_ids")
		e.present("features.kwargs_data.image.0").absent("request_id", "sampling_params.min_tokens", "min_tokens", "max_tokens", "messages", "tokens")
		hashes := e.strs("features.mm_hashes.image")
		if len(hashes) != 1 {
			t.Fatalf("encode hashes %q, want one", hashes)
		}
		p := commonLeg(check(t, one(t, legs, "prefill"), "prefill"), id).path("/inference/v1/generate").header("Epp-Profile", "prefill")
		p.eq("request_id", id).eq("model", model).eq("stream", false).ints("token_ids")
		p.eq("features.mm_hashes.image", hashes).present("features.kwargs_data.image.0", "features.mm_placeholders.image.0")
		p.eq("sampling_params.max_tokens", 1).eq("sampling_params.extra_args.kv_transfer_params.do_remote_decode", true)
		p.present("sampling_params.extra_args.ec_transfer_params." + hashes[0])
		p.absent("kv_transfer_params", "ec_transfer_params", "messages", "sampling_params.min_tokens", "min_tokens", "max_tokens")
		d := commonLeg(check(t, one(t, legs, "decode"), "decode"), id).path("/v1/chat/completions").header("Epp-Profile", "decode")
		d.eq("max_tokens", 5).eq("min_tokens", 3).eq("kv_transfer_params.do_remote_prefill", true).ints("tokens.token_ids")
		d.absent("sampling_params", "ec_transfer_params", "token_ids")
		if parts := mediaParts(d.leg.body); len(parts) != 1 || parts[0]["uuid"] != hashes[0] {
			d.fail("the image part must carry uuid %s", hashes[0])
		}
	})

	t.Run("completions stay on /v1/completions", func(t *testing.T) {
		params := openai.CompletionNewParams{Model: model, MaxTokens: openai.Int(4),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt("tokens-in completions"))}}
		for _, id := range []string{"e2e-tokens-in-completions-miss", "e2e-tokens-in-completions-hit"} {
			if _, err := c.Completions.New(context.Background(), params, reqOpts(id)...); err != nil {
				t.Fatal(err)
			}
			for _, l := range st.legs(id) {
				if l.Worker != "render" && l.Path != "/v1/completions" {
					t.Errorf("%s leg on %s, want /v1/completions", l.Worker, l.Path)
				}
			}
			for _, r := range st.records(st.gateway, id) {
				if r.Path != "/v1/completions" {
					t.Errorf("gateway saw %s (%s), want /v1/completions", r.Path, r.Headers.Get("Epp-Profile"))
				}
			}
		}
		hit := st.legs("e2e-tokens-in-completions-hit")
		if d := one(t, hit, "decode"); d.Headers.Get("Prefer") != "if-available" || d.Status != http.StatusOK {
			t.Errorf("the repeat must be a conditional-decode hit:\n%s", describe(hit))
		}
	})
}

// TestPD runs pd.yaml with direct pools and one worker per role: render and
// encode receive nothing, every leg lands on its role (ACCEPTANCE 57, 165,
// 166 on real processes).
func TestPD(t *testing.T) {
	t.Parallel()
	st := startStack(t, stackOpts{workflow: "pd.yaml"})
	id := "e2e-pd"
	cl := client{model: model, maxTokens: 6}
	_, err := st.client().Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(6),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("pd"))}}, reqOpts(id)...)
	if err != nil {
		t.Fatal(err)
	}
	legs := st.legs(id)
	roleLegs(t, legs)
	if n := len(of(legs, "render")) + len(of(legs, "encode")); n != 0 || len(legs) != 2 {
		t.Fatalf("pd.yaml has no render or encode node; legs:\n%s", describe(legs))
	}
	p := commonLeg(check(t, one(t, legs, "prefill"), "prefill"), id).path("/v1/chat/completions").header("Epp-Profile", "prefill")
	p.eq("max_tokens", 1).eq("stream", false).absent("tokens", "ec_transfer_params", "request_id")
	p.eq("kv_transfer_params", obj{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil})
	d := commonLeg(check(t, one(t, legs, "decode"), "decode"), id).path("/v1/chat/completions").header("Epp-Profile", "decode").header("Prefer")
	d.eq("max_tokens", cl.maxTokens).absent("tokens", "ec_transfer_params").eq("kv_transfer_params.do_remote_prefill", true).
		eq("kv_transfer_params.remote_port", json.Number(st.workers["prefill"].port))
}

// TestSGLangConcurrent runs sglang-concurrent.yaml with a direct prefill
// pool: prefill and decode are sent together with the same bootstrap
// fields, the picked prefill worker's host and port, and no kv params
// (ACCEPTANCE 168, 169, 171).
func TestSGLangConcurrent(t *testing.T) {
	t.Parallel()
	st := startStack(t, stackOpts{workflow: "sglang-concurrent.yaml"})
	id := "e2e-sglang"
	text, usage, finish := readStream(t, st.client(), openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(5),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt("sglang"))},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}, reqOpts(id)...)
	if text == "" || usage != 5 || finish == "" {
		t.Errorf("stream: text %q, usage %d, finish %q", text, usage, finish)
	}
	legs := st.legs(id)
	roleLegs(t, legs)
	p := commonLeg(check(t, one(t, legs, "prefill"), "prefill"), id).header("Epp-Profile", "prefill")
	d := commonLeg(check(t, one(t, legs, "decode"), "decode"), id).header("Epp-Profile", "decode")
	for _, s := range []*shape{p, d} {
		s.eq("bootstrap_host", "127.0.0.1").eq("bootstrap_port", json.Number(st.workers["prefill"].port)).
			absent("kv_transfer_params").path("/v1/chat/completions")
	}
	p.eq("stream", false).eq("max_tokens", 1)
	d.eq("stream", true).eq("max_tokens", 5)
	pr, _ := get(p.leg.body, "bootstrap_room")
	dr, _ := get(d.leg.body, "bootstrap_room")
	if n, ok := pr.(json.Number); !ok || js(pr) != js(dr) {
		t.Errorf("bootstrap_room: prefill %s, decode %s; want the same JSON integer", js(pr), js(dr))
	} else if v, err := n.Int64(); err != nil || v < 0 {
		t.Errorf("bootstrap_room %s is not an integer in [0, 2^63-1]", n)
	}
	if p.leg.Status != http.StatusOK || d.leg.Status != http.StatusOK {
		t.Errorf("prefill %d, decode %d; want both 200", p.leg.Status, d.leg.Status)
	}
}

// TestPDAggregated runs pd-aggregated.yaml: a prefill that keeps failing
// (2 attempts) is routed by its edge to the aggregated decode, which gets no
// kv_transfer_params (FIELD-NOTES 4, PROTOCOL 8); a healthy request never
// takes it.
func TestPDAggregated(t *testing.T) {
	t.Parallel()
	st := startStack(t, stackOpts{workflow: "pd-aggregated.yaml"})
	for _, c := range []struct {
		id, fault  string
		prefills   int
		aggregated bool
	}{
		{"e2e-aggregated-healthy", "", 1, false},
		{"e2e-aggregated-fallback", "prefill:status=503", 2, true},
	} {
		t.Run(c.id, func(t *testing.T) {
			opts := reqOpts(c.id)
			if c.fault != "" {
				opts = reqOpts(c.id, option.WithHeader("X-Sim-Fault", c.fault))
			}
			resp, err := st.client().Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: model,
				MaxTokens: openai.Int(4), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt(c.id))}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Choices[0].Message.Content == "" {
				t.Errorf("empty answer: %s", resp.RawJSON())
			}
			legs := st.legs(c.id)
			roleLegs(t, legs)
			if n := len(of(legs, "prefill")); n != c.prefills {
				t.Errorf("%d prefill legs, want %d:\n%s", n, c.prefills, describe(legs))
			}
			d := check(t, one(t, legs, "decode"), "decode").path("/v1/chat/completions").header("Epp-Profile", "decode")
			if c.aggregated {
				d.absent("kv_transfer_params", "bootstrap_room")
			} else {
				d.eq("kv_transfer_params.do_remote_prefill", true)
			}
		})
	}
}
