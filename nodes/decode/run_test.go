package decode

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
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

func newNode(t *testing.T, c *upstream.Client, params string) *Decode {
	t.Helper()
	n, err := Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: c}}, json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	return n.(*Decode)
}

func TestBuild(t *testing.T) {
	onlyPrefill := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RolePrefill: {{URL: "http://127.0.0.1:1"}}}})
	for _, tc := range []struct {
		params, path, env string
		up                *upstream.Client
	}{
		{params: `{"ttfb_timeout":30}`, path: "/ttfb_timeout"},
		{params: `{"aggregated":"true"}`, path: "/aggregated"},
		{params: `{"kv_connector":"mooncake"}`, path: "/kv_connector"}, // ACCEPTANCE 28
		{params: `{"kv_connector":"kv-sglang"}`, path: "/kv_connector", env: "9100x"},
		{params: `{}`, path: "", up: onlyPrefill}, // ACCEPTANCE 29
	} {
		t.Setenv("SGLANG_BOOTSTRAP_PORT", tc.env)
		_, err := Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: tc.up}}, json.RawMessage(tc.params))
		var pe *engine.ParamError
		if !errors.As(err, &pe) || pe.Path != tc.path {
			t.Errorf("%s: %v", tc.params, err)
		}
	}
	t.Setenv("SGLANG_BOOTSTRAP_PORT", "")
	n := newNode(t, nil, `{}`)
	if n.ttfb != 0 || n.sglang {
		t.Fatalf("defaults %+v", n)
	}
	if c := n.Contract(); !c.Responds || !c.Terminal || c.Role != "decode" || len(c.Needs) != 0 {
		t.Fatalf("contract %+v", c)
	}
	// A workflow default of kv-sglang applies too.
	d, err := Build(&engine.BuildContext{Defaults: engine.Defaults{KVConnector: "kv-sglang"}}, nil)
	if err != nil || !d.(*Decode).sglang || d.(*Decode).port != 8998 {
		t.Fatalf("%+v %v", d, err)
	}
}

// ACCEPTANCE 144, 15, 149
func TestAfterPrefill(t *testing.T) {
	const reply = `{"id":"x","choices":[]}`
	w := legtest.NewWorker(t, legtest.JSON(200, reply))
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	run, rec := legtest.Run(t, engine.RouteChat, chatOne, http.Header{"Prefer": {"if-available"}, "Epp-Profile": {"prefill"}})
	run.State.Tokens, run.State.Media = tokens6, media(chatOne)
	handoff.KV.Set(run, handoff.KVHandoff{PrefillRan: true, Params: json.RawMessage(nixlDecode)})
	res := n.Run(run.Ctx, legtest.Exec(run, "decode"))
	if res.Err != nil || !res.Responded || rec.Body.String() != reply {
		t.Fatalf("%+v %q", res, rec.Body)
	}
	c := w.Calls()[0]
	if c.Path != "/v1/chat/completions" || strings.Join(c.Header.Values("Epp-Profile"), ",") != "decode" || c.Header.Get("Prefer") != "" {
		t.Fatalf("%s %v", c.Path, c.Header)
	}
	var got struct {
		Tokens struct {
			TokenIDs []int `json:"token_ids"`
		} `json:"tokens"`
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(c.Body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Tokens.TokenIDs) != 6 || got.KV["do_remote_prefill"] != true || got.KV["do_remote_decode"] != false || got.KV["remote_host"] != "10.0.0.42" {
		t.Fatalf("body %s", c.Body)
	}
	if !strings.Contains(string(c.Body), `"image_url":{"url":"data:image/png;base64,iVBO"},"uuid":"h0"`) {
		t.Fatalf("uuid: %s", c.Body)
	}
}

// ACCEPTANCE 152, 153, 188, 194, 196
func TestErrors(t *testing.T) {
	dead := legtest.NewWorker(t, nil)
	deadURL := dead.URL
	dead.Close()
	slow := func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}
	for _, tc := range []struct {
		name, params string
		handle       func(http.ResponseWriter, *http.Request, legtest.Call)
		base         string
		status       int
		code         string
	}{
		{name: "400", params: `{}`, handle: legtest.JSON(400, `{"error":{"message":"`+strings.Repeat("x", 20<<10)+`"}}`), status: 400, code: "upstream_rejected"},
		{name: "503", params: `{}`, handle: legtest.JSON(503, `MARKER-503`), status: 503, code: "upstream_unavailable"}, // it was 502
		{name: "500", params: `{}`, handle: legtest.JSON(500, `MARKER-500`), status: 502, code: "bad_gateway"},
		{name: "transport", params: `{}`, base: deadURL, status: 502, code: "bad_gateway"},
		{name: "ttfb", params: `{"ttfb_timeout":"50ms"}`, handle: slow, status: 504, code: "upstream_timeout"},
		// Issue 17 item 6: a 2xx without a body is no reply (it reached the client as 204).
		{name: "204", params: `{}`, handle: legtest.JSON(204, ``), status: 502, code: "bad_gateway"},
		{name: "200 empty", params: `{}`, handle: legtest.JSON(200, ``), status: 502, code: "bad_gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base
			if base == "" {
				base = legtest.NewWorker(t, tc.handle).URL
			}
			n := newNode(t, legtest.Gateway(t, base), tc.params)
			run, rec := legtest.Run(t, engine.RouteChat, `{}`, nil)
			res := n.Run(run.Ctx, legtest.Exec(run, "decode"))
			e := engine.AsError(res.Err)
			if e == nil || res.Responded || run.Answered() || rec.Body.Len() != 0 {
				t.Fatalf("%+v", res)
			}
			e.Node = "decode"
			if e.HTTPStatus() != tc.status || e.Code() != tc.code {
				t.Fatalf("got %d %s (%v)", e.HTTPStatus(), e.Code(), e)
			}
			if m := e.ClientMessage("r"); len(m) > 700 || strings.Contains(m, "MARKER") {
				t.Fatalf("message %q", m)
			}
		})
	}
}

// Issue 17 item 6: after a KV hand-off, decode's 4xx about the transfer is
// the worker side's failure (502 bad_gateway), not the client's 400, and no
// relayed message names an internal address; a 4xx about the client's input
// stays the client's.
func TestKVHandoffFailure(t *testing.T) {
	const pull = `{"object":"error","message":"KV transfer failed: remote_request_id rr-1 from 10.0.0.42:5600: Get \"http://10.0.0.42:5600/sim/kv/rr-1\": 404","code":400}`
	for _, tc := range []struct {
		name, body string
		prefill    bool
		status     int
		code       string
	}{
		{"KV pull after prefill", pull, true, 502, "bad_gateway"},
		{"client input after prefill", `{"object":"error","message":"max_tokens must be at least 1 (see http://10.1.1.1:80/doc)","param":"max_tokens"}`, true, 400, "upstream_rejected"},
		{"KV words without a hand-off", pull, false, 400, "upstream_rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, legtest.JSON(400, tc.body))
			n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
			run, rec := legtest.Run(t, engine.RouteChat, chatOne, nil)
			run.State.Tokens, run.State.Media = tokens6, media(chatOne)
			if tc.prefill {
				handoff.KV.Set(run, handoff.KVHandoff{PrefillRan: true, Params: json.RawMessage(nixlDecode)})
			}
			res := n.Run(run.Ctx, legtest.Exec(run, "decode"))
			e := engine.AsError(res.Err)
			if e == nil || res.Responded || rec.Body.Len() != 0 {
				t.Fatalf("%+v", res)
			}
			e.Node = "decode"
			if e.HTTPStatus() != tc.status || e.Code() != tc.code {
				t.Fatalf("got %d %s (%v)", e.HTTPStatus(), e.Code(), e)
			}
			if m := e.ClientMessage("r"); strings.Contains(m, "10.0.0.42") || strings.Contains(m, "10.1.1.1") || strings.Contains(m, "5600") {
				t.Fatalf("client message names an internal address: %q", m)
			}
		})
	}
}

// chanWriter hands every write to the test as it happens.
type chanWriter struct {
	h      http.Header
	code   int
	writes chan string
}

func (w *chanWriter) Header() http.Header         { return w.h }
func (w *chanWriter) WriteHeader(c int)           { w.code = c }
func (w *chanWriter) Flush()                      {}
func (w *chanWriter) Write(p []byte) (int, error) { w.writes <- string(p); return len(p), nil }

// ACCEPTANCE 176, 181: each event reaches the client before the next is
// sent, bytes identical, nothing added; headers relayed with our request id.
func TestSSEFlushedPerEvent(t *testing.T) {
	events := []string{"data: {\"n\":1}\n\n", "data: {\"n\":2}\n\n", "data: [DONE]\n\n"}
	seen := make(chan struct{})
	w := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "upstream-echo")
		w.Header().Set("X-Worker", "w1")
		for _, ev := range events {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
			select {
			case <-seen:
			case <-time.After(5 * time.Second):
				return
			}
		}
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	run, _ := legtest.Run(t, engine.RouteChat, `{"stream":true}`, nil)
	run.Req.Stream = true
	cw := &chanWriter{h: http.Header{}, writes: make(chan string, 8)}
	run = engine.NewRun(run.Ctx, run.Req, cw)
	done := make(chan engine.Result, 1)
	go func() { done <- n.Run(run.Ctx, legtest.Exec(run, "decode")) }()
	var got strings.Builder
	for i, ev := range events {
		select {
		case p := <-cw.writes:
			if p != ev {
				t.Fatalf("event %d: %q", i, p)
			}
			got.WriteString(p)
			seen <- struct{}{}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d never reached the client", i)
		}
	}
	res := <-done
	if res.Err != nil || !res.Responded || cw.code != 200 {
		t.Fatalf("%+v", res)
	}
	if cw.h.Get("X-Request-Id") != "req-1" || cw.h.Get("X-Worker") != "w1" || cw.h.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", cw.h)
	}
}

// ACCEPTANCE 179: a short body ends the reply abnormally.
func TestMidStreamFailure(t *testing.T) {
	w := legtest.NewWorker(t, func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, `{"partial":`)
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	run, rec := legtest.Run(t, engine.RouteChat, `{}`, nil)
	res := n.Run(run.Ctx, legtest.Exec(run, "decode"))
	e := engine.AsError(res.Err)
	if !res.Responded || e == nil || e.Kind != engine.KindBadGateway || rec.Body.String() != `{"partial":` {
		t.Fatalf("%+v %q", res, rec.Body)
	}
}

// ACCEPTANCE 182: a client disconnect cancels the upstream call.
func TestClientDisconnect(t *testing.T) {
	cancelled := make(chan struct{})
	started := make(chan struct{})
	w := legtest.NewWorker(t, func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(5 * time.Second):
		}
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	ctx, cancel := context.WithCancel(context.Background())
	run, _ := legtest.RunCtx(ctx, engine.RouteChat, `{}`, nil)
	done := make(chan engine.Result, 1)
	go func() { done <- n.Run(run.Ctx, legtest.Exec(run, "decode")) }()
	<-started
	cancel()
	select {
	case <-cancelled:
	case <-time.After(time.Second):
		t.Fatal("upstream call not cancelled within 1s")
	}
	if e := engine.AsError((<-done).Err); e == nil || e.Kind != engine.KindCancelled {
		t.Fatalf("got %v", e)
	}
}

// PROTOCOL 14: the client left after prefill answered: no decode is sent.
func TestPrefillAbandoned(t *testing.T) {
	w := legtest.NewWorker(t, nil)
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run, _ := legtest.RunCtx(ctx, engine.RouteChat, `{}`, nil)
	handoff.KV.Set(run, handoff.KVHandoff{PrefillRan: true, Params: json.RawMessage(`{}`)})
	res := n.Run(ctx, legtest.Exec(run, "decode"))
	if e := engine.AsError(res.Err); e == nil || e.Kind != engine.KindCancelled || !run.Abandoned() || len(w.Calls()) != 0 {
		t.Fatalf("%+v abandoned=%v calls=%d", res, run.Abandoned(), len(w.Calls()))
	}
}

// FIELD-NOTES 4, ACCEPTANCE 148: the aggregated fallback carries no KV and says so.
func TestAggregated(t *testing.T) {
	w := legtest.NewWorker(t, nil)
	n := newNode(t, legtest.Gateway(t, w.URL), `{"aggregated":true}`)
	run, _ := legtest.Run(t, engine.RouteCompletions, `{"prompt":"x"}`, nil)
	handoff.KV.Set(run, handoff.KVHandoff{PrefillRan: true, Params: json.RawMessage(`{"do_remote_prefill":true}`)})
	res := n.Run(run.Ctx, legtest.Exec(run, "fallback"))
	if res.Err != nil || res.Outputs["aggregated"] != true || res.Attrs["celflow.aggregated"] != true {
		t.Fatalf("%+v", res)
	}
	if b := string(w.Calls()[0].Body); b != `{"prompt":"x"}` {
		t.Fatalf("body %s", b)
	}
}

// ACCEPTANCE 170 (decode side): the sequential handoff's host, port and room.
func TestSGLangSequential(t *testing.T) {
	t.Setenv("SGLANG_BOOTSTRAP_PORT", "")
	w := legtest.NewWorker(t, nil)
	n := newNode(t, legtest.Gateway(t, w.URL), `{"kv_connector":"kv-sglang"}`)
	run, _ := legtest.Run(t, engine.RouteChat, `{"messages":[]}`, nil)
	handoff.KV.Set(run, handoff.KVHandoff{PrefillRan: true, Bootstrap: &handoff.Bootstrap{Host: "10.1.0.7", Port: 9100, Room: 42}})
	if res := n.Run(run.Ctx, legtest.Exec(run, "decode")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if b := string(w.Calls()[0].Body); b != `{"messages":[],"bootstrap_host":"10.1.0.7","bootstrap_port":9100,"bootstrap_room":42}` {
		t.Fatalf("body %s", b)
	}
	// A generate request never reaches an SGLang worker.
	run, _ = legtest.Run(t, engine.RouteGenerate, `{"token_ids":[1]}`, nil)
	if e := engine.AsError(n.Run(run.Ctx, legtest.Exec(run, "decode")).Err); e == nil || e.HTTPStatus() != 400 {
		t.Fatalf("generate: %v", e)
	}
}

// Direct mode: the prompt sent to a decode endpoint is recorded, so a
// conditional decode with the same prefix is then predicted a hit there.
func TestDirectRecordsPrefix(t *testing.T) {
	w := legtest.NewWorker(t, nil)
	c := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: w.URL}}}, PrefixBlockTokens: 4})
	n := newNode(t, c, `{}`)
	ids := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if _, hit := c.PredictHit(ids); hit {
		t.Fatal("hit before anything was sent")
	}
	run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	run.State.Tokens = engine.Tokens{Known: true, IDs: ids}
	if res := n.Run(run.Ctx, legtest.Exec(run, "decode")); res.Err != nil {
		t.Fatal(res.Err)
	}
	tg, hit := c.PredictHit(ids)
	if !hit {
		t.Fatal("prefix not recorded")
	}
	tg.Done(false)
}

// ACCEPTANCE 21, 23, 24
func TestSchema(t *testing.T) {
	legtest.CheckSchema(t, TypeName, schemaJSON,
		[]string{`{}`, `{"ttfb_timeout":"2s","stream_idle_timeout":"500ms","aggregated":true,"kv_connector":"kv-sglang"}`},
		[]string{`{"aggregated":"true"}`, `{"aggregated":1}`, `{"ttfb_timeout":"30"}`, `{"stream_idle_timeout":30}`, `{"address":"x"}`})
}
