package sim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

type pools struct {
	gw                   *Gateway
	url                  string
	enc, pre, dec1, dec2 *Worker
	encU, preU, d1U, d2U string
}

func startGateway(t *testing.T) pools {
	t.Helper()
	var p pools
	var s *httptest.Server
	p.enc, s = startWorker(t, Config{Name: "e", Roles: []Role{RoleEncode}})
	p.encU = s.URL
	p.pre, s = startWorker(t, Config{Name: "p", Roles: []Role{RolePrefill}})
	p.preU = s.URL
	p.dec1, s = startWorker(t, Config{Name: "d1", Roles: []Role{RoleDecode}})
	p.d1U = s.URL
	p.dec2, s = startWorker(t, Config{Name: "d2", Roles: []Role{RoleDecode}})
	p.d2U = s.URL
	gw, err := NewGateway(GatewayConfig{Encode: []string{p.encU}, Prefill: []string{p.preU}, Decode: []string{p.d1U, p.d2U + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	gs := httptest.NewServer(gw)
	t.Cleanup(gs.Close)
	p.gw, p.url = gw, gs.URL
	return p
}

// The gateway routes by EPP-Profile, round-robins decode (distinct prompts:
// no prefix affinity), and strips nothing: every client header and the body
// reach the worker.
func TestGatewayRouting(t *testing.T) {
	p := startGateway(t)
	body := func(i int) string {
		return `{"prompt":"route me ` + strconv.Itoa(i) + `","max_tokens":1,"x-unknown":1.0}`
	}
	for i, role := range []string{"encode", "prefill", "decode", "decode"} {
		status, _, b := post(t, p.url+"/v1/completions", body(i), "EPP-Profile: "+role, "X-Custom: a", "X-Custom: b",
			"Authorization: Bearer k", "X-Forwarded-For: 10.9.9.9")
		if status != 200 {
			t.Fatalf("%s: %d %s", role, status, b)
		}
	}
	for _, tc := range []struct {
		w    *Worker
		role Role
	}{{p.enc, RoleEncode}, {p.pre, RolePrefill}, {p.dec1, RoleDecode}, {p.dec2, RoleDecode}} {
		recs := tc.w.Records().Since(0).Records
		if len(recs) != 1 {
			t.Fatalf("%s got %d requests", tc.w.Config().Name, len(recs))
		}
		h := recs[0].Headers
		if !strings.Contains(recs[0].Body, `"x-unknown":1.0`) || strings.Join(h.Values("X-Custom"), ",") != "a,b" ||
			h.Get("Authorization") != "Bearer k" || h.Get("X-Forwarded-For") != "10.9.9.9" || recs[0].Role != tc.role {
			t.Errorf("%s: %+v", tc.w.Config().Name, recs[0])
		}
	}
	gr := p.gw.Records().Since(0).Records
	if len(gr) != 4 || gr[0].Upstream != p.encU || gr[2].Upstream == gr[3].Upstream || gr[3].Status != 200 {
		t.Errorf("gateway records: %+v", gr)
	}
	for _, tc := range []struct {
		hdr    string
		status int
	}{{"", 400}, {"EPP-Profile: render", 400}} {
		var hs []string
		if tc.hdr != "" {
			hs = append(hs, tc.hdr)
		}
		if status, _, b := post(t, p.url+"/v1/completions", body(9), hs...); status != tc.status {
			t.Errorf("%q: %d %s", tc.hdr, status, b)
		}
	}
}

// Prefer: if-available on a prefix miss is 412 without contacting a worker;
// after a decode, the same prompt goes to the member that served it.
func TestGatewayConditionalDecode(t *testing.T) {
	p := startGateway(t)
	body := `{"messages":[{"role":"user","content":"cache me"}],"max_tokens":2}`
	status, h, _ := post(t, p.url+"/v1/chat/completions", body, "EPP-Profile: decode", "Prefer: if-available")
	if status != 412 || h.Get("X-Sim-Cache") != "miss" {
		t.Fatalf("miss: %d", status)
	}
	if n := len(p.dec1.Records().Since(0).Records) + len(p.dec2.Records().Since(0).Records); n != 0 {
		t.Fatalf("a worker was contacted on a predicted miss (%d requests)", n)
	}
	if status, _, _ := post(t, p.url+"/v1/chat/completions", body, "EPP-Profile: decode"); status != 200 {
		t.Fatalf("decode: %d", status)
	}
	served := p.gw.Records().Since(0).Records[1].Upstream
	for range 3 {
		status, _, b := post(t, p.url+"/v1/chat/completions", body, "EPP-Profile: decode", "Prefer: if-available")
		if status != 200 {
			t.Fatalf("hit: %d %s", status, b)
		}
	}
	gr := p.gw.Records().Since(0).Records
	for _, r := range gr[2:] {
		if r.Upstream != served || r.Cache != "hit" {
			t.Errorf("hit went to %s (cache %q), want %s", r.Upstream, r.Cache, served)
		}
	}
}

// SSE passes through the gateway unbuffered and decodes with openai-go.
func TestGatewayStreams(t *testing.T) {
	p := startGateway(t)
	c := openai.NewClient(option.WithBaseURL(p.url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0),
		option.WithHeader("EPP-Profile", "decode"))
	s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m", MaxTokens: openai.Int(3),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("through the gateway")}})
	n := 0
	for s.Next() {
		n++
	}
	if err := s.Err(); err != nil || n != 5 {
		t.Errorf("%d chunks, err %v", n, err)
	}
}

// A dead member gives 502 with an OpenAI error; an empty pool gives 503.
func TestGatewayUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	gw, err := NewGateway(GatewayConfig{Decode: []string{dead.URL}})
	if err != nil {
		t.Fatal(err)
	}
	gs := httptest.NewServer(gw)
	defer gs.Close()
	status, _, b := post(t, gs.URL+"/v1/completions", `{"prompt":"x"}`, "EPP-Profile: decode")
	if status != 502 || !strings.Contains(errorMessage(t, b), "gateway: upstream") {
		t.Errorf("dead member: %d %s", status, b)
	}
	status, _, _ = post(t, gs.URL+"/v1/completions", `{"prompt":"x"}`, "EPP-Profile: prefill")
	if status != 503 {
		t.Errorf("empty pool: %d", status)
	}
	if _, err := NewGateway(GatewayConfig{Decode: []string{"ftp://x"}}); err == nil {
		t.Error("a non-http member was accepted")
	}
}

// GatewayConfig.Pools: a leg naming an InferencePool in X-Celflow-Pool goes
// to that pool's members (an HTTPRoute header match); an unknown name is 503.
func TestGatewayNamedPools(t *testing.T) {
	_, d := startWorker(t, Config{Name: "d", Roles: []Role{RoleDecode}})
	_, spare := startWorker(t, Config{Name: "spare", Roles: []Role{RoleDecode}})
	gw, err := NewGateway(GatewayConfig{Decode: []string{d.URL}, Pools: map[string][]string{"decode-spare": {spare.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	gs := httptest.NewServer(gw)
	t.Cleanup(gs.Close)
	body := `{"prompt":"pool me","max_tokens":1}`
	for _, tc := range []struct {
		pool   string
		status int
		to     string
	}{
		{"", 200, d.URL},
		{"decode-spare", 200, spare.URL},
		{"nope", 503, ""},
	} {
		hs := []string{"EPP-Profile: decode"}
		if tc.pool != "" {
			hs = append(hs, "X-Celflow-Pool: "+tc.pool)
		}
		status, _, b := post(t, gs.URL+"/v1/completions", body, hs...)
		if status != tc.status {
			t.Fatalf("pool %q: %d %s", tc.pool, status, b)
		}
		recs := gw.Records().Since(0).Records
		if last := recs[len(recs)-1]; last.Upstream != tc.to {
			t.Fatalf("pool %q went to %q, want %q", tc.pool, last.Upstream, tc.to)
		}
	}
	if _, err := NewGateway(GatewayConfig{Pools: map[string][]string{"x": {"ftp://nope"}}}); err == nil {
		t.Fatal("a bad pool member was accepted")
	}
}
