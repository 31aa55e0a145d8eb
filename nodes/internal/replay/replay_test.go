package replay

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

func parse(t *testing.T, s string) *jsonb.Object {
	t.Helper()
	o, err := jsonb.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route engine.Route
		body  string
		media int
		want  string
	}{
		{"plain chat", engine.RouteChat, `{"messages":[]}`, 0, ""},
		{"text format", engine.RouteChat, `{"response_format":{"type":"text"}}`, 0, ""},
		{"json_object", engine.RouteChat, `{"response_format":{"type":"json_object"}}`, 0, RefusedGuided},
		{"json_schema", engine.RouteChat, `{"response_format":{"type":"json_schema","json_schema":{}}}`, 0, RefusedGuided},
		{"guided_json", engine.RouteCompletions, `{"guided_json":{}}`, 0, RefusedGuided},
		{"guided null", engine.RouteCompletions, `{"guided_json":null}`, 0, ""},
		{"structured_outputs", engine.RouteChat, `{"structured_outputs":{"regex":"a"}}`, 0, RefusedGuided},
		{"n=1", engine.RouteChat, `{"n":1}`, 0, ""},
		{"n=2", engine.RouteChat, `{"n":2}`, 0, RefusedN},
		{"best_of", engine.RouteCompletions, `{"best_of":3}`, 0, RefusedN},
		{"prompt batch", engine.RouteCompletions, `{"prompt":["a","b"]}`, 0, RefusedN},
		{"prompt id batch", engine.RouteCompletions, `{"prompt":[ [1,2],[3]]}`, 0, RefusedN},
		{"prompt ids", engine.RouteCompletions, `{"prompt":[1,2,3]}`, 0, ""},
		{"logprobs false", engine.RouteChat, `{"logprobs":false}`, 0, ""},
		{"logprobs", engine.RouteChat, `{"logprobs":true}`, 0, RefusedLogprobs},
		{"completions logprobs", engine.RouteCompletions, `{"logprobs":0}`, 0, RefusedLogprobs},
		{"prompt_logprobs", engine.RouteCompletions, `{"prompt_logprobs":1}`, 0, RefusedLogprobs},
		{"echo", engine.RouteCompletions, `{"echo":true}`, 0, RefusedLogprobs},
		{"tools", engine.RouteChat, `{"tools":[{"type":"function"}]}`, 0, RefusedTools},
		{"tools none", engine.RouteChat, `{"tools":[{"type":"function"}],"tool_choice":"none"}`, 0, ""},
		{"empty tools", engine.RouteChat, `{"tools":[]}`, 0, ""},
		{"media", engine.RouteChat, `{}`, 1, RefusedMedia},
		{"generate", engine.RouteGenerate, `{"token_ids":[1,2],"sampling_params":{"max_tokens":4,"temperature":0}}`, 0, ""},
		{"generate no sampling_params", engine.RouteGenerate, `{"token_ids":[1,2]}`, 0, ""},
		{"generate n", engine.RouteGenerate, `{"sampling_params":{"n":2}}`, 0, RefusedN},
		{"generate logprobs", engine.RouteGenerate, `{"sampling_params":{"logprobs":1}}`, 0, RefusedLogprobs},
		{"generate guided", engine.RouteGenerate, `{"sampling_params":{"structured_outputs":{"json":{}}}}`, 0, RefusedGuided},
		{"generate media", engine.RouteGenerate, `{}`, 2, RefusedMedia},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Check(tc.route, parse(t, tc.body), tc.media); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestContinuation(t *testing.T) {
	ids := []int64{1, 200, 300, 7, 8}
	for _, tc := range []struct {
		name  string
		route engine.Route
		body  string
		gen   int
		want  string
		left  bool
	}{
		{"chat max_tokens", engine.RouteChat,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":10,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`, 2,
			`{"model":"m","max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"prompt":[1,200,300,7,8],"return_token_ids":true}`, true},
		{"chat max_completion_tokens wins, min_tokens", engine.RouteChat,
			`{"messages":[],"max_tokens":100,"max_completion_tokens":5,"min_tokens":3,"stream":true,"tools":[],"n":1}`, 2,
			`{"max_tokens":3,"min_tokens":1,"stream":true,"prompt":[1,200,300,7,8],"return_token_ids":true}`, true},
		{"chat without a limit", engine.RouteChat, `{"messages":[],"stream":true}`, 2,
			`{"stream":true,"max_tokens":null,"prompt":[1,200,300,7,8],"return_token_ids":true}`, true},
		{"completions keeps its fields", engine.RouteCompletions,
			`{"prompt":"a b","max_tokens":4,"seed":12345678901234567890,"stop":["x"],"stream":true,"echo":false}`, 2,
			`{"prompt":[1,200,300,7,8],"max_tokens":2,"seed":12345678901234567890,"stop":["x"],"stream":true,"return_token_ids":true}`, true},
		{"completions default max", engine.RouteCompletions, `{"prompt":"a","stream":true}`, 2,
			`{"prompt":[1,200,300,7,8],"stream":true,"max_tokens":14,"return_token_ids":true}`, true},
		{"budget spent", engine.RouteCompletions, `{"prompt":"a","max_tokens":2,"stream":true}`, 2, ``, false},
		{"generate", engine.RouteGenerate, `{"token_ids":[1,200,300],"sampling_params":{"max_tokens":6,"min_tokens":3,"temperature":0},"stream":true}`, 2,
			`{"token_ids":[1,200,300,7,8],"sampling_params":{"max_tokens":4,"min_tokens":1,"temperature":0},"stream":true}`, true},
		{"generate default max", engine.RouteGenerate, `{"token_ids":[1],"stream":true}`, 2,
			`{"token_ids":[1,200,300,7,8],"stream":true,"sampling_params":{"max_tokens":14}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, left := Continuation(tc.route, []byte(tc.body), parse(t, tc.body), ids, tc.gen, nil)
			if left != tc.left || string(got) != tc.want {
				t.Fatalf("got %s (%v)\nwant %s (%v)", got, left, tc.want, tc.left)
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	two, zero, many := 2, 0, 11
	for _, tc := range []struct {
		name string
		p    *Params
		want string
		err  string
	}{
		{"absent", nil, "off", ""},
		{"defaults", &Params{}, "attempts=2 on=reset,idle_timeout,error_event,truncated,kv_pull max_added_time=30s", ""},
		{"off", &Params{Attempts: &zero}, "off", ""},
		{"some", &Params{Attempts: &two, On: []string{"kv_pull", "reset"}, MaxAddedTime: "2s"}, "attempts=2 on=reset,kv_pull max_added_time=2s", ""},
		{"too many", &Params{Attempts: &many}, "", "/failover/attempts"},
		{"unknown reason", &Params{On: []string{"reset", "oops"}}, "", "/failover/on/1"},
		{"bad duration", &Params{MaxAddedTime: "soon"}, "", "/failover/max_added_time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, pe := Build(tc.p)
			if tc.err != "" {
				if pe == nil || pe.Path != tc.err {
					t.Fatalf("error %v, want at %s", pe, tc.err)
				}
				return
			}
			if pe != nil || p.String() != tc.want {
				t.Fatalf("got %q %v, want %q", p.String(), pe, tc.want)
			}
		})
	}
}

// A chat stream broken after two tokens, continued by a completions
// stream: the client sees the first leg's id, created and model, chat
// chunks of the first leg's shape, usage counting the original prompt and
// every generated token, no token ids, one [DONE].
func TestStreamConvertsAContinuation(t *testing.T) {
	rec := httptest.NewRecorder()
	s := NewStream(rec, engine.RouteChat, false, true)
	s.Start(&http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}}, "r1")
	first := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null,"prompt_token_ids":[1,2,3]}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"alfa"},"logprobs":null,"finish_reason":null,"token_ids":[10]}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" bravo"},"logprobs":null,"finish_reason":null,"token_ids":[11]}],"usage":null}

data: {"id":"chatcmpl-1","obj`
	err := s.Pump(io.MultiReader(strings.NewReader(first), errReader{}))
	var brk *Break
	if !errors.As(err, &brk) || brk.Reason != ReasonReset {
		t.Fatalf("pump: %v", err)
	}
	if !s.PromptKnown || len(s.Prompt) != 3 || len(s.Gen) != 2 || s.Events != 3 || s.Finished {
		t.Fatalf("state %+v", s)
	}
	s.Continue()
	cont := `data: {"id":"cmpl-9","object":"text_completion","created":99,"model":"m","choices":[{"index":0,"text":" charlie","logprobs":null,"finish_reason":null,"prompt_token_ids":[1,2,3,10,11],"token_ids":[12]}],"usage":null}

data: {"id":"cmpl-9","object":"text_completion","created":99,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":null}

data: {"id":"cmpl-9","object":"text_completion","created":99,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}

data: [DONE]

`
	if err := s.Pump(strings.NewReader(cont)); err != nil {
		t.Fatal(err)
	}
	got := rec.Body.String()
	want := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"alfa"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" bravo"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" charlie"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":3,"total_tokens":6,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":3}}}

data: [DONE]

`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// An error event mid-stream is a break, not relayed.
func TestStreamErrorEvent(t *testing.T) {
	rec := httptest.NewRecorder()
	s := NewStream(rec, engine.RouteCompletions, false, false)
	err := s.Pump(strings.NewReader("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[5],\"finish_reason\":null}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n"))
	var brk *Break
	if !errors.As(err, &brk) || brk.Reason != ReasonErrorEvent || strings.Contains(rec.Body.String(), "boom") || len(s.Gen) != 1 {
		t.Fatalf("err %v body %q gen %v", err, rec.Body.String(), s.Gen)
	}
}

// The final chunk went out, the leg broke before usage and [DONE]: Finish
// writes them.
func TestStreamFinish(t *testing.T) {
	rec := httptest.NewRecorder()
	s := NewStream(rec, engine.RouteCompletions, false, true)
	err := s.Pump(strings.NewReader("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"prompt_token_ids\":[1,2],\"token_ids\":[5],\"finish_reason\":\"length\"}],\"usage\":null}\n\n"))
	if !s.Finished || err == nil {
		t.Fatalf("finished %v err %v", s.Finished, err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	want := "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":\"length\"}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"total_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":null}}\n\n" +
		"data: [DONE]\n\n"
	if rec.Body.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", rec.Body.String(), want)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// BenchmarkStreamPump is the relay's cost per reply on the hot path of a
// decode that does not fail: 20 content events with token ids the client
// did not ask for (stripped from each), the finish, usage and [DONE].
func BenchmarkStreamPump(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null,"prompt_token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}` + "\n\n")
	for i := range 20 {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null,"token_ids":[` + strings.Repeat("1", i%3+3) + `]}],"usage":null}` + "\n\n")
	}
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n")
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":16,"total_tokens":36,"completion_tokens":20}}` + "\n\ndata: [DONE]\n\n")
	stream := sb.String()
	w := discardWriter{h: http.Header{}}
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		s := NewStream(w, engine.RouteChat, false, true)
		if err := s.Pump(strings.NewReader(stream)); err != nil {
			b.Fatal(err)
		}
	}
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}
func (d discardWriter) Flush()                      {}

// The first leg's content events take the walk-only path: token ids are
// cut with one separator wherever they stand, and anything unusual falls
// back to the indexed path with the same result.
func TestFastEvent(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"last", `{"id":"c","choices":[{"index":0,"text":" a","finish_reason":null,"token_ids":[5]}]}`,
			`{"id":"c","choices":[{"index":0,"text":" a","finish_reason":null}]}`},
		{"first", `{"id":"c","choices":[{"token_ids":[5], "index":0,"text":" a"}]}`,
			`{"id":"c","choices":[{ "index":0,"text":" a"}]}`},
		{"middle, spaces", `{"id":"c","choices":[ { "index" : 0 , "token_ids" : [5,6] , "text":" a"} ]}`,
			`{"id":"c","choices":[ { "index" : 0  , "text":" a"} ]}`},
		{"alone", `{"id":"c","choices":[{"token_ids":[5]}]}`, `{"id":"c","choices":[{}]}`},
		{"no ids", `{"id":"c","choices":[{"index":0,"text":""}]}`, `{"id":"c","choices":[{"index":0,"text":""}]}`},
		{"two choices: indexed path", `{"id":"c","choices":[{"index":0,"token_ids":[5]},{"index":1,"token_ids":[6]}]}`,
			`{"id":"c","choices":[{"index":0},{"index":1}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s := NewStream(rec, engine.RouteCompletions, false, false)
			first := `data: {"id":"c","choices":[{"index":0,"text":"","prompt_token_ids":[1]}]}` + "\n\n"
			err := s.Pump(strings.NewReader(first + "data: " + tc.in + "\n\n"))
			var brk *Break
			if !errors.As(err, &brk) {
				t.Fatalf("pump: %v", err)
			}
			got := strings.TrimPrefix(rec.Body.String(), `data: {"id":"c","choices":[{"index":0,"text":""}]}`+"\n\n")
			if got != "data: "+tc.want+"\n\n" {
				t.Fatalf("got %q\nwant %q", got, "data: "+tc.want+"\n\n")
			}
			if strings.Contains(tc.in, "token_ids") && len(s.Gen) == 0 {
				t.Fatal("no ids recorded")
			}
		})
	}
}
