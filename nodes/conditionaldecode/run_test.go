package conditionaldecode

import (
	"bytes"
	"cmp"
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

var tokens6 = engine.Tokens{Known: true, FromRender: true, IDs: []int64{1, 9000, 9000, 9000, 17, 18}, JSON: []byte(`[1,9000,9000,9000,17,18]`)}

func newNode(t *testing.T, c *upstream.Client, params string) *ConditionalDecode {
	t.Helper()
	n, err := Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: c}}, json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	return n.(*ConditionalDecode)
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		params, path string
		up           *upstream.Client
	}{
		{`{"ttfb_timeout":"30"}`, "/ttfb_timeout", nil},
		{`{"stream_idle_timeout":"abc"}`, "/stream_idle_timeout", nil},
		{`{"endpoint":"x"}`, "/endpoint", nil},
		// ACCEPTANCE 29: a worker node with no decode target.
		{`{}`, "", legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RolePrefill: {{URL: "http://127.0.0.1:1"}}}})},
	} {
		_, err := Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: tc.up}}, json.RawMessage(tc.params))
		var pe *engine.ParamError
		if !errors.As(err, &pe) || pe.Path != tc.path {
			t.Errorf("%s: %v", tc.params, err)
		}
	}
	n := newNode(t, nil, `{}`)
	if n.ttfb != 60*time.Second || n.idle != 0 {
		t.Fatalf("defaults: %v %v", n.ttfb, n.idle)
	}
	if c := n.Contract(); !c.Responds || c.Terminal || c.Role != "decode" {
		t.Fatalf("contract %+v", c)
	}
}

// ACCEPTANCE 106, 113, 114, 5
func TestHitRelayed(t *testing.T) {
	const reply = `{"id":"c1","choices":[{"message":{"content":"hi"}}]}`
	w := legtest.NewWorker(t, legtest.JSON(200, reply))
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	body := `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"stream":false}`
	h := http.Header{"Prefer": {"respond-async"}, "Epp-Profile": {"prefill"}, "X-Custom": {"a", "b"}}
	run, rec := legtest.Run(t, engine.RouteChat, body, h)
	run.State.Tokens = tokens6
	res := n.Run(run.Ctx, legtest.Exec(run, "try_decode"))
	if res.Err != nil || !res.Responded || res.HTTPStatus != 200 {
		t.Fatalf("%+v", res)
	}
	if rec.Body.String() != reply || rec.Code != 200 || rec.Header().Get("X-Request-Id") != "req-1" {
		t.Fatalf("client got %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	c := w.Calls()[0]
	if c.Path != "/v1/chat/completions" || c.Header.Get("Epp-Profile") != "decode" ||
		strings.Join(c.Header.Values("Prefer"), ",") != "if-available" || strings.Join(c.Header.Values("X-Custom"), ",") != "a,b" {
		t.Fatalf("leg %s %v", c.Path, c.Header)
	}
	want := `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"stream":false,"tokens":{"token_ids":[1,9000,9000,9000,17,18]}}`
	if string(c.Body) != want {
		t.Fatalf("body %s", c.Body)
	}
}

// ACCEPTANCE 107
func TestStreamingHit(t *testing.T) {
	const sse = "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"
	w := legtest.NewWorker(t, func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range strings.SplitAfter(sse, "\n\n") {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	})
	n := newNode(t, legtest.Gateway(t, w.URL), `{}`)
	run, rec := legtest.Run(t, engine.RouteChat, `{"stream":true}`, nil)
	run.Req.Stream = true
	res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
	if res.Err != nil || !res.Responded {
		t.Fatalf("%+v", res)
	}
	if rec.Body.String() != sse || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("client got %q %v", rec.Body, rec.Header())
	}
}

// ACCEPTANCE 108, 109, 110, 111
func TestNotRelayed(t *testing.T) {
	dead := legtest.NewWorker(t, nil)
	deadURL := dead.URL
	dead.Close()
	for _, tc := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, legtest.Call)
		base   string
		status int
		kind   engine.Kind
		header string
		params string
	}{
		{name: "412 miss", status: 412, kind: engine.KindUpstreamRejected, header: "hint-1", handle: func(w http.ResponseWriter, _ *http.Request, _ legtest.Call) {
			w.Header().Set("X-Hint", "hint-1")
			w.WriteHeader(412)
			_, _ = io.WriteString(w, `{"error":{"message":"MISS-BODY"}}`)
		}},
		{name: "500", status: 500, kind: engine.KindBadGateway, handle: legtest.JSON(500, `{"error":{"message":"MISS-BODY"}}`)},
		{name: "400", status: 400, kind: engine.KindUpstreamRejected, handle: legtest.JSON(400, `{"error":{"message":"bad thing"}}`)},
		{name: "transport", base: deadURL, kind: engine.KindBadGateway},
		// Issue 10: a 412 or an error whose body stalls after the headers
		// still routes at once: idle_timeout bounds the bodies celflow reads.
		{name: "412 body stalls", status: 412, kind: engine.KindUpstreamRejected, params: `{"idle_timeout":"30ms"}`, handle: stallAfter(412)},
		{name: "500 body stalls", status: 500, kind: engine.KindBadGateway, params: `{"body_timeout":"30ms"}`, handle: stallAfter(500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.base
			if base == "" {
				base = legtest.NewWorker(t, tc.handle).URL
			}
			n := newNode(t, legtest.Gateway(t, base), cmp.Or(tc.params, `{}`))
			run, rec := legtest.Run(t, engine.RouteChat, `{}`, nil)
			res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
			e := engine.AsError(res.Err)
			if e == nil || e.Kind != tc.kind || res.HTTPStatus != tc.status || res.Responded || run.Answered() {
				t.Fatalf("%+v (%v)", res, e)
			}
			if tc.kind == engine.KindUpstreamRejected && e.HTTPStatus() != tc.status {
				t.Fatalf("client status %d", e.HTTPStatus())
			}
			if tc.header != "" && res.Header.Get("X-Hint") != tc.header {
				t.Fatalf("412 headers not kept: %v", res.Header)
			}
			if rec.Body.Len() != 0 || strings.Contains(e.ClientMessage("r"), "MISS-BODY") {
				t.Fatal("upstream body leaked")
			}
			if tc.status == 400 && !strings.Contains(e.ClientMessage("r"), "bad thing") {
				t.Fatalf("message %q", e.ClientMessage("r"))
			}
		})
	}
}

// stallAfter answers status with the start of a body, then nothing until
// the caller leaves.
func stallAfter(status int) func(http.ResponseWriter, *http.Request, legtest.Call) {
	return func(w http.ResponseWriter, r *http.Request, _ legtest.Call) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"error":{"message":"MISS-BODY`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// ACCEPTANCE 112, 113, 115
func TestBodies(t *testing.T) {
	gen := `{"token_ids":[1,2,3],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]},"kwargs_data":{"image":["KW"]}},"sampling_params":{"max_tokens":9}}`
	for _, tc := range []struct {
		name     string
		route    engine.Route
		body     string
		tokens   engine.Tokens
		want     string
		wantSame bool
		thr      string
	}{
		{name: "chat threshold added", route: engine.RouteChat, body: `{"messages":[],"cache_hit_threshold":0.1}`, thr: "0.8",
			want: `{"messages":[],"cache_hit_threshold":0.8}`},
		{name: "completions rendered with threshold", route: engine.RouteCompletions, body: `{"prompt":"hello"}`, tokens: engine.Tokens{Known: true, FromRender: true, IDs: []int64{1, 2}}, thr: "0.5",
			want: `{"prompt":[1,2],"cache_hit_threshold":0.5}`},
		{name: "completions rendered", route: engine.RouteCompletions, body: `{"prompt":"hello","max_tokens":3}`, tokens: tokens6,
			want: `{"prompt":[1,9000,9000,9000,17,18],"max_tokens":3}`},
		{name: "completions token prompt", route: engine.RouteCompletions, body: `{"prompt":[4,5]}`,
			tokens: engine.Tokens{Known: true, IDs: []int64{4, 5}}, wantSame: true},
		{name: "generate as sent", route: engine.RouteGenerate, body: gen, tokens: engine.Tokens{Known: true, IDs: []int64{1, 2, 3}}, wantSame: true},
		{name: "chat without render", route: engine.RouteChat, body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`, wantSame: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var thr []byte
			if tc.thr != "" {
				thr = []byte(tc.thr)
			}
			b, e := build(nil, tc.route, []byte(tc.body), tc.tokens, nil, thr)
			if e != nil {
				t.Fatal(e)
			}
			got := b.Bytes()
			want := tc.want
			if tc.wantSame {
				want = tc.body
			}
			if string(got) != want {
				t.Fatalf("\n got %s\nwant %s", got, want)
			}
			if bytes.Contains(got, []byte("kv_transfer_params")) || bytes.Contains(got, []byte(`"uuid"`)) {
				t.Fatal("kv params or uuid on conditional decode")
			}
		})
	}
}

// Direct mode: celflow predicts; a miss makes no call (ACCEPTANCE 57), a
// hit sends the leg to the predicted endpoint.
func TestDirectPrediction(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, `{"ok":1}`))
	c := legtest.Direct(t, upstream.Config{
		Pools:             map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: w.URL}}},
		ShortPromptTokens: 4,
	})
	n := newNode(t, c, `{}`)

	run, rec := legtest.Run(t, engine.RouteChat, `{}`, nil)
	run.State.Tokens = tokens6 // 6 tokens > 4, never recorded: miss
	res := n.Run(run.Ctx, legtest.Exec(run, "cd"))
	if e := engine.AsError(res.Err); res.HTTPStatus != 412 || e == nil || e.Status != 412 || res.Header != nil || len(w.Calls()) != 0 {
		t.Fatalf("miss: %+v calls %d", res, len(w.Calls()))
	}
	if rec.Body.Len() != 0 {
		t.Fatal("miss wrote to the client")
	}

	run, rec = legtest.Run(t, engine.RouteChat, `{}`, nil)
	run.State.Tokens = engine.Tokens{Known: true, IDs: []int64{1, 2}, JSON: []byte(`[1,2]`)}
	res = n.Run(run.Ctx, legtest.Exec(run, "cd"))
	if res.Err != nil || !res.Responded || len(w.Calls()) != 1 || rec.Body.String() != `{"ok":1}` {
		t.Fatalf("hit: %+v", res)
	}

	// T unknown in direct mode: nothing to predict from, so a miss.
	run, _ = legtest.Run(t, engine.RouteChat, `{}`, nil)
	if res = n.Run(run.Ctx, legtest.Exec(run, "cd")); res.HTTPStatus != 412 {
		t.Fatalf("unknown T: %+v", res)
	}
}

// ACCEPTANCE 21, 23
func TestSchema(t *testing.T) {
	legtest.CheckSchema(t, TypeName, schemaJSON,
		[]string{`{}`, `{"ttfb_timeout":"1m30s","stream_idle_timeout":"0"}`, `{"idle_timeout":"5s","body_timeout":"30s"}`},
		[]string{`{"idle_timeout":"5"}`, `{"body_timeout":30}`, `{"ttfb_timeout":"30"}`, `{"ttfb_timeout":"abc"}`, `{"ttfb_timeout":30}`, `{"prefer":true}`})
}
