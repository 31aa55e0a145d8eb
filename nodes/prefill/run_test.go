package prefill

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

func newNode(t *testing.T, c *upstream.Client, params string) *Prefill {
	t.Helper()
	n, err := Build(&engine.BuildContext{Services: engine.Services{engine.ServiceUpstream: c}}, json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	return n.(*Prefill)
}

const nixlReply = `{"id":"p","choices":[{"text":"x"}],"kv_transfer_params":{"do_remote_prefill":false,"do_remote_decode":true,"remote_engine_id":"e-1","remote_block_ids":[[1,2]],"remote_request_id":"rr-1","remote_host":"10.0.0.42","remote_port":5600,"tp_size":1,"block_id":7,"peer_host":"p1"}}`

// ACCEPTANCE 143, 151, 166, 141, 54
func TestNIXLHandoff(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, nixlReply))
	n := newNode(t, legtest.Gateway(t, w.URL), `{"kv_connector":"kv-nixl"}`)
	run, rec := legtest.Run(t, engine.RouteCompletions, `{"prompt":"hi","stream":true}`, http.Header{"X-Request-Id": {"client-id"}})
	res := n.Run(run.Ctx, legtest.Exec(run, "prefill"))
	if res.Err != nil || res.HTTPStatus != 200 || res.Responded || rec.Body.Len() != 0 {
		t.Fatalf("%+v", res)
	}
	c := w.Calls()[0]
	if c.Path != "/v1/completions" || c.Header.Get("Epp-Profile") != "prefill" || c.Header.Get("Content-Type") != "application/json" ||
		strings.Join(c.Header.Values("X-Request-Id"), ",") != "req-1" {
		t.Fatalf("%s %v", c.Path, c.Header)
	}
	if !strings.Contains(string(c.Body), `"request_id":"req-1"`) {
		t.Fatalf("request_id: %s", c.Body)
	}
	want := `{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e-1","remote_block_ids":[[1,2]],"remote_request_id":"rr-1","remote_host":"10.0.0.42","remote_port":5600,"tp_size":1,"block_id":7,"peer_host":"p1"}`
	if kv := handoff.KV.Value(run); !kv.PrefillRan || string(kv.Params) != want {
		t.Fatalf("handoff %+v %s", kv, kv.Params)
	}
}

// ACCEPTANCE 167, 165, 142, 198: 503 → 503 upstream_unavailable (it was 502).
func TestReplies(t *testing.T) {
	for _, tc := range []struct {
		name, kv, reply string
		status          int
		kind            engine.Kind
		code            string
		ok              bool
	}{
		{name: "nixl missing", kv: "kv-nixl", reply: `{"id":"p"}`, status: 200, code: "upstream_protocol_error"},
		{name: "nixl null", kv: "kv-nixl", reply: `{"kv_transfer_params":null}`, status: 200, code: "upstream_protocol_error"},
		{name: "nixl empty", kv: "kv-nixl", reply: `{"kv_transfer_params":{}}`, status: 200, code: "upstream_protocol_error"},
		{name: "nixl string", kv: "kv-nixl", reply: `{"kv_transfer_params":"x"}`, status: 200, code: "upstream_protocol_error"},
		{name: "nixl array", kv: "kv-nixl", reply: `{"kv_transfer_params":[1]}`, status: 200, code: "upstream_protocol_error"},
		{name: "shared malformed ignored", kv: "kv-shared-storage", reply: `{"kv_transfer_params":"garbage"}`, status: 200, ok: true},
		{name: "201 counts", kv: "kv-nixl", reply: nixlReply, status: 201, ok: true},
		{name: "503", kv: "kv-nixl", reply: `{"error":{"message":"down"}}`, status: 503, code: "upstream_unavailable"},
		{name: "500", kv: "kv-nixl", reply: `{"error":{"message":"down"}}`, status: 500, code: "bad_gateway"},
		{name: "422", kv: "kv-nixl", reply: `{"error":{"message":"max_tokens must be positive"}}`, status: 422, code: "upstream_rejected"},
		{name: "200 not json", kv: "kv-shared-storage", reply: `not json`, status: 200, code: "bad_gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := legtest.NewWorker(t, legtest.JSON(tc.status, tc.reply))
			n := newNode(t, legtest.Gateway(t, w.URL), `{"kv_connector":"`+tc.kv+`"}`)
			run, _ := legtest.Run(t, engine.RouteChat, `{"messages":[]}`, nil)
			res := n.Run(run.Ctx, legtest.Exec(run, "prefill"))
			if res.HTTPStatus != tc.status {
				t.Fatalf("status %d", res.HTTPStatus)
			}
			if tc.ok {
				if res.Err != nil || !handoff.KV.Value(run).PrefillRan {
					t.Fatalf("%+v", res)
				}
				if tc.kv == "kv-shared-storage" && string(handoff.KV.Value(run).Params) != `{"do_remote_decode":false,"do_remote_prefill":true}` {
					t.Fatalf("params %s", handoff.KV.Value(run).Params)
				}
				return
			}
			e := engine.AsError(res.Err)
			if e == nil || e.Code() != tc.code || handoff.KV.Value(run).PrefillRan {
				t.Fatalf("got %v (%s)", e, e.Code())
			}
			if tc.status == 503 { // PROTOCOL 12: 503 stays 503, with the default Retry-After
				if e.HTTPStatus() != 503 || e.Type() != "server_error" || e.RetryAfter != engine.DefaultRetryAfter {
					t.Fatalf("503: %d %s retry-after %d", e.HTTPStatus(), e.Type(), e.RetryAfter)
				}
			}
			if tc.status == 422 {
				e.Node = "prefill"
				if m := e.ClientMessage("r"); !strings.Contains(m, "prefill rejected the request: HTTP 422") || e.HTTPStatus() != 422 {
					t.Fatalf("%q", m)
				}
			}
		})
	}
}

// ACCEPTANCE 162: conflicting EC descriptors fail before prefill is sent.
// ACCEPTANCE 164, 137: partial replies carry what was reported; shared storage nothing.
func TestEC(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, `{}`))
	c := legtest.Gateway(t, w.URL)
	run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
	handoff.EC.Set(run, json.RawMessage(`{"h0":{"a":1},"h0":{"a":2}}`))
	res := newNode(t, c, `{"ec_connector":"ec-nixl"}`).Run(run.Ctx, legtest.Exec(run, "prefill"))
	if e := engine.AsError(res.Err); e == nil || e.Code() != "upstream_protocol_error" || len(w.Calls()) != 0 {
		t.Fatalf("%+v calls=%d", res, len(w.Calls()))
	}

	run, _ = legtest.Run(t, engine.RouteChat, `{}`, nil)
	handoff.EC.Set(run, json.RawMessage(`{"h1":{"a":1}}`))
	if res = newNode(t, c, `{"ec_connector":"ec-nixl"}`).Run(run.Ctx, legtest.Exec(run, "prefill")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if b := string(w.Calls()[0].Body); !strings.HasSuffix(b, `"ec_transfer_params":{"h1":{"a":1}}}`) {
		t.Fatalf("body %s", b)
	}
	for _, route := range []engine.Route{engine.RouteChat, engine.RouteCompletions, engine.RouteGenerate} {
		run, _ = legtest.Run(t, route, `{"prompt":"x","token_ids":[1]}`, nil)
		handoff.EC.Set(run, json.RawMessage(`{"h1":{"a":1}}`))
		if res = newNode(t, c, `{"ec_connector":"ec-shared-storage"}`).Run(run.Ctx, legtest.Exec(run, "prefill")); res.Err != nil {
			t.Fatal(res.Err)
		}
		calls := w.Calls()
		if b := string(calls[len(calls)-1].Body); strings.Contains(b, "ec_transfer_params") {
			t.Fatalf("%s: %s", route, b)
		}
	}
}

// ACCEPTANCE 129: tokens-in chat prefill goes to the generate path.
func TestTokensInPath(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, `{"kv_transfer_params":null}`))
	n := newNode(t, legtest.Gateway(t, w.URL), `{"format":"tokens-in"}`)
	run, _ := legtest.Run(t, engine.RouteChat, `{"model":"m","messages":[]}`, nil)
	run.State.Tokens = engine.Tokens{Known: true, IDs: []int64{1, 2}}
	if res := n.Run(run.Ctx, legtest.Exec(run, "prefill")); res.Err != nil {
		t.Fatal(res.Err)
	}
	c := w.Calls()[0]
	if c.Path != "/inference/v1/generate" || c.Header.Get("Epp-Profile") != "prefill" {
		t.Fatalf("%s", c.Path)
	}
	// Completions stay on their own path with tokens-in (ACCEPTANCE 55).
	run, _ = legtest.Run(t, engine.RouteCompletions, `{"prompt":"x"}`, nil)
	if res := n.Run(run.Ctx, legtest.Exec(run, "prefill")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if p := w.Calls()[1].Path; p != "/v1/completions" {
		t.Fatalf("completions went to %s", p)
	}
}

// ACCEPTANCE 173, 174: tokens-in chat with one or two images, for every
// combination of KV and EC connector.
func TestTokensInConnectorMatrix(t *testing.T) {
	w := legtest.NewWorker(t, legtest.JSON(200, nixlReply))
	c := legtest.Gateway(t, w.URL)
	recorded := ecNIXLRecord(t, `{"h0":{"peer_port":1}}`, `{"h1":{"peer_port":2}}`)
	for _, kvName := range []string{"kv-nixl", "kv-shared-storage"} {
		for _, ecName := range []string{"ec-nixl", "ec-shared-storage"} {
			n := newNode(t, c, `{"format":"tokens-in","kv_connector":"`+kvName+`","ec_connector":"`+ecName+`"}`)
			run, _ := legtest.Run(t, engine.RouteChat, twoImages, nil)
			run.State.Tokens = engine.Tokens{Known: true, IDs: []int64{1, 9, 9, 9, 9, 9, 9, 5}}
			run.State.Media = media(twoImages, `"KW0"`, `"KW1"`)
			handoff.EC.Set(run, recorded)
			if res := n.Run(run.Ctx, legtest.Exec(run, "prefill")); res.Err != nil {
				t.Fatalf("%s/%s: %v", kvName, ecName, res.Err)
			}
			calls := w.Calls()
			var body struct {
				RequestID string  `json:"request_id"`
				TokenIDs  []int64 `json:"token_ids"`
				Features  struct {
					Hashes map[string][]string `json:"mm_hashes"`
					Kwargs map[string][]string `json:"kwargs_data"`
				} `json:"features"`
				SP struct {
					MaxTokens int `json:"max_tokens"`
					Extra     struct {
						KV map[string]any             `json:"kv_transfer_params"`
						EC map[string]json.RawMessage `json:"ec_transfer_params"`
					} `json:"extra_args"`
				} `json:"sampling_params"`
				KV *json.RawMessage `json:"kv_transfer_params"`
			}
			if err := json.Unmarshal(calls[len(calls)-1].Body, &body); err != nil {
				t.Fatal(err)
			}
			if body.RequestID != "req-1" || len(body.TokenIDs) != 8 || len(body.Features.Hashes["image"]) != 2 ||
				len(body.Features.Kwargs["image"]) != 2 || body.SP.MaxTokens != 1 || body.SP.Extra.KV["do_remote_decode"] != true || body.KV != nil {
				t.Fatalf("%s/%s: %s", kvName, ecName, calls[len(calls)-1].Body)
			}
			if wantEC := map[bool]int{true: 2, false: 0}[ecName == "ec-nixl"]; len(body.SP.Extra.EC) != wantEC {
				t.Fatalf("%s/%s: ec %v", kvName, ecName, body.SP.Extra.EC)
			}
		}
	}
}

func ecNIXLRecord(t *testing.T, replies ...string) json.RawMessage {
	t.Helper()
	conn, _ := ec.Lookup(ec.NIXL)
	var ps []ec.Params
	for _, r := range replies {
		var p ec.Params
		if err := json.Unmarshal([]byte(r), &p); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return conn.Merge(ps)
}
