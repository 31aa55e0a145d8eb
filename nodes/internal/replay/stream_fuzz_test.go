package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// cutReader yields b in reads whose sizes cuts gives in turn (1 to 64
// bytes each, then all of the rest), as a worker's stream arrives.
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
		n = 1 + int(c.cuts[0])%64
		c.cuts = c.cuts[1:]
	}
	k := copy(p[:min(len(p), n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// clientEvents parses what the client got as a browser's EventSource
// does (lines end in CRLF, LF or CR; a blank line ends an event; the data
// lines of one event join with LF) and returns each event's data.
func clientEvents(body []byte) [][]byte {
	var out [][]byte
	var data []byte
	has := false
	s := string(body)
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			break // an unterminated line is no event
		}
		line := s[:i]
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
		}
		s = s[i+1:]
		if line == "" {
			if has {
				out = append(out, data)
			}
			data, has = nil, false
			continue
		}
		name, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		if name == "data" {
			if has {
				data = append(data, '\n')
			}
			data = append(data, v...)
			has = true
		}
	}
	return out
}

// relay pumps the legs' streams through one Stream as the decode node
// does (the first leg, then a continuation for each later one while the
// reply is not done), then finishes it, and returns the stream and what
// the client got.
func relay(t *testing.T, route engine.Route, clientIDs, usage bool, cuts []byte, legs ...[]byte) (*Stream, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	s := NewStream(rec, route, clientIDs, usage)
	s.Start(&http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}}, "req-1")
	for i, leg := range legs {
		if i > 0 {
			s.Continue()
		}
		err := s.Pump(&cutReader{b: leg, cuts: cuts})
		var brk *Break
		if err == nil {
			break
		}
		if !errors.As(err, &brk) {
			t.Fatalf("pump: %v", err)
		}
	}
	switch {
	case s.Done:
	case s.Finished:
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	case s.template != nil:
		if err := s.FinishLength(); err != nil {
			t.Fatal(err)
		}
	}
	return s, rec.Body.Bytes()
}

// checkClient: every data event the client got is [DONE] or one JSON
// object, and [DONE] comes last, at most once.
func checkClient(t *testing.T, out []byte) [][]byte {
	t.Helper()
	evs := clientEvents(out)
	for i, d := range evs {
		if string(d) == "[DONE]" {
			if i != len(evs)-1 {
				t.Fatalf("[DONE] is event %d of %d:\n%s", i, len(evs), out)
			}
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(d, &m); err != nil {
			t.Fatalf("the client got an event that is not a JSON object (%v): %q\nall: %q", err, d, out)
		}
	}
	return evs
}

// FuzzStreamAny: whatever two legs of a worker send, however the bytes
// are cut, the relay never panics and the client gets only JSON objects
// and a last [DONE] as data events.
func FuzzStreamAny(f *testing.F) {
	f.Add(uint8(0), []byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"prompt_token_ids\":[1],\"token_ids\":[5]}]}\n\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"b\",\"token_ids\":[6]}]}\n\n"),
		[]byte("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"c\",\"token_ids\":[7],\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), []byte{3, 9, 60})
	f.Add(uint8(1), []byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"prompt_token_ids\":[1,2]}\r\n\r\n: keep-alive\n\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"token_ids\":[4]}]}\n\n"),
		[]byte("data: {\"choices\":[{\"index\":0,\"text\":\"y\",\"token_ids\":[8]}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":9}}}\n\ndata: [DONE]\n\n"), []byte{})
	f.Add(uint8(2), []byte("data: {\"request_id\":\"g\",\n"+"data: \"choices\":[{\"index\":0,\"token_ids\":[5]}]}\n\ndata:{\"error\":{}}\n\n"), []byte("data: [DONE]\n\n"), []byte{1})
	f.Fuzz(func(t *testing.T, mode uint8, leg1, leg2, cuts []byte) {
		route := []engine.Route{engine.RouteCompletions, engine.RouteChat, engine.RouteGenerate}[int(mode)%3]
		_, out := relay(t, route, mode&4 != 0, mode&8 != 0, cuts, leg1, leg2)
		checkClient(t, out)
	})
}

// vllmChunks writes a vLLM stream for route from the fuzzer's text (its
// pieces split at '|', at most 12) and ids (one token id per byte, dealt
// to the pieces in turn): the first event with the prompt's ids, one
// content event per piece with its token ids, the finish, the usage
// chunk and [DONE], each as encoding/json writes it.
func vllmChunks(t *testing.T, route engine.Route, text string, ids []byte, finish string) []byte {
	pieces := strings.Split(text, "|")
	if len(pieces) > 12 {
		pieces = pieces[:12]
	}
	var b bytes.Buffer
	ev := func(v any) {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("data: ")
		b.Write(j)
		b.WriteString("\n\n")
	}
	prompt := []int64{1, 2, 3}
	choice := func(piece string, tok []int64, fin any) map[string]any {
		c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": fin}
		if route == engine.RouteChat {
			c["delta"] = map[string]any{"content": piece}
		} else {
			c["text"] = piece
		}
		if tok != nil {
			c["token_ids"] = tok
		}
		return c
	}
	head := map[string]any{"id": "cmpl-1", "created": 7, "model": "m", "usage": nil}
	with := func(m map[string]any, k string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range m {
			out[kk] = vv
		}
		out[k] = v
		return out
	}
	first := choice("", nil, nil)
	if route == engine.RouteChat {
		first["delta"] = map[string]any{"role": "assistant", "content": ""}
		ev(with(with(head, "choices", []any{first}), "prompt_token_ids", prompt))
	} else {
		first["prompt_token_ids"] = prompt
		ev(with(head, "choices", []any{first}))
	}
	for i, p := range pieces {
		var tok []int64
		for j := i; j < len(ids); j += len(pieces) {
			tok = append(tok, int64(ids[j])*997)
		}
		if tok == nil {
			tok = []int64{}
		}
		var fin any
		if i == len(pieces)-1 && finish != "" {
			fin = finish
		}
		ev(with(head, "choices", []any{choice(p, tok, fin)}))
	}
	ev(with(with(head, "choices", []any{}), "usage", map[string]any{"prompt_tokens": 3, "completion_tokens": len(ids), "total_tokens": 3 + len(ids), "prompt_tokens_details": map[string]any{"cached_tokens": 2}}))
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

type wireChunk struct {
	Choices []struct {
		TokenIDs     []int64 `json:"token_ids"`
		PromptIDs    []int64 `json:"prompt_token_ids"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	PromptIDs []int64         `json:"prompt_token_ids"`
	Usage     json.RawMessage `json:"usage"`
}

// stripIDs is an event as the client must get it when it did not ask for
// token ids: the worker's, without token_ids and prompt_token_ids.
func stripIDs(t *testing.T, d []byte) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(d, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "prompt_token_ids")
	if cs, ok := m["choices"].([]any); ok {
		for _, c := range cs {
			if c, ok := c.(map[string]any); ok {
				delete(c, "token_ids")
				delete(c, "prompt_token_ids")
			}
		}
	}
	return m
}

// FuzzStreamVLLM: on a vLLM-shaped stream (any text, any token ids),
// cut anywhere and possibly broken off at any byte, what the relay reads
// is what encoding/json reads in the events that arrived whole: the
// prompt's ids, the generated ids in order, whether the finish and the
// usage chunk came; and the client gets those events, byte for byte when
// it asked for token ids, else as encoding/json reads them without
// token_ids and prompt_token_ids.
func FuzzStreamVLLM(f *testing.F) {
	f.Add(uint8(0), "a| b|c", []byte{1, 2, 3, 250}, uint16(0xffff), []byte{7, 30})
	f.Add(uint8(1), "\"token_ids\":[9]|\\u2028|\n", []byte{0}, uint16(200), []byte{})
	f.Add(uint8(3), "", []byte{}, uint16(57), []byte{1, 1, 1})
	f.Fuzz(func(t *testing.T, mode uint8, text string, ids []byte, cutAt uint16, cuts []byte) {
		route := engine.RouteCompletions
		if mode&1 != 0 {
			route = engine.RouteChat
		}
		clientIDs := mode&2 != 0
		finish := ""
		if mode&4 != 0 {
			finish = "stop"
		}
		full := vllmChunks(t, route, text, ids, finish)
		stream := full[:min(len(full), int(cutAt))]
		rec := httptest.NewRecorder()
		s := NewStream(rec, route, clientIDs, true)
		err := s.Pump(&cutReader{b: stream, cuts: cuts})
		whole := len(stream) == len(full)
		if whole && err != nil {
			t.Fatalf("a whole stream broke: %v", err)
		}
		// The events that arrived whole, as encoding/json reads them.
		var events [][]byte
		for rest := stream; ; {
			i := bytes.Index(rest, []byte("\n\n"))
			if i < 0 {
				break
			}
			events = append(events, bytes.TrimPrefix(rest[:i], []byte("data: ")))
			rest = rest[i+2:]
		}
		var gen, prompt []int64
		finished, usageSent, done := false, false, false
		for _, d := range events {
			if string(d) == "[DONE]" {
				done = true
				continue
			}
			var c wireChunk
			if err := json.Unmarshal(d, &c); err != nil {
				t.Fatal(err)
			}
			if c.PromptIDs != nil {
				prompt = c.PromptIDs
			}
			for _, ch := range c.Choices {
				if ch.PromptIDs != nil {
					prompt = ch.PromptIDs
				}
				gen = append(gen, ch.TokenIDs...)
				finished = finished || ch.FinishReason != nil
			}
			usageSent = usageSent || len(c.Choices) == 0 && string(c.Usage) != "null" && c.Usage != nil
		}
		if !slices.Equal(s.Gen, gen) || !slices.Equal(s.Prompt, prompt) || s.Finished != finished || s.UsageSent != usageSent || s.Done != done {
			t.Fatalf("relay read gen %v prompt %v finished %v usage %v done %v; encoding/json %v %v %v %v %v",
				s.Gen, s.Prompt, s.Finished, s.UsageSent, s.Done, gen, prompt, finished, usageSent, done)
		}
		got := checkClient(t, rec.Body.Bytes())
		if len(got) != len(events) {
			t.Fatalf("the client got %d events of %d", len(got), len(events))
		}
		for i, d := range events {
			if string(d) == "[DONE]" || clientIDs {
				if !bytes.Equal(got[i], d) {
					t.Fatalf("event %d: got %q, want the worker's %q", i, got[i], d)
				}
				continue
			}
			var g map[string]any
			if err := json.Unmarshal(got[i], &g); err != nil {
				t.Fatal(err)
			}
			if w := stripIDs(t, d); !reflect.DeepEqual(g, w) {
				t.Fatalf("event %d: got %q, want the worker's %q without ids", i, got[i], d)
			}
		}
	})
}
