package encode

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
)

// worker is an encode worker fake: it records every leg and answers per
// hash with a scripted status, reply and delay.
type worker struct {
	*httptest.Server
	mu   sync.Mutex
	legs []call
	// answer returns status, body and delay for a request body.
	answer func(body string) (int, string, time.Duration)
}

type call struct {
	path   string
	header http.Header
	body   string
}

func newWorker(t *testing.T, answer func(string) (int, string, time.Duration)) *worker {
	w := &worker{answer: answer}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.legs = append(w.legs, call{r.URL.Path, r.Header.Clone(), string(b)})
		w.mu.Unlock()
		status, reply, delay := w.answer(string(b))
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(status)
		_, _ = io.WriteString(rw, reply)
	}))
	t.Cleanup(w.Close)
	return w
}

// ecReply answers ec_transfer_params for the hash in the request.
func ecReply(body string) (int, string, time.Duration) {
	var req struct {
		Tokens   struct{ Features json.RawMessage } `json:"tokens"`
		Features json.RawMessage                    `json:"features"`
	}
	_ = json.Unmarshal([]byte(body), &req)
	f := req.Features
	if f == nil {
		f = req.Tokens.Features
	}
	var feats struct {
		MMHashes map[string][]string `json:"mm_hashes"`
	}
	_ = json.Unmarshal(f, &feats)
	h := feats.MMHashes["image"][0]
	return 200, `{"id":"x","choices":[{"text":"a"}],"ec_transfer_params":{"` + h + `":{"peer_host":"10.0.0.1","peer_port":5501,"size_bytes":2359296}}}`, 0
}

// request is a chat with three images, rendered: T = [1, 9000×2, 17, 9001×3, 18, 9002×1].
const clientChat = `{"model":"qwen-vl","max_completion_tokens":100,"min_tokens":3,"stream":true,"temperature":0.2,"messages":[{"role":"user","content":[` +
	`{"type":"text","text":"compare"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO","detail":"low"},"uuid":"client-uuid"},` +
	`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":{"url":"data:image/png;base64,BBBB"}}]}]}`

func state(t testing.TB) (*engine.Request, func(*engine.State)) {
	req := &engine.Request{ID: "req-9", Route: engine.RouteChat, Body: []byte(clientChat),
		Header: http.Header{"Authorization": {"Bearer k"}, "Epp-Profile": {"prefill"}}}
	return req, func(s *engine.State) {
		parts, err := mm.ScanParts(s.Body, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp := `{"token_ids":[1,9000,9000,17,9001,9001,9001,18,9002],"features":{"mm_hashes":{"image":["h0","h1","h2"]},` +
			`"mm_placeholders":{"image":[{"offset":1,"length":2},{"offset":4,"length":3},{"offset":8,"length":1}]},"kwargs_data":{"image":["K0",null,"K2"]}}}`
		tok, items, e := mm.ParseRenderChat([]byte(resp), mm.MediaItems(parts))
		if e != nil {
			t.Fatal(e)
		}
		s.Tokens, s.Media = tok, items
	}
}

func buildNode(t testing.TB, gateway, extra string, d engine.Defaults) *Node {
	t.Helper()
	c, err := upstream.New(upstream.Config{Gateway: gateway})
	if err != nil {
		t.Fatal(err)
	}
	nt, _ := engine.LookupType(TypeName)
	n, err := nt.Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: c}, Defaults: d}, json.RawMessage(`{`+extra+`}`))
	if err != nil {
		t.Fatal(err)
	}
	return n.(*Node)
}

// fanOut plays the engine's part: one Run per item (in parallel), then Merge.
func fanOut(n *Node, req *engine.Request, prep func(*engine.State)) ([]engine.Result, engine.Result, *engine.Run) {
	r := engine.NewRun(context.Background(), req, httptest.NewRecorder())
	prep(&r.State)
	res := make([]engine.Result, len(r.State.Media))
	var wg sync.WaitGroup
	for k := range r.State.Media {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := &engine.Exec{Run: r, NodeID: "encode", Index: k, Item: r.State.Media[k], Attempt: 1}
			res[k] = n.Run(context.Background(), x)
		}()
	}
	wg.Wait()
	merged := n.Merge(context.Background(), &engine.Exec{Run: r, NodeID: "encode", Index: -1, Attempt: 1}, res)
	return res, merged, r
}

func (w *worker) sorted() []call {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]call(nil), w.legs...)
	sort.Slice(out, func(i, j int) bool { return out[i].body < out[j].body })
	return out
}

// ACCEPTANCE 116, 119, 120, 124, 128: chat-format legs.
func TestEncodeChat(t *testing.T) {
	w := newWorker(t, ecReply)
	n := buildNode(t, w.URL, ``, engine.Defaults{ECConnector: "ec-nixl"})
	req, prep := state(t)
	res, merged, r := fanOut(n, req, prep)
	for k, x := range res {
		if x.Err != nil || x.HTTPStatus != 200 {
			t.Fatalf("item %d: %v", k, x.Err)
		}
	}
	if merged.Err != nil {
		t.Fatal(merged.Err)
	}
	want := []string{
		`{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO","detail":"low"},"uuid":"h0"}]}],` +
			`"tokens":{"token_ids":[1,9000,9000],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]}}},"max_tokens":1,"stream":false}`,
		`{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"},"uuid":"h1"}]}],` +
			`"tokens":{"token_ids":[1,9001,9001,9001],"features":{"mm_hashes":{"image":["h1"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}},"max_tokens":1,"stream":false}`,
		`{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,BBBB"},"uuid":"h2"}]}],` +
			`"tokens":{"token_ids":[1,9002],"features":{"mm_hashes":{"image":["h2"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]}}},"max_tokens":1,"stream":false}`,
	}
	legs := w.sorted()
	sort.Strings(want)
	if len(legs) != 3 {
		t.Fatalf("%d legs", len(legs))
	}
	for i, l := range legs {
		if l.body != want[i] {
			t.Errorf("leg %d body\n got %s\nwant %s", i, l.body, want[i])
		}
		if l.path != "/v1/chat/completions" || l.header.Get("Epp-Profile") != "encode" || l.header.Get("X-Request-Id") != "req-9" ||
			l.header.Get("Content-Type") != "application/json" || l.header.Get("Authorization") != "Bearer k" {
			t.Errorf("leg %d: %s %v", i, l.path, l.header)
		}
		// ACCEPTANCE 128 (issue 10): the client's uuid never; the item's hash as uuid.
		if strings.Contains(l.body, "client-uuid") || strings.Count(l.body, `"uuid":`) != 1 {
			t.Errorf("leg %d: uuid %s", i, l.body)
		}
		for _, banned := range []string{"kwargs", "max_completion_tokens", "min_tokens", "temperature", `"text"`, "request_id"} {
			if strings.Contains(l.body, banned) {
				t.Errorf("leg %d carries %s", i, banned)
			}
		}
	}
	var ecm map[string]json.RawMessage
	if err := json.Unmarshal(handoff.EC.Value(r), &ecm); err != nil || len(ecm) != 3 || ecm["h0"] == nil || ecm["h1"] == nil || ecm["h2"] == nil {
		t.Fatalf("EC %s", handoff.EC.Value(r))
	}
}

// ACCEPTANCE 116, 125: generate-format legs (tokens-in).
func TestEncodeGenerate(t *testing.T) {
	w := newWorker(t, ecReply)
	n := buildNode(t, w.URL, `"format":"tokens-in","ec_connector":"ec-nixl"`, engine.Defaults{})
	req, prep := state(t)
	res, merged, r := fanOut(n, req, prep)
	if res[0].Err != nil || merged.Err != nil {
		t.Fatal(res[0].Err, merged.Err)
	}
	want := []string{
		`{"model":"qwen-vl","token_ids":[1,9000,9000],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":["K0"]}},"sampling_params":{"max_tokens":1},"stream":false}`,
		`{"model":"qwen-vl","token_ids":[1,9001,9001,9001],"features":{"mm_hashes":{"image":["h1"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]},"kwargs_data":{"image":[null]}},"sampling_params":{"max_tokens":1},"stream":false}`,
		`{"model":"qwen-vl","token_ids":[1,9002],"features":{"mm_hashes":{"image":["h2"]},"mm_placeholders":{"image":[{"offset":1,"length":1}]},"kwargs_data":{"image":["K2"]}},"sampling_params":{"max_tokens":1},"stream":false}`,
	}
	sort.Strings(want)
	for i, l := range w.sorted() {
		if l.path != "/inference/v1/generate" || l.body != want[i] || l.header.Get("Epp-Profile") != "encode" {
			t.Errorf("leg %d %s\n got %s\nwant %s", i, l.path, l.body, want[i])
		}
	}
	if len(handoff.EC.Value(r)) == 0 {
		t.Error("no EC params")
	}
}

// ACCEPTANCE 117, 123, 128: unusable ec_transfer_params are ignored; a 202 is success.
func TestEncodeIgnoredParams(t *testing.T) {
	for _, v := range []string{`"str"`, `[1]`, `null`, `{}`, ``} {
		reply := `{"id":"x"}`
		if v != "" {
			reply = `{"id":"x","ec_transfer_params":` + v + `}`
		}
		w := newWorker(t, func(string) (int, string, time.Duration) { return 202, reply, 0 })
		n := buildNode(t, w.URL, `"ec_connector":"ec-nixl"`, engine.Defaults{})
		req, prep := state(t)
		res, merged, r := fanOut(n, req, prep)
		for _, x := range res {
			if x.Err != nil || x.HTTPStatus != 202 {
				t.Fatalf("%s: %v", v, x.Err)
			}
		}
		if merged.Err != nil || handoff.EC.Value(r) != nil {
			t.Errorf("%s: EC %s err %v", v, handoff.EC.Value(r), merged.Err)
		}
	}
}

// ACCEPTANCE 118: one failing item fails with 502; 4xx relays its message.
func TestEncodeFailures(t *testing.T) {
	w := newWorker(t, func(body string) (int, string, time.Duration) {
		if strings.Contains(body, `"h1"`) {
			return 500, `SECRET`, 0
		}
		if strings.Contains(body, `"h2"`) {
			return 400, `{"error":{"message":"bad image"}}`, 0
		}
		return ecReply(body)
	})
	n := buildNode(t, w.URL, ``, engine.Defaults{})
	req, prep := state(t)
	res, _, _ := fanOut(n, req, prep)
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	e1 := engine.AsError(res[1].Err)
	if e1 == nil || e1.Kind != engine.KindBadGateway || e1.HTTPStatus() != 502 || strings.Contains(e1.ClientMessage("r"), "SECRET") {
		t.Errorf("500: %v", e1)
	}
	e2 := engine.AsError(res[2].Err)
	if e2 == nil || e2.Kind != engine.KindUpstreamRejected || e2.HTTPStatus() != 400 || e2.UpstreamMsg != "bad image" {
		t.Errorf("400: %v", e2)
	}
}

// ACCEPTANCE 127: replies finishing in reverse order merge in item order.
func TestEncodeMergeOrder(t *testing.T) {
	w := newWorker(t, func(body string) (int, string, time.Duration) {
		status, reply, _ := ecReply(body)
		var d time.Duration
		switch {
		case strings.Contains(body, `"h0"`):
			d = 200 * time.Millisecond
		case strings.Contains(body, `"h1"`):
			d = 100 * time.Millisecond
		}
		return status, reply, d
	})
	n := buildNode(t, w.URL, `"ec_connector":"ec-nixl"`, engine.Defaults{})
	req, prep := state(t)
	_, _, r := fanOut(n, req, prep)
	ec := string(handoff.EC.Value(r))
	i0, i1, i2 := strings.Index(ec, `"h0"`), strings.Index(ec, `"h1"`), strings.Index(ec, `"h2"`)
	if i0 < 0 || !(i0 < i1 && i1 < i2) {
		t.Fatalf("EC not in item order: %s", ec)
	}
	// ec-shared-storage records nothing (ACCEPTANCE 163).
	n = buildNode(t, w.URL, ``, engine.Defaults{})
	_, _, r = fanOut(n, req, prep)
	if handoff.EC.Value(r) != nil {
		t.Errorf("shared storage recorded %s", handoff.EC.Value(r))
	}
}

// A generate client request brings its own features: encode (when a
// workflow runs it) uses the generate format with the client's kwargs.
func TestEncodeGenerateRoute(t *testing.T) {
	w := newWorker(t, ecReply)
	n := buildNode(t, w.URL, ``, engine.Defaults{})
	body := `{"model":"m","token_ids":[1,9000,9000,5],"features":{"mm_hashes":{"image":["hg"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":["KG"]}}}`
	req := &engine.Request{ID: "g", Route: engine.RouteGenerate, Body: []byte(body)}
	res, _, _ := fanOut(n, req, func(s *engine.State) {
		s.Tokens, s.Media, _ = mm.ParseGenerate(s.Body, nil)
	})
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("%v", res)
	}
	want := `{"model":"m","token_ids":[1,9000,9000],"features":{"mm_hashes":{"image":["hg"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":["KG"]}},"sampling_params":{"max_tokens":1},"stream":false}`
	if l := w.sorted(); l[0].path != "/inference/v1/generate" || l[0].body != want {
		t.Errorf("%s %s", l[0].path, l[0].body)
	}
}

func TestEncodeBuild(t *testing.T) {
	nt, ok := engine.LookupType(TypeName)
	if !ok || !nt.FanOut {
		t.Fatal("encode not registered as a fan-out type")
	}
	bad := map[string]string{
		`{"ec_connector":"mooncake"}`: "/ec_connector",
		`{"format":"binary"}`:         "/format",
		`{"ttfb_timeout":"60"}`:       "/ttfb_timeout",
		`{"idle_timeout":"5"}`:        "/idle_timeout",
		`{"body_timeout":"-1s"}`:      "/body_timeout",
		`{"max_parallel":2}`:          "/max_parallel",
	}
	for raw, path := range bad {
		_, err := nt.Build(&engine.BuildContext{}, json.RawMessage(raw))
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v", raw, err)
		}
	}
	if _, err := nt.Build(&engine.BuildContext{Defaults: engine.Defaults{ECConnector: "nope"}}, nil); err == nil {
		t.Error("unknown default connector accepted")
	}
	// ACCEPTANCE 29: an upstream without an encode target is a load error.
	c, _ := upstream.New(upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: "http://127.0.0.1:9"}}}})
	if _, err := nt.Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: c}}, nil); err == nil {
		t.Error("built without an encode target")
	}
	n, err := nt.Build(&engine.BuildContext{}, json.RawMessage(`{"format":"openai"}`))
	if err != nil {
		t.Fatal(err)
	}
	ct := n.Contract()
	if ct.Role != "encode" || len(ct.Needs) != 1 || ct.Needs[0].Key != engine.KeyFeatures || len(ct.Needs[0].Routes) != 0 ||
		len(ct.Provides) != 1 || ct.Provides[0] != handoff.EC || ct.Responds {
		t.Errorf("contract %+v", ct)
	}
	if x := n.(*Node); x.ttfb != 60*time.Second || x.tokensIn || x.ec.Name() != "ec-shared-storage" {
		t.Errorf("defaults %+v", x)
	}
}

// Typeless and input_image parts (vLLM's other media shapes, docs/threat-model.md,
// Media shapes) reach the encoder in the canonical typed object form: a
// bare url string is wrapped as {"url":…}, the part's type is its payload
// member.
func TestEncodeChatOtherShapes(t *testing.T) {
	w := newWorker(t, ecReply)
	n := buildNode(t, w.URL, ``, engine.Defaults{ECConnector: "ec-nixl"})
	req, prep := state(t)
	req.Body = []byte(`{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"text","text":"compare"},` +
		`{"type":"input_image","image_url":"data:image/png;base64,iVBO","detail":"auto"},{"image_url":{"url":"data:image/png;base64,AAAA"}},` +
		`{"image_url":"data:image/png;base64,BBBB","uuid":"u"}]}]}`)
	res, merged, _ := fanOut(n, req, prep)
	for k, x := range res {
		if x.Err != nil {
			t.Fatalf("item %d: %v", k, x.Err)
		}
	}
	if merged.Err != nil {
		t.Fatal(merged.Err)
	}
	want := []string{
		`[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"},"uuid":"h0"}]`,
		`[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"},"uuid":"h1"}]`,
		`[{"type":"image_url","image_url":{"url":"data:image/png;base64,BBBB"},"uuid":"h2"}]`,
	}
	legs := w.sorted()
	if len(legs) != 3 {
		t.Fatalf("%d legs", len(legs))
	}
	for _, wc := range want {
		found := false
		for _, l := range legs {
			found = found || strings.Contains(l.body, `"content":`+wc)
		}
		if !found {
			t.Errorf("no leg carries content %s", wc)
		}
	}
}
