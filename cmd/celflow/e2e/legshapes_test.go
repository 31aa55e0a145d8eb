//go:build e2e

package e2e

import (
	"encoding/json"
	"sort"
	"testing"
)

// The per-leg wire contract of PROTOCOL.md, checked on what the simulated
// workers received. A regression in any leg's shape fails here.

// client is what the client sent that the legs must honour.
type client struct {
	model     string
	stream    bool
	maxTokens any // JSON value, nil when the client sent none
	minTokens any
}

// commonLeg: canonical x-request-id exactly once, JSON content type, and
// the client's own headers forwarded (ACCEPTANCE 5, 14, 15).
func commonLeg(s *shape, id string) *shape {
	s.t.Helper()
	return s.header("X-Request-Id", id).header("Content-Type", "application/json").
		header("Authorization", "Bearer e2e-key").header("X-Custom", "a", "b")
}

// renderChatLeg: ACCEPTANCE 85, 87; media already data URIs (fetch-media).
func renderChatLeg(t *testing.T, l leg, id string, c client) {
	t.Helper()
	s := commonLeg(check(t, l, "render"), id).path("/v1/chat/completions/render").header("Epp-Profile").header("Prefer")
	s.eq("model", c.model).present("messages")
	for _, u := range mediaURLs(l.body) {
		if len(u) < 5 || u[:5] != "data:" {
			s.fail("media URL %.40q reached render; fetch-media must have rewritten it to a data URI", u)
		}
	}
}

// condDecodeChatLeg: ACCEPTANCE 106, 113: client path, EPP decode, Prefer,
// tokens, and neither kv params nor uuids.
func condDecodeChatLeg(t *testing.T, l leg, id string, c client) {
	t.Helper()
	s := commonLeg(check(t, l, "conditional decode"), id).path("/v1/chat/completions").
		header("Epp-Profile", "decode").header("Prefer", "if-available")
	s.eq("model", c.model).stream(c.stream).absent("kv_transfer_params", "ec_transfer_params", "tokens.features.kwargs_data")
	s.ints("tokens.token_ids")
	for _, p := range mediaParts(l.body) {
		if _, ok := p["uuid"]; ok {
			s.fail("a media part carries uuid on conditional decode")
		}
	}
}

// encodeChatLeg: ACCEPTANCE 119, 120, 128: only the item's part (its uuid
// the item's hash), BOS + its placeholder run, one hash, single-token cap.
// Returns the item's hash.
func encodeChatLeg(t *testing.T, l leg, id string, c client) string {
	t.Helper()
	s := commonLeg(check(t, l, "encode"), id).path("/v1/chat/completions").header("Epp-Profile", "encode").header("Prefer")
	s.eq("model", c.model).eq("max_tokens", 1).eq("stream", false)
	s.absent("min_tokens", "max_completion_tokens", "stream_options", "token_ids", "features", "tokens.features.kwargs_data",
		"kv_transfer_params", "ec_transfer_params", "messages.1", "messages.0.content.1")
	s.eq("messages.0.content.0.type", "image_url")
	ids := s.ints("tokens.token_ids")
	hashes := s.strs("tokens.features.mm_hashes.image")
	if len(hashes) != 1 {
		s.fail("tokens.features.mm_hashes.image = %q, want one hash", hashes)
		return ""
	}
	s.eq("tokens.features.mm_placeholders.image.0.offset", 1)
	s.eq("tokens.features.mm_placeholders.image.0.length", len(ids)-1)
	s.eq("messages.0.content.0.uuid", hashes[0]) // issue 10: the encoder keys its reply by it
	return hashes[0]
}

// prefillChatLeg: ACCEPTANCE 133, 134, 135, 157, 166: client body capped,
// tokens without kwargs, kv-nixl request params, EC params of exactly the
// encoded hashes (ec-nixl), no request_id.
func prefillChatLeg(t *testing.T, l leg, id string, c client, hashes []string) {
	t.Helper()
	s := commonLeg(check(t, l, "prefill"), id).path("/v1/chat/completions").header("Epp-Profile", "prefill").header("Prefer")
	s.eq("model", c.model).present("messages").eq("max_tokens", 1).eq("stream", false)
	s.absent("min_tokens", "stream_options", "request_id", "token_ids", "tokens.features.kwargs_data")
	s.ints("tokens.token_ids")
	s.eq("kv_transfer_params", obj{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
		"remote_block_ids": nil, "remote_host": nil, "remote_port": nil})
	if len(hashes) == 0 {
		s.absent("ec_transfer_params", "tokens.features")
		return
	}
	ec, _ := get(l.body, "ec_transfer_params")
	if got := keys(ec); js(got) != js(sorted(hashes)) {
		s.fail("ec_transfer_params hashes %q, want %q", got, sorted(hashes))
	}
	if got := s.strs("tokens.features.mm_hashes.image"); js(got) != js(hashes) {
		s.fail("tokens.features.mm_hashes.image %q, want %q", got, hashes)
	}
}

// decodeChatLeg: ACCEPTANCE 144, 150, 155, 157, 180: the client's sampling
// fields untouched, tokens, kv params from prefill with the flags flipped,
// uuid = hash on each image part, never EC params. prefillPort is the port
// of the prefill worker that produced the KV.
func decodeChatLeg(t *testing.T, l leg, id string, c client, hashes []string, prefillPort string) {
	t.Helper()
	s := commonLeg(check(t, l, "decode"), id).path("/v1/chat/completions").header("Epp-Profile", "decode").header("Prefer")
	s.eq("model", c.model).stream(c.stream)
	if c.maxTokens != nil {
		s.eq("max_tokens", c.maxTokens)
	}
	if c.minTokens != nil {
		s.eq("min_tokens", c.minTokens)
	}
	if !c.stream {
		s.absent("stream_options")
	}
	// The shipped workflows' decode failover asks a streamed leg for token
	// ids (cut from the client's reply); a non-streamed reply is made again
	// whole, so its leg asks for none.
	if c.stream {
		s.eq("return_token_ids", true)
	} else {
		s.absent("return_token_ids")
	}
	s.absent("ec_transfer_params", "request_id")
	s.ints("tokens.token_ids")
	s.eq("kv_transfer_params.do_remote_prefill", true).eq("kv_transfer_params.do_remote_decode", false)
	s.present("kv_transfer_params.remote_engine_id", "kv_transfer_params.remote_block_ids", "kv_transfer_params.remote_request_id")
	s.eq("kv_transfer_params.remote_host", "127.0.0.1").eq("kv_transfer_params.remote_port", json.Number(prefillPort))
	parts := mediaParts(l.body)
	if len(parts) != len(hashes) {
		s.fail("%d media parts, want %d", len(parts), len(hashes))
		return
	}
	for i, p := range parts {
		if p["uuid"] != hashes[i] {
			s.fail("media part %d uuid %v, want the item's hash %s", i, p["uuid"], hashes[i])
		}
	}
}

// stream asserts the client's stream flag passed untouched: true when the
// client streamed, else absent (openai-go sends none).
func (s *shape) stream(on bool) *shape {
	s.t.Helper()
	if on {
		return s.eq("stream", true)
	}
	return s.absent("stream")
}

// mediaParts returns the media parts of messages[*].content[*].
func mediaParts(body obj) []obj {
	var out []obj
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		mm, _ := m.(obj)
		parts, _ := mm["content"].([]any)
		for _, p := range parts {
			po, _ := p.(obj)
			switch po["type"] {
			case "image_url", "video_url", "audio_url", "input_audio":
				out = append(out, po)
			}
		}
	}
	return out
}

func mediaURLs(body obj) []string {
	var out []string
	for _, p := range mediaParts(body) {
		if u, ok := get(p, "image_url.url"); ok {
			s, _ := u.(string)
			out = append(out, s)
		}
	}
	return out
}

func keys(v any) []string {
	m, _ := v.(obj)
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
