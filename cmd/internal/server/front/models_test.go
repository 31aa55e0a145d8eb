package front

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/celflow/celflow/cmd/internal/sim"
	"github.com/celflow/celflow/connectors/upstream"
)

// worker is a real HTTP server on 127.0.0.1 answering GET /v1/models with
// body (a fake: the test asserts what celflow makes of exact bytes); it
// counts the calls and records EPP-Profile.
type worker struct {
	url     string
	calls   atomic.Int32
	profile atomic.Value
}

func newWorker(t *testing.T, status int, body string) *worker {
	t.Helper()
	w := &worker{}
	ln := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.calls.Add(1)
		w.profile.Store(r.Header.Get("EPP-Profile"))
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			rw.WriteHeader(http.StatusNotFound)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(status)
		_, _ = io.WriteString(rw, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	w.url = "http://" + ln.Addr().String()
	return w
}

// downURL is an address nothing listens on.
func downURL(t *testing.T) string {
	ln := listen(t)
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

func vllmList(ids ...string) string {
	var data []string
	for _, id := range ids {
		data = append(data, `{"id":"`+id+`","object":"model","created":1700000000,"owned_by":"vllm","root":"/models/`+id+`","max_model_len":4096,"permission":[{"id":"p"}]}`)
	}
	return `{"object":"list","data":[` + strings.Join(data, ",") + `]}`
}

func modelsFrom(t *testing.T, cfg upstream.Config) ModelSource {
	t.Helper()
	up, err := upstream.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ModelSource{List: up.ListModels}
}

type modelList struct {
	Object string `json:"object"`
	Data   []struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	} `json:"data"`
}

func (h *harness) models(t *testing.T) (*http.Response, []byte, modelList) {
	t.Helper()
	resp, body := h.do(t, "GET", "/v1/models", "", nil)
	var l modelList
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	return resp, body, l
}

func ids(l modelList) string {
	var s []string
	for _, m := range l.Data {
		s = append(s, m.ID)
	}
	return strings.Join(s, ",")
}

// Direct mode: the union of the workers' lists, a worker down tolerated,
// the list cached; all down is 503 models_unavailable.
func TestModelsDirect(t *testing.T) {
	w1 := newWorker(t, 200, vllmList("llama"))
	w2 := newWorker(t, 200, vllmList("qwen", "llama"))
	down := downURL(t)
	h := start(t, nil, nil)
	h.srv.SetModels(modelsFrom(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: w1.url}, {URL: down}},
		upstream.RoleDecode:  {{URL: w2.url}, {URL: w1.url}},
	}}))
	resp, body, l := h.models(t)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if l.Object != "list" || ids(l) != "llama,qwen" {
		t.Fatalf("list %s", body)
	}
	// Exactly OpenAI's four fields: vLLM's root, max_model_len and
	// permission are not relayed.
	var raw struct{ Data []map[string]any }
	_ = json.Unmarshal(body, &raw)
	for _, m := range raw.Data {
		if len(m) != 4 || m["object"] != "model" || m["owned_by"] != "vllm" || m["created"] != float64(1700000000) {
			t.Fatalf("entry %v", m)
		}
	}
	if w1.calls.Load() != 1 || w2.calls.Load() != 1 {
		t.Fatalf("calls %d %d: each endpoint once", w1.calls.Load(), w2.calls.Load())
	}
	if strings.Count(h.logs.String(), "an upstream did not answer") != 1 {
		t.Fatalf("the down worker is not logged once:\n%s", h.logs.String())
	}
	if _, _, l := h.models(t); ids(l) != "llama,qwen" || w1.calls.Load() != 1 {
		t.Fatal("the list was not cached")
	}

	h.srv.SetModels(modelsFrom(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RoleDecode: {{URL: down}, {URL: downURL(t)}}}}))
	resp, body, _ = h.models(t)
	if resp.StatusCode != 503 {
		t.Fatalf("all down: %d %s", resp.StatusCode, body)
	}
	msg, typ, code := errorReply(t, resp, body)
	if typ != "upstream_error" || code != "models_unavailable" || strings.Contains(msg, "127.0.0.1") {
		t.Fatalf("%s %s %q", typ, code, msg)
	}
}

// Gateway mode: the gateway's list, asked as a decode leg, a failed try
// retried once.
func TestModelsGateway(t *testing.T) {
	var n atomic.Int32
	gw := newWorker(t, 200, vllmList("served"))
	flaky := listen(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			rw.WriteHeader(http.StatusBadGateway) // a member down behind the gateway
			return
		}
		r.URL.Scheme, r.URL.Host = "http", strings.TrimPrefix(gw.url, "http://")
		resp, err := http.DefaultTransport.RoundTrip(r.Clone(context.Background()))
		if err != nil {
			rw.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		rw.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(rw, resp.Body)
	})}
	go func() { _ = srv.Serve(flaky) }()
	t.Cleanup(func() { srv.Close() })

	h := start(t, nil, nil)
	h.srv.SetModels(modelsFrom(t, upstream.Config{Gateway: "http://" + flaky.Addr().String()}))
	resp, body, l := h.models(t)
	if resp.StatusCode != 200 || ids(l) != "served" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if p, _ := gw.profile.Load().(string); p != "decode" || n.Load() != 2 {
		t.Fatalf("EPP-Profile %q, tries %d", p, n.Load())
	}
}

// A static list wins; hostile upstream lists are filtered, not relayed.
func TestModelsStaticAndHostile(t *testing.T) {
	h := start(t, nil, nil)
	h.srv.SetModels(ModelSource{Static: []string{"b", "a"}, List: func(context.Context) ([]upstream.Model, []error, error) {
		t.Error("the upstreams were asked although a static list is set")
		return nil, nil, nil
	}})
	if _, body, l := h.models(t); ids(l) != "b,a" || l.Data[0].OwnedBy != "celflow" || l.Data[0].Created == 0 {
		t.Fatalf("static %s", body)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"bad entries dropped", `{"data":[{"id":1},{"id":""},{"id":"a\u0000b"},{"id":"ok","created":"x","owned_by":7},{"nope":1}]}`, "ok"},
		{"not JSON", `<html>`, ""},
		{"no data", `{"object":"list"}`, ""},
		{"huge id", `{"data":[{"id":"` + strings.Repeat("x", 300) + `"}]}`, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorker(t, 200, tc.body)
			h.srv.SetModels(modelsFrom(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: w.url}}}}))
			resp, body, l := h.models(t)
			switch tc.want {
			case "": // the only worker's reply is unusable: nobody answered
				if resp.StatusCode != 503 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
			case "-":
				if resp.StatusCode != 200 || len(l.Data) != 0 || !strings.Contains(string(body), `"data":[]`) {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
			default:
				if ids(l) != tc.want || l.Data[0].OwnedBy != "celflow" || l.Data[0].Created != 0 {
					t.Fatalf("%s", body)
				}
			}
		})
	}
}

// /health is an alias of /healthz: 200 while draining too, when
// /v1/models is refused like every other route.
func TestHealthWhileDraining(t *testing.T) {
	h := start(t, nil, nil)
	h.srv.SetModels(ModelSource{Static: []string{"m"}})
	h.srv.draining.Store(true)
	defer h.srv.draining.Store(false)
	for _, p := range []string{"/health", "/healthz"} {
		if resp, body := h.do(t, "GET", p, "", nil); resp.StatusCode != 200 || string(body) != `{"status":"ok"}` {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	if resp, _ := h.do(t, "GET", "/v1/models", "", nil); resp.StatusCode != 503 {
		t.Fatalf("/v1/models while draining: %d", resp.StatusCode)
	}
}

// Direct mode lists every pool's models, a named pool's included (issue
// 20): real celflow-sim workers, one serving a model only the named pool
// has; gateway mode still asks the gateway alone (TestModelsGateway).
func TestModelsDirectNamedPools(t *testing.T) {
	startSim := func(model string) string {
		u, stop, err := sim.Start([]string{"--listen", "127.0.0.1:0", "--model", model})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop() })
		return u
	}
	base, big, small := startSim("base"), startSim("big-only"), startSim("small-only")
	for _, tc := range []struct {
		name  string
		pools map[upstream.Role][]upstream.Endpoint
		want  string
	}{
		{"roles only", map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: base}}}, "base"},
		{"a named pool", map[upstream.Role][]upstream.Endpoint{
			upstream.RoleDecode: {{URL: base}}, "big": {{URL: big}},
		}, "base,big-only"},
		{"two named pools sharing an endpoint", map[upstream.Role][]upstream.Endpoint{
			upstream.RolePrefill: {{URL: base}}, upstream.RoleDecode: {{URL: base}},
			"big": {{URL: big}, {URL: small}}, "small": {{URL: small}},
		}, "base,big-only,small-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, nil, nil)
			h.srv.SetModels(modelsFrom(t, upstream.Config{Pools: tc.pools}))
			resp, body, l := h.models(t)
			if resp.StatusCode != 200 || ids(l) != tc.want {
				t.Fatalf("%d %s, want %s", resp.StatusCode, body, tc.want)
			}
		})
	}
}
