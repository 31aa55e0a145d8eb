package encode_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/conditionaldecode"
	_ "github.com/celflow/celflow/nodes/decode"
	_ "github.com/celflow/celflow/nodes/fetchmedia"
	"github.com/celflow/celflow/nodes/internal/handoff"
	_ "github.com/celflow/celflow/nodes/prefill"
	_ "github.com/celflow/celflow/nodes/render"
)

// legRec is one recorded upstream call.
type legRec struct {
	path string
	hdr  http.Header
	body string
}

type recorder struct {
	mu   sync.Mutex
	legs []legRec
}

func (r *recorder) add(req *http.Request) string {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.legs = append(r.legs, legRec{req.URL.Path, req.Header.Clone(), string(b)})
	r.mu.Unlock()
	return string(b)
}

func (r *recorder) by(profile string, prefer bool) []legRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []legRec
	for _, l := range r.legs {
		if l.hdr.Get("Epp-Profile") == profile && (l.hdr.Get("Prefer") != "") == prefer {
			out = append(out, l)
		}
	}
	return out
}

// epdYAML is the E/P/D workflow of these flow tests, shared with the
// server's cancellation flow test.
var epdYAML = readFile("testdata/epd-flow.yaml")

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// The done-when: two images (one remote from a local server with
// allow_loopback, one inline) run render → conditional decode (412) → two
// encode legs in parallel → prefill → decode; every leg's body is checked.
// ACCEPTANCE 36, 54, 116, 119, 126 (through the real engine).
func TestEPDTwoImages(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde")
	var mediaGets atomic.Int32
	media := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mediaGets.Add(1)
		if r.Header.Get("X-Request-Id") != "" || r.Header.Get("Authorization") != "" {
			t.Errorf("media download carried client headers: %v", r.Header)
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(png)
	}))
	defer media.Close()
	var renderBody atomic.Value
	render := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		renderBody.Store(string(b))
		_, _ = io.WriteString(w, `{"token_ids":[1,9000,9000,9000,17,9000,9000,18],"features":{"mm_hashes":{"image":["h0","h1"]},`+
			`"mm_placeholders":{"image":[{"offset":1,"length":3},{"offset":5,"length":2}]},"kwargs_data":{"image":["K0","K1"]}}}`)
	}))
	defer render.Close()
	rec := &recorder{}
	var inFlight, peak atomic.Int32
	both := make(chan struct{})
	var once sync.Once
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := rec.add(r)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("Prefer") == "if-available":
			w.WriteHeader(412)
		case r.Header.Get("Epp-Profile") == "encode":
			cur := inFlight.Add(1)
			if p := peak.Load(); cur > p {
				peak.CompareAndSwap(p, cur)
			}
			if cur == 2 {
				once.Do(func() { close(both) })
			}
			<-both // the two legs are in flight together
			inFlight.Add(-1)
			h := "h0"
			if strings.Contains(body, `"h1"`) {
				h = "h1"
			}
			_, _ = io.WriteString(w, `{"choices":[],"ec_transfer_params":{"`+h+`":{"peer_host":"10.0.0.1","peer_port":5501}}}`)
		case r.Header.Get("Epp-Profile") == "prefill":
			_, _ = io.WriteString(w, `{"choices":[],"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e-1","remote_block_ids":[[1,2]],"remote_request_id":"rr-1","remote_host":"10.0.0.42","remote_port":5600,"tp_size":1}}`)
		default:
			_, _ = io.WriteString(w, `{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"two images"}}]}`)
		}
	}))
	defer gw.Close()

	up, err := upstream.New(upstream.Config{Gateway: gw.URL})
	if err != nil {
		t.Fatal(err)
	}
	wf, diags := engine.Load("epd.yaml", []byte(strings.Replace(epdYAML, "RENDER", render.URL, 1)), engine.LoadOptions{Upstream: up})
	if len(diags) > 0 || wf == nil {
		t.Fatalf("load: %v", diags)
	}
	inline := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	body := `{"model":"qwen-vl","seed":12345678901234567890,"messages":[{"role":"user","content":[{"type":"text","text":"compare"},` +
		`{"type":"image_url","image_url":{"url":"` + media.URL + `/cat.png"}},{"type":"image_url","image_url":{"url":"` + inline + `"}}]}],"max_tokens":64}`
	req := &engine.Request{ID: "req-epd", Route: engine.RouteChat, Body: []byte(body), Model: "qwen-vl",
		Header: http.Header{"Authorization": {"Bearer k"}}}
	w := httptest.NewRecorder()
	rep := wf.Serve(engine.NewRun(context.Background(), req, w))
	if rep.Err != nil || !rep.Answered {
		t.Fatalf("run: %v (answered %v)", rep.Err, rep.Answered)
	}
	if w.Code != 200 || !strings.Contains(w.Body.String(), "two images") {
		t.Fatalf("reply %d %s", w.Code, w.Body.String())
	}
	if mediaGets.Load() != 1 {
		t.Errorf("%d media GETs", mediaGets.Load())
	}
	rewritten := `{"type":"image_url","image_url":{"url":"` + inline + `"}}`
	rb, _ := renderBody.Load().(string)
	if strings.Count(rb, rewritten) != 2 || !strings.Contains(rb, `"seed":12345678901234567890`) {
		t.Errorf("render body: %.300s", rb)
	}
	cd := rec.by("decode", true)
	if len(cd) != 1 || cd[0].path != "/v1/chat/completions" || !strings.Contains(cd[0].body, `"tokens":{"token_ids":[1,9000,9000,9000,17,9000,9000,18]`) {
		t.Fatalf("conditional decode legs %+v", cd)
	}
	enc := rec.by("encode", false)
	if len(enc) != 2 || peak.Load() != 2 {
		t.Fatalf("%d encode legs, peak %d in flight", len(enc), peak.Load())
	}
	want := map[string]string{
		"h0": `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + inline + `"},"uuid":"h0"}]}],` +
			`"tokens":{"token_ids":[1,9000,9000,9000],"features":{"mm_hashes":{"image":["h0"]},"mm_placeholders":{"image":[{"offset":1,"length":3}]}}},"max_tokens":1,"stream":false}`,
		"h1": `{"model":"qwen-vl","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + inline + `"},"uuid":"h1"}]}],` +
			`"tokens":{"token_ids":[1,9000,9000],"features":{"mm_hashes":{"image":["h1"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]}}},"max_tokens":1,"stream":false}`,
	}
	for _, l := range enc {
		h := "h0"
		if strings.Contains(l.body, `"h1"`) {
			h = "h1"
		}
		if l.path != "/v1/chat/completions" || l.body != want[h] {
			t.Errorf("encode %s leg:\n got %s\nwant %s", h, l.body, want[h])
		}
	}
	pf := rec.by("prefill", false)
	if len(pf) != 1 {
		t.Fatalf("%d prefill legs", len(pf))
	}
	var p struct {
		EC     map[string]json.RawMessage `json:"ec_transfer_params"`
		KV     map[string]json.RawMessage `json:"kv_transfer_params"`
		Tokens struct {
			Features map[string]json.RawMessage `json:"features"`
		} `json:"tokens"`
		MaxTokens int  `json:"max_tokens"`
		Stream    bool `json:"stream"`
	}
	if err := json.Unmarshal([]byte(pf[0].body), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.EC) != 2 || p.EC["h0"] == nil || p.EC["h1"] == nil || string(p.KV["do_remote_decode"]) != "true" || p.MaxTokens != 1 || p.Stream ||
		p.Tokens.Features["kwargs_data"] != nil || !strings.Contains(pf[0].body, `"seed":12345678901234567890`) {
		t.Errorf("prefill body %.600s", pf[0].body)
	}
	dec := rec.by("decode", false)
	if len(dec) != 1 {
		t.Fatalf("%d decode legs", len(dec))
	}
	d := dec[0].body
	if !strings.Contains(d, `"uuid":"h0"`) || !strings.Contains(d, `"uuid":"h1"`) || !strings.Contains(d, `"remote_engine_id":"e-1"`) ||
		strings.Contains(d, "ec_transfer_params") || !strings.Contains(d, `"max_tokens":64`) {
		t.Errorf("decode body %.600s", d)
	}
	for _, l := range rec.legs {
		if l.hdr.Get("X-Request-Id") != "req-epd" || l.hdr.Get("Authorization") != "Bearer k" {
			t.Errorf("%s leg headers %v", l.hdr.Get("Epp-Profile"), l.hdr)
		}
	}
}

// ACCEPTANCE 121, 122: no encode call for a text-only chat or a generate
// request with images; the encode span is skipped and no EC params exist.
func TestEPDNoEncode(t *testing.T) {
	rec := &recorder{}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		switch {
		case r.Header.Get("Prefer") != "":
			w.WriteHeader(412)
		case r.Header.Get("Epp-Profile") == "prefill":
			_, _ = io.WriteString(w, `{"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e"}}`)
		default:
			_, _ = io.WriteString(w, `{"choices":[]}`)
		}
	}))
	defer gw.Close()
	render := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"token_ids":[1,2,3]}`)
	}))
	defer render.Close()
	up, _ := upstream.New(upstream.Config{Gateway: gw.URL})
	wf, diags := engine.Load("epd.yaml", []byte(strings.Replace(epdYAML, "RENDER", render.URL, 1)), engine.LoadOptions{Upstream: up})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	cases := []struct {
		route engine.Route
		body  string
	}{
		{engine.RouteChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{engine.RouteGenerate, `{"model":"m","token_ids":[1,9,9,4],"features":{"mm_hashes":{"image":["g"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":["KG"]}}}`},
	}
	for _, c := range cases {
		rec.legs = nil
		r := engine.NewRun(context.Background(), &engine.Request{ID: "r1", Route: c.route, Body: []byte(c.body)}, httptest.NewRecorder())
		if c.route == engine.RouteGenerate {
			r.State.Tokens, r.State.Media, _ = mm.ParseGenerate(r.State.Body, nil)
		}
		rep := wf.Serve(r)
		if rep.Err != nil {
			t.Fatalf("%v: %v", c.route, rep.Err)
		}
		if n := len(rec.by("encode", false)); n != 0 {
			t.Errorf("%v: %d encode legs", c.route, n)
		}
		for _, o := range rep.Outcomes {
			if o.Node == "encode" && o.Status != engine.StatusSkipped {
				t.Errorf("%v: encode %v (%s)", c.route, o.Status, o.Reason)
			}
		}
		if pf := rec.by("prefill", false); len(pf) != 1 || strings.Contains(pf[0].body, "ec_transfer_params") || handoff.EC.Value(r) != nil {
			t.Errorf("%v: prefill %+v", c.route, pf)
		}
	}
}
