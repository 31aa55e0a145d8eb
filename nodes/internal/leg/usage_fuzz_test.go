package leg

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// cutReader yields b in reads whose sizes cuts gives in turn (1 to 96
// bytes each, then all of the rest), as a relayed body arrives.
type cutReader struct {
	b    []byte
	cuts []byte
}

func (c *cutReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := len(c.b)
	if len(c.cuts) > 0 {
		n = 1 + int(c.cuts[0])%96
		c.cuts = c.cuts[1:]
	}
	k := copy(p[:min(len(p), n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

func (c *cutReader) Close() error { return nil }

// tapRead relays body through a tap in the reads cuts gives and returns
// what the tap found; the bytes must pass unchanged.
func tapRead(t *testing.T, body, cuts []byte) (int, bool) {
	t.Helper()
	u := &usageTap{rc: &cutReader{b: body, cuts: cuts}}
	out, err := io.ReadAll(u)
	if err != nil || !bytes.Equal(out, body) || !u.done {
		t.Fatalf("the tap changed the body or did not end: %v", err)
	}
	return u.cached, u.found
}

type usageDoc struct {
	Usage *struct {
		Details *struct {
			Cached *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// truthCached is what encoding/json finds: the
// usage.prompt_tokens_details.cached_tokens of the last SSE event (or of
// the JSON body) that has one.
func truthCached(t *testing.T, body []byte, sse bool) (int, bool) {
	docs := [][]byte{body}
	if sse {
		docs = nil
		for _, ev := range strings.Split(string(body), "\n\n") {
			if d, ok := strings.CutPrefix(ev, "data: "); ok && d != "[DONE]" {
				docs = append(docs, []byte(d))
			}
		}
	}
	v, found := 0, false
	for _, d := range docs {
		var doc usageDoc
		if err := json.Unmarshal(d, &doc); err != nil {
			t.Fatalf("the worker's reply is not JSON: %v", err)
		}
		if doc.Usage != nil && doc.Usage.Details != nil && doc.Usage.Details.Cached != nil {
			v, found = *doc.Usage.Details.Cached, true
		}
	}
	return v, found
}

// The members the tap takes, and the look-alikes it does not.
func TestUsageTapMembers(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  int
		found bool
	}{
		{`{"cached_tokens":5}`, 5, true},
		{"{\n        \"cached_tokens\" :  7\n}", 7, true},
		{`{"a":1, "cached_tokens":0}`, 0, true},
		{`{"cached_tokens":5.0}`, 0, false},
		{`{"cached_tokens":5e1}`, 0, false},
		{`{"cached_tokens":-0.0}`, 0, false},
		// A key that ends with the name, escaped quote and all.
		{`{"x\"cached_tokens":5}`, 0, false},
		{`["cached_tokens",5]`, 0, false},
		{`{"cached_tokens"` + strings.Repeat(" ", 9) + `:5}`, 0, false},
		{`{` + strings.Repeat(" ", 25) + `"cached_tokens":5}`, 0, false},
	} {
		for _, cuts := range [][]byte{nil, {0}, {7, 7, 7}} {
			v, found := tapRead(t, []byte(tc.in), cuts)
			if v != tc.want || found != tc.found {
				t.Errorf("%q cut %v: %d %v, want %d %v", tc.in, cuts, v, found, tc.want, tc.found)
			}
		}
	}
}

// FuzzUsageTap holds the cached_tokens tap to what it promises, whatever
// the chunk boundaries:
//
//   - on a vLLM-shaped reply (a stream of chat chunks ending with the usage
//     chunk, or a completion body; written by encoding/json, indented or
//     not, with client- and model-controlled text in the content and as a
//     top_logprobs key), its answer is encoding/json's
//     usage.prompt_tokens_details.cached_tokens of the reply's last usage,
//     and nothing when there is none: no text steers it;
//   - on any bytes, it passes them unchanged, never panics, and finds the
//     same thing however the body is cut as when it comes in one read.
func FuzzUsageTap(f *testing.F) {
	f.Add("hello", "tok", uint32(96), uint8(0), []byte{0, 1, 2, 63, 64, 65})
	f.Add(`he said "cached_tokens": 7`, `x"cached_tokens`, uint32(32), uint8(1), []byte{5, 13, 40})
	f.Add(`"cached_tokens":0`, `cached_tokens`, uint32(0), uint8(2), []byte{17})
	f.Add(`,"cached_tokens":5,`, `{"cached_tokens":5}`, uint32(4294967295), uint8(7), []byte{3, 3, 3})
	// A token named cached_tokens, certain (logprob 0.0), in a completion
	// without usage: not a count.
	f.Add("the", "cached_tokens", uint32(9), uint8(1|4|16), []byte{})
	// A member with more whitespace than the carry holds: found in one
	// read, so it must be found (or not) however the body is cut.
	f.Add(`{"cached_tokens"`+strings.Repeat(" ", 70), ": 5}", uint32(1), uint8(0), []byte{20})
	f.Fuzz(func(t *testing.T, text, key string, cached uint32, mode uint8, cuts []byte) {
		// Any bytes: the same answer however the body is cut.
		raw := []byte(text + key)
		wv, wf := tapRead(t, raw, nil)
		if v, found := tapRead(t, raw, cuts); v != wv || found != wf {
			t.Fatalf("raw %q cut %v: found %v %d, in one read %v %d", raw, cuts, found, v, wf, wv)
		}

		sse := mode&1 == 0
		usage := map[string]any{"prompt_tokens": int(cached) + 3, "completion_tokens": 2}
		switch mode >> 1 & 3 {
		case 0:
			usage["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
		case 1:
			usage["prompt_tokens_details"] = nil
		case 2:
			usage = nil
		case 3:
			usage["prompt_tokens_details"] = map[string]any{"audio_tokens": 0, "cached_tokens": cached}
		}
		indent := !sse && mode&8 != 0
		marshal := func(v any) []byte {
			var b []byte
			var err error
			if indent {
				b, err = json.MarshalIndent(v, "", "    ")
			} else {
				b, err = json.Marshal(v)
			}
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		// vLLM writes a logprob as Python does: a float always has a
		// fraction, 0.0 for a certain token.
		lp := json.RawMessage("-0.5")
		if mode&16 != 0 {
			lp = json.RawMessage("0.0")
		}
		logprobs := map[string]any{"tokens": []string{key}, "top_logprobs": []map[string]json.RawMessage{{key: lp, text: json.RawMessage("-1.25")}}}
		var body []byte
		if sse {
			var b bytes.Buffer
			for _, ev := range []any{
				map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": text}}}, "usage": nil},
				map[string]any{"id": "chatcmpl-1", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": key}, "logprobs": logprobs, "finish_reason": "stop"}}, "usage": nil},
			} {
				b.WriteString("data: ")
				b.Write(marshal(ev))
				b.WriteString("\n\n")
			}
			if usage != nil {
				b.WriteString("data: ")
				b.Write(marshal(map[string]any{"id": "chatcmpl-1", "choices": []any{}, "usage": usage}))
				b.WriteString("\n\n")
			}
			b.WriteString("data: [DONE]\n\n")
			body = b.Bytes()
		} else {
			doc := map[string]any{"id": "cmpl-1", "object": "text_completion", "choices": []any{map[string]any{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}}}
			if usage != nil {
				doc["usage"] = usage
			}
			body = marshal(doc)
		}
		wantV, wantF := truthCached(t, body, sse)
		if v, found := tapRead(t, body, cuts); v != wantV || found != wantF {
			t.Fatalf("body %q cut %v: tap found %v %d, encoding/json %v %d", body, cuts, found, v, wantF, wantV)
		}
	})
}
