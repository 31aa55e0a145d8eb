package replay

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
