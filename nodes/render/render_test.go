package render

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// fakeRender is a render service answering a scripted reply and recording
// the last call.
type fakeRender struct {
	*httptest.Server
	calls  atomic.Int32
	method string
	path   string
	header http.Header
	body   []byte
	status int
	reply  string
}

func newFakeRender(t *testing.T, status int, reply string) *fakeRender {
	f := &fakeRender{status: status, reply: reply}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		f.method, f.path, f.header = r.Method, r.URL.Path, r.Header.Clone()
		f.body, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, f.reply)
	}))
	t.Cleanup(f.Close)
	return f
}

func client(t testing.TB) *upstream.Client {
	c, err := upstream.New(upstream.Config{Gateway: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func node(t testing.TB, address, extra string) *Node {
	t.Helper()
	nt, ok := engine.LookupType(TypeName)
	if !ok {
		t.Fatal("render not registered")
	}
	n, err := nt.Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: client(t)}}, json.RawMessage(`{"address":"`+address+`"`+extra+`}`))
	if err != nil {
		t.Fatal(err)
	}
	return n.(*Node)
}

// runNode runs n for a request on route with body; prep may seed the state
// (fetch-media's items, the front's generate parse).
func runNode(n *Node, route engine.Route, body string, prep func(*engine.State)) (engine.Result, *engine.State) {
	h := http.Header{}
	h.Add("X-Custom", "a")
	h.Add("X-Custom", "b")
	h.Set("Authorization", "Bearer k")
	h.Set("Epp-Profile", "prefill")
	h.Set("X-Request-Id", "client-id")
	req := &engine.Request{ID: "req-7", Route: route, Header: h, Body: []byte(body)}
	r := engine.NewRun(context.Background(), req, httptest.NewRecorder())
	if prep != nil {
		prep(&r.State)
	}
	res := n.Run(context.Background(), &engine.Exec{Run: r, NodeID: "render", Index: -1, Attempt: 1})
	return res, &r.State
}

func errOf(t *testing.T, res engine.Result, kind engine.Kind) *engine.Error {
	t.Helper()
	if res.Err == nil {
		t.Fatalf("succeeded, want %v", kind)
	}
	e := engine.AsError(res.Err)
	if e.Kind != kind {
		t.Fatalf("kind %v (%v), want %v", e.Kind, e, kind)
	}
	return e
}

const twoImages = `{"model":"qwen-vl","seed":12345678901234567890,"messages":[{"role":"user","content":[` +
	`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"and"},` +
	`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}],"temperature":1.0}`

const twoImagesReply = `{"request_id":"x","token_ids":[1,9000,9000,17,9000,9000,9000,18,2],"features":{` +
	`"mm_hashes":{"image":["h0","h1"]},"mm_placeholders":{"image":[{"offset":1,"length":2},{"offset":4,"length":3}]},` +
	`"kwargs_data":{"image":["KW0",null]}},"sampling_params":{},"kv_transfer_params":null}`

// ACCEPTANCE 85, 86: the chat leg and the reading of its answer.
func TestRenderChat(t *testing.T) {
	f := newFakeRender(t, 200, twoImagesReply)
	n := node(t, f.URL+"/", "")
	for _, withFetch := range []bool{true, false} {
		t.Run(fmt.Sprint("fetch-media ran=", withFetch), func(t *testing.T) {
			res, st := runNode(n, engine.RouteChat, twoImages, func(s *engine.State) {
				if withFetch {
					parts, _ := mm.ScanParts(s.Body, nil)
					s.Media = mm.MediaItems(parts)
					for i := range s.Media {
						s.Media[i].Type, s.Media[i].Size = "image/png", 8
					}
				}
			})
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if f.method != "POST" || f.path != ChatPath {
				t.Errorf("%s %s", f.method, f.path)
			}
			if string(f.body) != twoImages {
				t.Errorf("body not byte-faithful:\n%s", f.body)
			}
			h := f.header
			if h.Get("Content-Type") != "application/json" || h.Get("Epp-Profile") != "" ||
				fmt.Sprint(h.Values("X-Request-Id")) != "[req-7]" || fmt.Sprint(h.Values("X-Custom")) != "[a b]" || h.Get("Authorization") != "Bearer k" {
				t.Errorf("headers %v", h)
			}
			if !st.Tokens.Known || !st.Tokens.FromRender || len(st.Tokens.IDs) != 9 || st.Tokens.IDs[0] != 1 ||
				string(st.Tokens.JSON) != `[1,9000,9000,17,9000,9000,9000,18,2]` {
				t.Errorf("tokens %+v", st.Tokens)
			}
			want := []struct {
				h    string
				o, l int
				kw   string
			}{{"h0", 1, 2, `"KW0"`}, {"h1", 4, 3, "null"}}
			if len(st.Media) != 2 {
				t.Fatalf("items %+v", st.Media)
			}
			for i, w := range want {
				it := st.Media[i]
				if it.Hash != w.h || it.Offset != w.o || it.Length != w.l || string(it.Kwargs) != w.kw || !it.HasFeatures {
					t.Errorf("item %d %+v", i, it)
				}
				if withFetch && it.Type != "image/png" {
					t.Errorf("item %d lost its type", i)
				}
				if o := twoImages[it.PartStart:it.PartEnd]; !strings.HasPrefix(o, `{"type":"image_url"`) {
					t.Errorf("item %d offsets %q", i, o)
				}
			}
			if res.Attrs["celflow.upstream.url"] != f.URL+ChatPath || res.HTTPStatus != 200 {
				t.Errorf("attrs %v status %d", res.Attrs, res.HTTPStatus)
			}
		})
	}
}

// ACCEPTANCE 87, 96, 97, 98
func TestRenderChatAnswers(t *testing.T) {
	text := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	imageVideo := `{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"data:video/mp4;base64,AAAA"}},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`
	cases := []struct {
		name, body, reply string
		status            int
		kind              engine.Kind // 0: success
		check             func(*testing.T, *engine.State)
	}{
		{"text-only chat is rendered", text, `{"token_ids":[1,5,6]}`, 200, 0, func(t *testing.T, s *engine.State) {
			if len(s.Tokens.IDs) != 3 || len(s.Media) != 0 {
				t.Errorf("state %+v", s)
			}
		}},
		{"text-only with a hash", text, `{"token_ids":[1,5],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]}}}`, 200, engine.KindUpstreamProtocol, nil},
		{"201 is success", text, `{"token_ids":[1]}`, 201, 0, nil},
		{"204 is unparseable", text, ``, 204, engine.KindBadGateway, nil},
		{"non-JSON 200", text, `<html>`, 200, engine.KindBadGateway, nil},
		{"image and video by modality", imageVideo, `{"token_ids":[1,7,7,9,9,9],"features":{"mm_hashes":{"image":["i"],"video":["v"]},` +
			`"mm_placeholders":{"video":[{"offset":1,"length":2}],"image":[{"offset":3,"length":3}]},"kwargs_data":{"image":["I"],"video":["V"]}}}`, 200, 0,
			func(t *testing.T, s *engine.State) {
				v, i := s.Media[0], s.Media[1]
				if v.Modality != "video" || v.Hash != "v" || v.Offset != 1 || string(v.Kwargs) != `"V"` ||
					i.Modality != "image" || i.Hash != "i" || i.Offset != 3 || string(i.Kwargs) != `"I"` {
					t.Errorf("items %+v", s.Media)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeRender(t, c.status, c.reply)
			res, st := runNode(node(t, f.URL, ""), engine.RouteChat, c.body, nil)
			if f.calls.Load() != 1 {
				t.Fatalf("%d render calls", f.calls.Load())
			}
			if c.kind != 0 {
				errOf(t, res, c.kind)
				if st.Tokens.Known {
					t.Error("tokens published after a failure")
				}
				return
			}
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if c.check != nil {
				c.check(t, st)
			}
		})
	}
}

// ACCEPTANCE 95: upstream 4xx and 5xx.
func TestRenderRejects(t *testing.T) {
	body := `{"model":"m","messages":[]}`
	for _, status := range []int{400, 422} {
		f := newFakeRender(t, status, `{"error":{"message":"prompt too long","type":"BadRequestError"},"marker":"SECRET-BODY"}`)
		res, _ := runNode(node(t, f.URL, ""), engine.RouteChat, body, nil)
		e := errOf(t, res, engine.KindUpstreamRejected)
		e.Node = "render"
		msg := e.ClientMessage("req-7")
		if e.HTTPStatus() != status || !strings.Contains(msg, fmt.Sprintf("render rejected the request: HTTP %d: prompt too long", status)) || strings.Contains(msg, "SECRET") {
			t.Errorf("%d: %d %q", status, e.HTTPStatus(), msg)
		}
	}
	f := newFakeRender(t, 500, `SECRET-BODY`)
	res, _ := runNode(node(t, f.URL, ""), engine.RouteChat, body, nil)
	e := errOf(t, res, engine.KindBadGateway)
	if e.HTTPStatus() != 502 || strings.Contains(e.ClientMessage("r"), "SECRET") {
		t.Errorf("500: %v", e)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	res, _ = runNode(node(t, "http://"+dead, ""), engine.RouteChat, body, nil)
	if e := errOf(t, res, engine.KindBadGateway); !strings.Contains(e.Msg, "upstream unreachable") {
		t.Errorf("transport: %v", e)
	}
}

// ACCEPTANCE 88–92: completions prompt shapes.
func TestRenderCompletions(t *testing.T) {
	f := newFakeRender(t, 200, `[{"token_ids":[1,40,41],"features":null}]`)
	n := node(t, f.URL, "")
	res, st := runNode(n, engine.RouteCompletions, `{"model":"m","prompt":[7, 8,9]}`, nil)
	if res.Err != nil || f.calls.Load() != 0 || string(st.Tokens.JSON) != `[7, 8,9]` || st.Tokens.FromRender || !st.Tokens.Known {
		t.Fatalf("token prompt: %v calls %d tokens %+v", res.Err, f.calls.Load(), st.Tokens)
	}
	body := `{"model":"m","prompt":"hello there","temperature":0.3}`
	res, st = runNode(n, engine.RouteCompletions, body, nil)
	if res.Err != nil || f.path != CompletionsPath || string(f.body) != body || !st.Tokens.FromRender || string(st.Tokens.JSON) != `[1,40,41]` {
		t.Fatalf("string prompt: %v %s %+v", res.Err, f.path, st.Tokens)
	}
	for _, reply := range []string{`[]`, `[{"token_ids":[1]},{"token_ids":[2]}]`} {
		f.reply = reply
		res, _ = runNode(n, engine.RouteCompletions, body, nil)
		errOf(t, res, engine.KindUpstreamProtocol)
	}
	f.calls.Store(0)
	for _, b := range []string{`{"prompt":["a"]}`, `{"prompt":[[1]]}`, `{"prompt":3}`, `{"prompt":{}}`, `{"model":"m"}`,
		`{"prompt":[1,-1]}`, `{"prompt":[1.5]}`, `{"prompt":[1,"x"]}`, `{"prompt":[]}`} {
		res, _ = runNode(n, engine.RouteCompletions, b, nil)
		errOf(t, res, engine.KindInvalidRequest)
	}
	if f.calls.Load() != 0 {
		t.Fatal("render called for a rejected prompt")
	}
}

// ACCEPTANCE 93, 94: limits on every path, both numbers in the message.
func TestRenderLimits(t *testing.T) {
	ten := `[1,2,3,4,5,6,7,8,9,10]`
	f := newFakeRender(t, 200, `{"token_ids":`+ten+`}`)
	n := node(t, f.URL, `,"max_total_tokens":5`)
	gen := func(s *engine.State) {
		t, items, _ := mm.ParseGenerate(s.Body, nil)
		s.Tokens, s.Media = t, items
	}
	paths := []struct {
		name  string
		route engine.Route
		body  string
		prep  func(*engine.State)
	}{
		{"chat", engine.RouteChat, `{"messages":[]}`, nil},
		{"string prompt", engine.RouteCompletions, `{"prompt":"x"}`, nil},
		{"token prompt", engine.RouteCompletions, `{"prompt":` + ten + `}`, nil},
		{"generate", engine.RouteGenerate, `{"token_ids":` + ten + `}`, gen},
	}
	for _, p := range paths {
		f.reply = `{"token_ids":` + ten + `}`
		if p.route == engine.RouteCompletions {
			f.reply = `[{"token_ids":` + ten + `}]`
		}
		res, st := runNode(n, p.route, p.body, p.prep)
		e := errOf(t, res, engine.KindInvalidRequest)
		for _, s := range []string{"too many total tokens", "got 10", "max 5"} {
			if !strings.Contains(e.Msg, s) {
				t.Errorf("%s: %q lacks %q", p.name, e.Msg, s)
			}
		}
		if p.route != engine.RouteGenerate && st.Tokens.Known {
			t.Errorf("%s: tokens published over the limit", p.name)
		}
	}
	calls := f.calls.Load()
	ph := node(t, f.URL, `,"max_total_placeholder_tokens":5`)
	for sum, ok := range map[string]bool{`[{"offset":1,"length":3},{"offset":5,"length":4}]`: false, `[{"offset":1,"length":2},{"offset":5,"length":3}]`: true} {
		body := `{"token_ids":` + ten + `,"features":{"mm_hashes":{"image":["a","b"]},"mm_placeholders":{"image":` + sum + `}}}`
		res, _ := runNode(ph, engine.RouteGenerate, body, gen)
		if ok != (res.Err == nil) {
			t.Errorf("%s: %v", sum, res.Err)
		}
		if !ok {
			if e := errOf(t, res, engine.KindInvalidRequest); !strings.Contains(e.Msg, "got 7") || !strings.Contains(e.Msg, "max 5") {
				t.Errorf("message %q", e.Msg)
			}
		}
	}
	if f.calls.Load() != calls {
		t.Error("generate called render")
	}
}

// ACCEPTANCE 29 and param checks; ACCEPTANCE 25: a negative limit fails,
// 0 (no limit) loads.
func TestRenderBuild(t *testing.T) {
	nt, _ := engine.LookupType(TypeName)
	bad := map[string]string{
		`{}`:                                    "address is required",
		`{"address":""}`:                        "address is required",
		`{"address":"render:8100"}`:             "invalid URL",
		`{"address":"http://r","endpoint":"x"}`: "unknown field",
		`{"address":"http://r","max_total_tokens":-1}`:              "at least 0",
		`{"address":"http://r","max_total_placeholder_tokens":-1}`:  "at least 0",
		`{"address":"http://r","max_total_placeholder_tokens":4.5}`: "integer",
		`{"address":"http://r","max_total_tokens":"5"}`:             "",
		`{"address":"http://r","ttfb_timeout":"30"}`:                "duration",
	}
	// Serving builds (an upstream client is given) check the address; a
	// gateway-only upstream has no render default.
	gw, err := upstream.New(upstream.Config{Gateway: "http://gw:80"})
	if err != nil {
		t.Fatal(err)
	}
	for raw, msg := range bad {
		_, err := nt.Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: gw}}, json.RawMessage(raw))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v", raw, err)
		}
		var pe *engine.ParamError
		var pes engine.ParamErrors
		if !errors.As(err, &pe) && !errors.As(err, &pes) {
			t.Errorf("%s: %T is not a ParamError", raw, err)
		}
	}
	if _, err := nt.Build(&engine.BuildContext{}, json.RawMessage(`{"address":"http://r","max_total_tokens":0,"max_total_placeholder_tokens":0}`)); err != nil {
		t.Fatalf("limits of 0 (no limit): %v", err)
	}
	n, err := nt.Build(&engine.BuildContext{}, json.RawMessage(`{"address":"http://r:8100","max_total_tokens":5.0}`))
	if err != nil {
		t.Fatal(err)
	}
	c := n.Contract()
	if len(c.Provides) != 2 || c.Provides[0] != engine.KeyTokens || c.Provides[1] != engine.KeyFeatures || c.Role != "" || c.Responds {
		t.Errorf("contract %+v", c)
	}
	if n.(*Node).cfg.ttfb.String() != "30s" || n.(*Node).cfg.maxTotal != 5 {
		t.Errorf("cfg %+v", n.(*Node).cfg)
	}
	// upstream.render is the default address; params.address overrides it.
	withRender, err := upstream.New(upstream.Config{Gateway: "http://gw:80", Render: "http://render:8100/"})
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]string{`{}`: "http://render:8100", `{"address":"http://own:1"}`: "http://own:1"} {
		n, err := nt.Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: withRender}}, json.RawMessage(raw))
		if err != nil || n.(*Node).cfg.address != want {
			t.Errorf("%s: address %v, %v; want %s", raw, n, err, want)
		}
	}
	// Validate-only builds (no upstream) leave a missing address to the serve config.
	if _, err := nt.Build(&engine.BuildContext{}, json.RawMessage(`{}`)); err != nil {
		t.Errorf("validate-only build: %v", err)
	}
}
