package prefill

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

func TestBuild(t *testing.T) {
	gw := legtest.Gateway(t, "http://127.0.0.1:1")
	direct := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RolePrefill: {{URL: "http://127.0.0.1:1"}}, upstream.RoleDecode: {{URL: "http://127.0.0.1:2"}}}})
	noPrefill := legtest.Direct(t, upstream.Config{Pools: map[upstream.Role][]upstream.Endpoint{upstream.RoleDecode: {{URL: "http://127.0.0.1:2"}}}})
	for _, tc := range []struct {
		name, params, path, env string
		defaults                engine.Defaults
		up                      *upstream.Client
		ok                      bool
	}{
		{name: "defaults", params: `{}`, ok: true},
		{name: "all known", params: `{"kv_connector":"kv-nixl","ec_connector":"ec-nixl","format":"tokens-in","ttfb_timeout":"5s"}`, ok: true},
		// ACCEPTANCE 28, 160
		{name: "unknown kv", params: `{"kv_connector":"mooncake"}`, path: "/kv_connector"},
		{name: "unknown ec", params: `{"ec_connector":"ec-foo"}`, path: "/ec_connector"},
		{name: "unknown default kv", params: `{}`, defaults: engine.Defaults{KVConnector: "offloading"}, path: ""},
		{name: "bad duration", params: `{"ttfb_timeout":"30"}`, path: "/ttfb_timeout"},
		{name: "unknown field", params: `{"endpoint":"x"}`, path: "/endpoint"},
		{name: "shape without sglang", params: `{"shape":"concurrent"}`, path: "/shape"},
		// ACCEPTANCE 172
		{name: "sglang tokens-in", params: `{"kv_connector":"kv-sglang","format":"tokens-in"}`, path: "/format"},
		{name: "sglang default tokens-in", params: `{"kv_connector":"kv-sglang"}`, defaults: engine.Defaults{TokensIn: true}, path: "/kv_connector"},
		{name: "concurrent against gateway", params: `{"kv_connector":"kv-sglang","shape":"concurrent"}`, up: gw, path: "/shape"},
		{name: "concurrent direct", params: `{"kv_connector":"kv-sglang","shape":"concurrent"}`, up: direct, ok: true},
		{name: "concurrent validate-only", params: `{"kv_connector":"kv-sglang","shape":"concurrent"}`, ok: true},
		// ACCEPTANCE 175
		{name: "port abc", params: `{"kv_connector":"kv-sglang"}`, env: "abc", path: "/kv_connector"},
		{name: "port 0", params: `{"kv_connector":"kv-sglang"}`, env: "0", path: "/kv_connector"},
		{name: "port 65536", params: `{"kv_connector":"kv-sglang"}`, env: "65536", path: "/kv_connector"},
		{name: "port default sglang", params: `{}`, defaults: engine.Defaults{KVConnector: "kv-sglang"}, env: "-1", path: ""},
		{name: "port ignored without sglang", params: `{}`, env: "abc", ok: true},
		// ACCEPTANCE 29
		{name: "no prefill target", params: `{}`, up: noPrefill, path: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SGLANG_BOOTSTRAP_PORT", tc.env)
			n, err := Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: tc.up}, Defaults: tc.defaults}, json.RawMessage(tc.params))
			if tc.ok {
				if err != nil || n == nil {
					t.Fatal(err)
				}
				return
			}
			var pe *engine.ParamError
			if !errors.As(err, &pe) || pe.Path != tc.path {
				t.Fatalf("got %v, want an error at %q", err, tc.path)
			}
		})
	}
}

// ACCEPTANCE 19: with no params and no workflow defaults, prefill uses
// kv-shared-storage, ec-shared-storage, the OpenAI format and a 60s TTFB.
func TestBuildDefaults(t *testing.T) {
	n, err := Build(&engine.BuildContext{}, json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	p := n.(*Prefill)
	if p.kv.Name() != "kv-shared-storage" || p.ec.Name() != "ec-shared-storage" || p.tokensIn || p.ttfb != 60*time.Second {
		t.Fatalf("defaults: kv %s ec %s tokens-in %v ttfb %v", p.kv.Name(), p.ec.Name(), p.tokensIn, p.ttfb)
	}
}

func TestBuildSGLangPortAndWarning(t *testing.T) {
	for env, want := range map[string]int{"": 8998, "9100": 9100, "65535": 65535} {
		t.Setenv("SGLANG_BOOTSTRAP_PORT", env)
		var warned []string
		b := &engine.BuildContext{Warn: func(path, msg string) { warned = append(warned, path) }}
		n, err := Build(b, json.RawMessage(`{"kv_connector":"kv-sglang"}`))
		if err != nil || n.(*Prefill).port != want {
			t.Fatalf("env %q: %v %v", env, n, err)
		}
		if len(warned) != 1 || warned[0] != "/shape" {
			t.Fatalf("sequential shape must warn: %v", warned)
		}
	}
}

func TestContract(t *testing.T) {
	n, _ := Build(&engine.BuildContext{}, json.RawMessage(`{"format":"tokens-in"}`))
	c := n.Contract()
	if c.Role != "prefill" || len(c.Provides) != 1 || c.Provides[0] != handoff.KV || c.SurvivesEnd || c.Responds {
		t.Fatalf("%+v", c)
	}
	if len(c.Needs) != 1 || c.Needs[0].Key != engine.KeyTokens || len(c.Needs[0].Routes) != 1 || c.Needs[0].Routes[0] != engine.RouteChat {
		t.Fatalf("needs %+v", c.Needs)
	}
	n, _ = Build(&engine.BuildContext{}, json.RawMessage(`{}`))
	if c := n.Contract(); len(c.Needs) != 0 {
		t.Fatalf("openai prefill needs nothing: %+v", c)
	}
	n, _ = Build(&engine.BuildContext{}, json.RawMessage(`{"kv_connector":"kv-sglang","shape":"concurrent"}`))
	// The concurrent shape hands decode no KV: it provides only the SGLang
	// session it meets decode in.
	if c := n.Contract(); !c.SurvivesEnd || len(c.Provides) != 1 || c.Provides[0] != leg.SGLangSession {
		t.Fatalf("concurrent %+v", c)
	}
}

// ACCEPTANCE 21, 23, 24
func TestSchema(t *testing.T) {
	legtest.CheckSchema(t, TypeName, schemaJSON,
		[]string{`{}`, `{"ttfb_timeout":"30s","kv_connector":"kv-nixl","ec_connector":"ec-nixl","format":"tokens-in","shape":"concurrent"}`, `{"ttfb_timeout":"0"}`, `{"idle_timeout":"5s","body_timeout":"30s"}`},
		[]string{`{"endpoint":"x"}`, `{"idle_timeout":"5"}`, `{"body_timeout":30}`, `{"ttfb_timeout":"30"}`, `{"ttfb_timeout":30}`, `{"ttfb_timeout":"abc"}`, `{"format":"grpc"}`, `{"shape":"parallel"}`, `{"kv_connector":42}`})
}
