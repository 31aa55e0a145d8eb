package decode

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/handoff"
)

var tokens6 = engine.Tokens{Known: true, FromRender: true, IDs: []int64{1, 9000, 9000, 9000, 17, 18}, JSON: []byte(`[1,9000,9000,9000,17,18]`)}

// media locates the image parts of body in order and gives them hashes.
func media(body string) []engine.MediaItem {
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
		out = append(out, engine.MediaItem{Index: i, Modality: "image", Part: i, PartStart: start, PartEnd: o.End,
			Hash: "h" + string(rune('0'+i)), Offset: 1 + 3*i, Length: 3, HasFeatures: true, Kwargs: json.RawMessage(`"KW"`)})
		from = o.End
	}
}

const (
	nixlDecode = `{"do_remote_decode":false,"do_remote_prefill":true,"remote_engine_id":"e-1","remote_block_ids":[[1,2]],"remote_request_id":"rr-1","remote_host":"10.0.0.42","remote_port":5600,"tp_size":1}`
	chatOne    = `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}],"max_tokens":64,"min_tokens":3,"stream":true,"stream_options":{"include_usage":true},"seed":12345678901234567890,"temperature":1.0}`
	chatTwo = `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://a/1.png"},"uuid":"client-a"},` +
		`{"type":"image_url","uuid":"client-b","image_url":{"url":"http://a/2.png"}}]}]}`
)

func TestBuildBody(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		in         bodyIn
	}{{
		// ACCEPTANCE 144, 154, PROTOCOL 8 example: uuid added, URL untouched,
		// tokens, kv at top level; client sampling fields and number spellings kept.
		name: "chat after nixl prefill",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(chatOne), Tokens: tokens6, Media: media(chatOne), KV: json.RawMessage(nixlDecode)},
		want: `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"},"uuid":"h0"}]}],"max_tokens":64,"min_tokens":3,"stream":true,"stream_options":{"include_usage":true},"seed":12345678901234567890,"temperature":1.0,` +
			`"tokens":{"token_ids":[1,9000,9000,9000,17,18],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}},` +
			`"kv_transfer_params":` + nixlDecode + `}`,
	}, {
		// ACCEPTANCE 145: client uuids replaced in order, wherever they sit in the part.
		name: "chat two client uuids",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(chatTwo), Media: media(chatTwo)},
		want: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://a/1.png"},"uuid":"h0"},` +
			`{"type":"image_url","uuid":"h1","image_url":{"url":"http://a/2.png"}}]}]}`,
	}, {
		// ACCEPTANCE 148: no prefill, T unknown ⇒ the client body as is.
		name: "decode only",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)},
		want: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	}, {
		name: "completions rendered",
		in:   bodyIn{Route: engine.RouteCompletions, Body: []byte(`{"prompt":"hello","max_tokens":7}`), Tokens: tokens6, KV: json.RawMessage(`{"do_remote_decode":false,"do_remote_prefill":true}`)},
		want: `{"prompt":[1,9000,9000,9000,17,18],"max_tokens":7,"kv_transfer_params":{"do_remote_decode":false,"do_remote_prefill":true}}`,
	}, {
		// ACCEPTANCE 146: no render ⇒ the string prompt; a client token array stays as sent.
		name: "completions token prompt",
		in:   bodyIn{Route: engine.RouteCompletions, Body: []byte(`{"prompt":[1, 2]}`), Tokens: engine.Tokens{Known: true, IDs: []int64{1, 2}, JSON: []byte(`[1, 2]`)}},
		want: `{"prompt":[1, 2]}`,
	}, {
		// ACCEPTANCE 147: kv nested in sampling_params.extra_args, max_tokens kept, nothing at top level.
		name: "generate",
		in:   bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"token_ids":[1,2],"sampling_params":{"max_tokens":50,"extra_args":null},"features":null}`), KV: json.RawMessage(`{"k":1}`)},
		want: `{"token_ids":[1,2],"sampling_params":{"max_tokens":50,"extra_args":{"kv_transfer_params":{"k":1}}},"features":null}`,
	}, {
		name: "generate without sampling_params",
		in:   bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"token_ids":[1]}`), KV: json.RawMessage(`{"k":1}`)},
		want: `{"token_ids":[1],"sampling_params":{"extra_args":{"kv_transfer_params":{"k":1}}}}`,
	}, {
		name: "generate no prefill",
		in:   bodyIn{Route: engine.RouteGenerate, Body: []byte(`{"token_ids":[1]}`)},
		want: `{"token_ids":[1]}`,
	}, {
		// ACCEPTANCE 168: all three bootstrap fields, no kv_transfer_params.
		name: "chat sglang",
		in:   bodyIn{Route: engine.RouteChat, Body: []byte(`{"messages":[]}`), Boot: &handoff.Bootstrap{Host: "10.1.0.7", Port: 8998, Room: 5729301466131981311}},
		want: `{"messages":[],"bootstrap_host":"10.1.0.7","bootstrap_port":8998,"bootstrap_room":5729301466131981311}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b, e := build(&tc.in)
			if e != nil {
				t.Fatal(e)
			}
			got := b.Bytes()
			if string(got) != tc.want {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
			if !json.Valid(got) || b.Len() != len(got) {
				t.Fatal("invalid JSON or wrong length")
			}
			if bytes.Contains(got, []byte("ec_transfer_params")) { // ACCEPTANCE 150
				t.Fatal("ec_transfer_params on decode")
			}
		})
	}
}

func TestBuildBodyBadOffsets(t *testing.T) {
	m := media(chatOne)
	m[0].PartStart++
	if _, e := build(&bodyIn{Route: engine.RouteChat, Body: []byte(chatOne), Media: m}); e == nil || e.Kind != engine.KindInternal {
		t.Fatalf("got %v", e)
	}
}

func BenchmarkDecodeBodyChat(b *testing.B) {
	for _, size := range []struct {
		name   string
		prompt int
	}{{"small", 64}, {"200KB", 200 << 10}} {
		body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + string(bytes.Repeat([]byte("a"), size.prompt)) +
			`"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}],"max_tokens":64,"stream":true}`
		in := &bodyIn{Route: engine.RouteChat, Body: []byte(body), Tokens: tokens6, Media: media(body), KV: json.RawMessage(nixlDecode)}
		b.Run(size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				out, e := build(in)
				if e != nil || out.Len() == 0 {
					b.Fatal(e)
				}
			}
		})
	}
}
