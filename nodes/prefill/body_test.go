package prefill

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/celflow/celflow/connectors/kv"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

const chatBody = `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
	`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"},"uuid":"client-1"}]}],` +
	`"seed":12345678901234567890,"temperature":1.0,"x_unknown":{"b":1,"a":2},"max_tokens":64,"min_tokens":3,"max_completion_tokens":100,"n":2,"stream":true,"stream_options":{"include_usage":true}}`

var tokens6 = engine.Tokens{Known: true, FromRender: true, IDs: []int64{1, 9000, 9000, 9000, 17, 18}, JSON: []byte(`[1,9000,9000,9000,17,18]`)}

// media locates the image parts of body in order and gives them features.
func media(body string, kwargs ...string) []engine.MediaItem {
	var out []engine.MediaItem
	b := []byte(body)
	from := 0
	for i := 0; ; i++ {
		j := bytes.Index(b[from:], []byte(`{"type":"image_url"`))
		if j < 0 {
			return out
		}
		start := from + j
		o, err := jsonb.ObjectAt(b, start)
		if err != nil {
			panic(err)
		}
		it := engine.MediaItem{Index: i, Modality: "image", Part: i, PartStart: start, PartEnd: o.End,
			Hash: "h" + string(rune('0'+i)), Offset: 1 + 3*i, Length: 3, HasFeatures: true}
		if i < len(kwargs) {
			it.Kwargs = json.RawMessage(kwargs[i])
		}
		out = append(out, it)
		from = o.End
	}
}

var (
	nixlPrefill = mustKV(kv.NIXL).PrefillParams()
	ssPrefill   = mustKV(kv.SharedStorage).PrefillParams()
	ecOne       = json.RawMessage(`{"h0":{"peer_host":"10.0.0.1","peer_port":5501}}`)
)

func mustKV(name string) kv.Connector {
	c, err := kv.Lookup(name)
	if err != nil {
		panic(err)
	}
	return c
}

func TestBuildBody(t *testing.T) {
	const chatKept = `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"},"uuid":"client-1"}]}],` +
		`"seed":12345678901234567890,"temperature":1.0,"x_unknown":{"b":1,"a":2},`
	const chatTokens = `"tokens":{"token_ids":[1,9000,9000,9000,17,18],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}}`
	for _, tc := range []struct {
		name, want, path string
		in               bodyIn
	}{{
		// ACCEPTANCE 133, 134, 135, 138: client fields byte-exact, cap, tokens, kv + ec at top level.
		name: "chat nixl ec-nixl",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(chatBody), ReqID: "r1", Tokens: tokens6, Media: media(chatBody, `"KW"`), KV: nixlPrefill, EC: ecOne},
		path: "/v1/chat/completions",
		want: chatKept + `"max_tokens":1,"max_completion_tokens":1,"n":1,"stream":false,` + chatTokens +
			`,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}` +
			`,"ec_transfer_params":{"h0":{"peer_host":"10.0.0.1","peer_port":5501}}}`,
	}, {
		// ACCEPTANCE 139, 137, 165: no render ⇒ no tokens; shared storage; no ec.
		name: "chat without render",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(`{"model":"m","messages":[]}`), ReqID: "r1", KV: ssPrefill},
		path: "/v1/chat/completions",
		want: `{"model":"m","messages":[],"max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`,
	}, {
		// ACCEPTANCE 130, 131, 141: prompt = T, request_id = canonical id, client fields kept.
		name: "completions rendered",
		in: bodyIn{Route: engine.RouteCompletions, Body: []byte(`{"model":"m","prompt":"hello there","temperature":0.3,"x_extra":[1,2],"min_tokens":5}`),
			ReqID: "req-7", Tokens: tokens6, KV: ssPrefill},
		path: "/v1/completions",
		want: `{"model":"m","prompt":[1,9000,9000,9000,17,18],"temperature":0.3,"x_extra":[1,2],"max_tokens":1,"stream":false,"request_id":"req-7","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`,
	}, {
		// ACCEPTANCE 132: no render ⇒ the string prompt stays.
		name: "completions without render",
		in:   bodyIn{Route: engine.RouteCompletions, Body: []byte(`{"prompt":"hi","max_tokens":9,"max_output_tokens":4}`), ReqID: "r", KV: ssPrefill},
		path: "/v1/completions",
		want: `{"prompt":"hi","max_tokens":1,"max_output_tokens":1,"stream":false,"request_id":"r","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`,
	}, {
		// ACCEPTANCE 140, 125-style cap inside sampling_params; extra_args created.
		name: "client generate",
		in: bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"model":"m","token_ids":[1,2],"sampling_params":{"temperature":0.2,"max_tokens":50,"min_tokens":3,"n":2},"stream":true}`),
			ReqID: "g1", Tokens: engine.Tokens{Known: true, IDs: []int64{1, 2}, JSON: []byte("[1,2]")}, KV: ssPrefill, EC: ecOne},
		path: "/inference/v1/generate",
		want: `{"model":"m","token_ids":[1,2],"sampling_params":{"temperature":0.2,"max_tokens":1,"n":1,"extra_args":{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false},"ec_transfer_params":{"h0":{"peer_host":"10.0.0.1","peer_port":5501}}}},"stream":false,"request_id":"g1"}`,
	}, {
		name: "client generate, sampling_params null, extra_args kept",
		in:   bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"token_ids":[1],"sampling_params":null}`), ReqID: "g", KV: ssPrefill},
		path: "/inference/v1/generate",
		want: `{"token_ids":[1],"sampling_params":{"max_tokens":1,"extra_args":{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}},"stream":false,"request_id":"g"}`,
	}, {
		name: "client generate, existing extra_args",
		in:   bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"token_ids":[1],"sampling_params":{"extra_args":{"mine":1}}}`), ReqID: "g", KV: ssPrefill},
		path: "/inference/v1/generate",
		want: `{"token_ids":[1],"sampling_params":{"extra_args":{"mine":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}},"max_tokens":1},"stream":false,"request_id":"g"}`,
	}, {
		// ACCEPTANCE 129, 174: tokens-in chat ⇒ a fresh generate body with kwargs.
		name: "chat tokens-in two images",
		in: bodyIn{Route: engine.RouteChat, TokensIn: true, Body: []byte(twoImages), ReqID: "t1",
			Tokens: engine.Tokens{Known: true, IDs: []int64{1, 9, 9, 9, 9, 9, 9, 5}, JSON: []byte(`[1,9,9,9,9,9,9,5]`)},
			Media:  media(twoImages, `"KW0"`, `null`), KV: nixlPrefill,
			EC: json.RawMessage(`{"h0":{"p":1},"h1":{"p":2}}`)},
		path: "/inference/v1/generate",
		want: `{"request_id":"t1","model":"qwen-vl","token_ids":[1,9,9,9,9,9,9,5],"stream":false,` +
			`"features":{"mm_hashes":{"image":["h0","h1"]},"mm_placeholders":{"image":[{"offset":1,"length":3},{"offset":4,"length":3}]},"kwargs_data":{"image":["KW0",null]}},` +
			`"sampling_params":{"max_tokens":1,"extra_args":{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null},"ec_transfer_params":{"h0":{"p":1},"h1":{"p":2}}}}}`,
	}, {
		// ACCEPTANCE 173: ec-shared-storage ⇒ no ec in extra_args.
		name: "chat tokens-in text only",
		in: bodyIn{Route: engine.RouteChat, TokensIn: true, Body: []byte(`{"messages":[],"model":"m","temperature":0.5}`), ReqID: "t2",
			Tokens: engine.Tokens{Known: true, IDs: []int64{1, 2}}, KV: ssPrefill},
		path: "/inference/v1/generate",
		want: `{"request_id":"t2","model":"m","token_ids":[1,2],"stream":false,"sampling_params":{"max_tokens":1,"extra_args":{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}}}`,
	}, {
		// ACCEPTANCE 168: kv-sglang sequential prefill: port + room, no host, no kv_transfer_params.
		name: "chat sglang sequential",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(`{"messages":[]}`), ReqID: "s", Boot: &boot{Port: 8998, Room: 9223372036854775807}},
		path: "/v1/chat/completions",
		want: `{"messages":[],"max_tokens":1,"stream":false,"bootstrap_port":8998,"bootstrap_room":9223372036854775807}`,
	}, {
		name: "completions sglang concurrent",
		in:   bodyIn{Route: engine.RouteCompletions, Body: []byte(`{"prompt":"x"}`), ReqID: "s", Boot: &boot{Host: "10.1.0.7", Port: 9100, Room: 5}},
		path: "/v1/completions",
		want: `{"prompt":"x","max_tokens":1,"stream":false,"request_id":"s","bootstrap_host":"10.1.0.7","bootstrap_port":9100,"bootstrap_room":5}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b, path, e := build(&tc.in)
			if e != nil {
				t.Fatal(e)
			}
			got := b.Bytes()
			if string(got) != tc.want || path != tc.path {
				t.Fatalf("path %s\n got %s\nwant %s", path, got, tc.want)
			}
			if !json.Valid(got) || b.Len() != len(got) {
				t.Fatalf("invalid JSON or length %d != %d", b.Len(), len(got))
			}
		})
	}
}

const twoImages = `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}},` +
	`{"type":"image_url","image_url":{"url":"data:image/png;base64,BB"}}]}],"max_tokens":5}`

func TestBuildBodyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   bodyIn
		kind engine.Kind
	}{
		{"not json", bodyIn{Route: engine.RouteChat, Body: []byte(`{`)}, engine.KindInvalidJSON},
		{"sampling_params array", bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"sampling_params":[1]}`), KV: ssPrefill}, engine.KindInvalidRequest},
		{"extra_args string", bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"sampling_params":{"extra_args":"x"}}`), KV: ssPrefill}, engine.KindInvalidRequest},
		{"tokens-in without T", bodyIn{Route: engine.RouteChat, TokensIn: true, Body: []byte(`{}`)}, engine.KindInternal},
	} {
		if _, _, e := build(&tc.in); e == nil || e.Kind != tc.kind {
			t.Errorf("%s: got %v, want kind %d", tc.name, e, tc.kind)
		}
	}
}

func BenchmarkPrefillBodyChat(b *testing.B) {
	for _, size := range []struct {
		name   string
		prompt int
	}{{"small", 64}, {"200KB", 200 << 10}} {
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + string(bytes.Repeat([]byte("a"), size.prompt)) +
			`"}],"max_tokens":64,"stream":true,"seed":12345678901234567890}`)
		in := &bodyIn{Route: engine.RouteChat, Body: body, ReqID: "r", Tokens: tokens6, KV: nixlPrefill}
		b.Run(size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				out, _, e := build(in)
				if e != nil || out.Len() == 0 {
					b.Fatal(e)
				}
			}
		})
	}
}
