package conditionaldecode

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

func TestBuildWorkerMode(t *testing.T) {
	for _, tc := range []struct{ params, path string }{
		{`{"mode":"worker"}`, "/cache_hit_threshold"},
		{`{"cache_hit_threshold":0.5}`, "/cache_hit_threshold"},
		{`{"mode":"predicted","cache_hit_threshold":0.5}`, "/cache_hit_threshold"},
		{`{"mode":"worker","cache_hit_threshold":1.5}`, "/cache_hit_threshold"},
		{`{"mode":"worker","cache_hit_threshold":-1}`, "/cache_hit_threshold"},
		{`{"mode":"sometimes"}`, "/mode"},
	} {
		_, err := Build(&engine.BuildContext{}, json.RawMessage(tc.params))
		var pe *engine.ParamError
		if !errors.As(err, &pe) || pe.Path != tc.path {
			t.Errorf("%s: %v", tc.params, err)
		}
	}
	if n := newNode(t, nil, `{"mode":"worker","cache_hit_threshold":0.8}`); string(n.threshold) != "0.8" {
		t.Fatalf("threshold %q", n.threshold)
	}
	if n := newNode(t, nil, `{"mode":"predicted"}`); n.threshold != nil {
		t.Fatal("predicted mode has a threshold")
	}
}

const (
	chatMissJSON = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"cache_threshold"}],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5}}`
	chatHitJSON  = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"cache_threshold is a word here"},"finish_reason":"stop"}]}`
	roleEvent    = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	missEvent    = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":\"cache_threshold\"}]}\n\n"
	tokenEvent   = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n"
	textMiss     = "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"cache_threshold\"}]}\r\n\r\n"
	usageEvent   = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5}}\n\n"
	done         = "data: [DONE]\n\n"
)

// Worker-decided conditional decode: the leg carries cache_hit_threshold
// (and Prefer); a cache_threshold finish, in JSON or in the first deciding
// SSE event, is the 412 miss outcome and nothing reaches the client; any
// other 2xx is relayed byte for byte.
func TestWorkerModeVerdicts(t *testing.T) {
	big := `{"choices":[{"message":{"content":"` + strings.Repeat("x", probeLimit) + `"},"finish_reason":"cache_threshold"}]}`
	for _, tc := range []struct {
		name   string
		route  engine.Route
		stream bool
		events []string // SSE events, or one JSON body
		miss   bool
	}{
		{"json miss", engine.RouteChat, false, []string{chatMissJSON}, true},
		{"json hit naming the word", engine.RouteChat, false, []string{chatHitJSON}, false},
		{"json longer than the probe is a hit", engine.RouteChat, false, []string{big}, false},
		{"json not json is relayed", engine.RouteCompletions, false, []string{`not json cache_threshold`}, false},
		{"sse one-chunk miss", engine.RouteChat, true, []string{missEvent, usageEvent, done}, true},
		{"sse miss after the role event", engine.RouteChat, true, []string{roleEvent, missEvent, done}, true},
		{"sse completions miss, CRLF", engine.RouteCompletions, true, []string{textMiss, done}, true},
		{"sse hit", engine.RouteChat, true, []string{roleEvent, tokenEvent, tokenEvent, done}, false},
		{"sse comment then hit", engine.RouteChat, true, []string{": keep-alive\n\n", tokenEvent, done}, false},
		{"sse only done", engine.RouteChat, true, []string{done}, false},
		{"sse usage only, then the end", engine.RouteChat, true, []string{usageEvent}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) {
				if tc.stream {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				for _, ev := range tc.events {
					_, _ = io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
			})
			n := newNode(t, legtest.Gateway(t, w.URL), `{"mode":"worker","cache_hit_threshold":0.75}`)
			body := `{"model":"m","messages":[],"stream":` + map[bool]string{true: "true", false: "false"}[tc.stream] + `}`
			if tc.route == engine.RouteCompletions {
				body = `{"model":"m","prompt":"p","stream":` + map[bool]string{true: "true", false: "false"}[tc.stream] + `}`
			}
			run, rec := legtest.Run(t, tc.route, body, http.Header{"Accept-Encoding": {"br"}})
			run.Req.Stream = tc.stream
			res := n.Run(run.Ctx, legtest.Exec(run, "try_decode"))
			c := w.Calls()[0]
			var sent map[string]any
			if err := json.Unmarshal(c.Body, &sent); err != nil || sent["cache_hit_threshold"] != 0.75 ||
				c.Header.Get("Prefer") != "if-available" || c.Header.Get("Accept-Encoding") != "identity" {
				t.Fatalf("leg %s %v", c.Body, c.Header)
			}
			if tc.miss {
				e := engine.AsError(res.Err)
				if res.Responded || run.Answered() || rec.Body.Len() != 0 || res.HTTPStatus != 412 || e == nil ||
					e.Kind != engine.KindUpstreamRejected || res.Attrs["celflow.miss"] != "cache_threshold" {
					t.Fatalf("miss: %+v, client %q", res, rec.Body)
				}
				return
			}
			if res.Err != nil || !res.Responded || rec.Body.String() != strings.Join(tc.events, "") {
				t.Fatalf("hit: %+v, client %q", res, rec.Body)
			}
		})
	}
}

// Generate has no cache_hit_threshold in vLLM: worker mode keeps the
// predicted behaviour there (the leg is sent as is).
func TestWorkerModeGenerateUnchanged(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, `{"choices":[{"token_ids":[1],"finish_reason":"stop"}]}`))
	n := newNode(t, legtest.Gateway(t, w.URL), `{"mode":"worker","cache_hit_threshold":0.5}`)
	const gen = `{"model":"m","token_ids":[1,2,3],"sampling_params":{}}`
	run, _ := legtest.Run(t, engine.RouteGenerate, gen, nil)
	if res := n.Run(run.Ctx, legtest.Exec(run, "cd")); !res.Responded {
		t.Fatalf("%+v", res)
	}
	if b := string(w.Calls()[0].Body); b != gen {
		t.Fatalf("generate body %s", b)
	}
}

// Direct mode: worker mode sends the leg even without a predicted hit (the
// worker decides), to the next decode endpoint.
func TestWorkerModeDirectAlwaysSends(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, chatMissJSON))
	c := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: w.URL}}}})
	n := newNode(t, c, `{"mode":"worker","cache_hit_threshold":0.9}`)
	run, _ := legtest.Run(t, engine.RouteChat, `{"messages":[]}`, nil)
	res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
	if len(w.Calls()) != 1 || res.HTTPStatus != 412 || res.Attrs["celflow.predicted"] != nil {
		t.Fatalf("%d calls, %+v", len(w.Calls()), res)
	}
}

// A reply that stalls before the verdict is an upstream timeout when
// stream_idle_timeout is set.
func TestWorkerModeStall(t *testing.T) {
	w := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, roleEvent)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{"mode":"worker","cache_hit_threshold":0.5,"stream_idle_timeout":"50ms"}`)
	run, rec := legtest.Run(t, engine.RouteChat, `{"messages":[],"stream":true}`, nil)
	run.Req.Stream = true
	res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
	if e := engine.AsError(res.Err); e == nil || e.Kind != engine.KindUpstreamTimeout || run.Answered() || rec.Body.Len() != 0 {
		t.Fatalf("%+v", res)
	}
}

func FuzzProbeStream(f *testing.F) {
	for _, s := range []string{missEvent + done, roleEvent + tokenEvent, textMiss, ": x\n\ndata: [DONE]\n\n", "data: {\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		head, _, err := probeStream(strings.NewReader(string(b)))
		if err != nil || len(head) > len(b) || string(head) != string(b[:len(head)]) {
			t.Fatalf("head %q of %q: %v", head, b, err)
		}
	})
}

// Issue 10, worker mode: idle_timeout and body_timeout bound the reply
// until the verdict (a JSON reply that stalls after its headers is a
// 504, not a hold), and a hit lifts them: a stream that outlasts
// body_timeout is relayed whole.
func TestWorkerModeBodyBounds(t *testing.T) {
	t.Run("stall before the verdict", func(t *testing.T) {
		w := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"finish_reason":`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		n := newNode(t, legtest.Gateway(t, w.URL), `{"mode":"worker","cache_hit_threshold":0.5,"idle_timeout":"30ms"}`)
		run, rec := legtest.Run(t, engine.RouteChat, `{"messages":[]}`, nil)
		res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
		if e := engine.AsError(res.Err); e == nil || e.Kind != engine.KindUpstreamTimeout || !strings.Contains(e.Msg, "stalled") ||
			run.Answered() || rec.Body.Len() != 0 {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("a hit outlasting body_timeout is relayed whole", func(t *testing.T) {
		events := []string{roleEvent, tokenEvent, tokenEvent, tokenEvent, done}
		w := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i, ev := range events {
				if i > 1 { // after the verdict, slower than body_timeout in total
					select {
					case <-r.Context().Done():
						return
					case <-time.After(30 * time.Millisecond):
					}
				}
				_, _ = io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		})
		n := newNode(t, legtest.Gateway(t, w.URL), `{"mode":"worker","cache_hit_threshold":0.5,"body_timeout":"40ms"}`)
		run, rec := legtest.Run(t, engine.RouteChat, `{"messages":[],"stream":true}`, nil)
		run.Req.Stream = true
		res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
		if res.Err != nil || !res.Responded || rec.Body.String() != strings.Join(events, "") {
			t.Fatalf("%+v, client %q", res, rec.Body)
		}
	})
}

// The cost worker mode adds to a hit before relaying it (issue 12).
func BenchmarkJudge(b *testing.B) {
	hitJSON := `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("word ", 200) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":200}}`
	sse := roleEvent + tokenEvent + tokenEvent + done
	for _, bc := range []struct {
		name, body string
		stream     bool
	}{{"json-1KiB-hit", hitJSON, false}, {"json-miss", chatMissJSON, false}, {"sse-hit", sse, true}, {"sse-miss", missEvent + done, true}} {
		b.Run(bc.name, func(b *testing.B) {
			n := &ConditionalDecode{}
			ct := "application/json"
			if bc.stream {
				ct = "text/event-stream"
			}
			b.ReportAllocs()
			for range b.N {
				resp := &http.Response{Header: http.Header{"Content-Type": {ct}}, ContentLength: -1,
					Body: io.NopCloser(strings.NewReader(bc.body))}
				if _, e := n.judge(context.Background(), resp); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}
