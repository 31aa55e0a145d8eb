package front

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// The body side of the trust boundary (docs/threat-model.md): what a
// client may not send, per route, and what an operator can trust.
func TestGuardFields(t *testing.T) {
	chat, compl, gen := engine.RouteChat, engine.RouteCompletions, engine.RouteGenerate
	all := []engine.Route{chat, compl, gen}
	tests := []struct {
		name   string
		routes []engine.Route
		body   string
		allow  []string
		param  string // refused with this param; "" = admitted
		want   string // the admitted body, when it changes
	}{
		{"kv top level", all, `{"kv_transfer_params":{"remote_host":"evil","remote_port":1}}`, nil, "kv_transfer_params", ""},
		{"kv null is still refused", all, `{"kv_transfer_params":null}`, nil, "kv_transfer_params", ""},
		{"ec top level", all, `{"ec_transfer_params":{}}`, nil, "ec_transfer_params", ""},
		{"kv under extra_args", all, `{"sampling_params":{"max_tokens":5,"extra_args":{"a":1,"kv_transfer_params":{}}}}`, nil, "sampling_params.extra_args.kv_transfer_params", ""},
		{"ec under extra_args", all, `{"sampling_params":{"extra_args":{"ec_transfer_params":{}}}}`, nil, "sampling_params.extra_args.ec_transfer_params", ""},
		{"kv under vllm_xargs", all, `{"vllm_xargs":{"kv_transfer_params":"x"}}`, nil, "vllm_xargs.kv_transfer_params", ""},
		{"escaped key", all, `{"kv_transfer_p\u0061rams":{}}`, nil, "kv_transfer_params", ""},
		{"escaped nested key", all, `{"sampling_params":{"extra_args":{"ec_transfer_p\u0061rams":{}}}}`, nil, "sampling_params.extra_args.ec_transfer_params", ""},
		{"bootstrap host", all, `{"bootstrap_host":"evil"}`, nil, "bootstrap_host", ""},
		{"bootstrap port", all, `{"bootstrap_port":1}`, nil, "bootstrap_port", ""},
		{"bootstrap room", all, `{"bootstrap_room":7}`, nil, "bootstrap_room", ""},
		{"cache hit threshold", all, `{"cache_hit_threshold":0}`, nil, "cache_hit_threshold", ""},
		{"trusted cache hit threshold", all, `{"cache_hit_threshold":0.5}`, []string{"cache_hit_threshold"}, "", ""},
		{"tokens on chat", []engine.Route{chat, compl}, `{"tokens":{"token_ids":[1]}}`, nil, "tokens", ""},
		{"tokens on generate are not celflow's", []engine.Route{gen}, `{"tokens":1,"token_ids":[1]}`, nil, "", ""},
		{"trusted kv", all, `{"kv_transfer_params":{},"sampling_params":{"extra_args":{"kv_transfer_params":{}}}}`, []string{"kv_transfer_params"}, "", ""},
		{"trusting kv is not trusting ec", all, `{"kv_transfer_params":{},"ec_transfer_params":{}}`, []string{"kv_transfer_params"}, "ec_transfer_params", ""},
		{"trusted bootstrap and tokens", []engine.Route{chat}, `{"bootstrap_room":1,"tokens":{}}`, []string{"bootstrap", "tokens"}, "", ""},
		{"lookalikes pass", all, `{"kv_transfer_params_x":1,"sampling_params":{"kv_transfer_params":1,"extra_args":{"x_transfer_params":1}},"extra_args":{"kv_transfer_params":1}}`, nil, "", ""},
		{"non-object sampling_params left to the route", all, `{"sampling_params":"kv_transfer_params"}`, nil, "", ""},
		{"part uuid stripped on chat", []engine.Route{chat},
			`{"messages":[{"role":"user","content":[{"type":"text","text":"uuid"},{"type":"image_url","image_url":{"url":"u","uuid":"inner"},"uuid":"h_victim"},{"uuid":"x","type":"image_embeds"}]}],"m":1}`,
			nil, "", `{"messages":[{"role":"user","content":[{"type":"text","text":"uuid"},{"type":"image_url","image_url":{"url":"u","uuid":"inner"}},{"type":"image_embeds"}]}],"m":1}`},
		{"escaped part uuid stripped", []engine.Route{chat}, `{"messages":[{"content":[{"type":"image_url","\u0075uid":"h"}]}]}`, nil, "", `{"messages":[{"content":[{"type":"image_url"}]}]}`},
		{"trusted part uuid kept", []engine.Route{chat}, `{"messages":[{"content":[{"type":"image_url","uuid":"h"}]}]}`, []string{"media_uuid"}, "", ""},
		{"odd shapes pass", []engine.Route{chat}, `{"messages":[1,{"content":"uuid"},{"content":[2,"uuid"]}]}`, nil, "", ""},
	}
	for _, tt := range tests {
		allow, ok := ParseClientFields(tt.allow)
		if !ok {
			t.Fatalf("%s: bad allow %v", tt.name, tt.allow)
		}
		for _, rt := range tt.routes {
			obj, err := jsonb.Parse([]byte(tt.body))
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			nb, no, e := GuardFields(rt, []byte(tt.body), obj, allow)
			switch {
			case tt.param != "":
				if e == nil || e.Kind != engine.KindReservedField || e.Param != tt.param || e.Code() != "reserved_field" || e.HTTPStatus() != 400 {
					t.Errorf("%s on %s: got %v, want reserved_field at %s", tt.name, rt.Path(), e, tt.param)
				}
			case e != nil:
				t.Errorf("%s on %s: refused: %v", tt.name, rt.Path(), e)
			default:
				want := tt.want
				if want == "" {
					want = tt.body
				}
				if string(nb) != want || string(no.Buf) != want {
					t.Errorf("%s on %s: body\n%s\nwant\n%s", tt.name, rt.Path(), nb, want)
				}
			}
		}
	}
	if _, ok := ParseClientFields([]string{"kv"}); ok {
		t.Error("unknown family accepted")
	}
}

// A body without reserved fields costs no allocation, nested objects
// included (sync.Pool plays no part here, so it holds under -race too).
func TestGuardFieldsNoAlloc(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"sampling_params":{"max_tokens":3,"extra_args":{"a":1}},"vllm_xargs":{"b":2},"max_tokens":5}`)
	obj, err := jsonb.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range engine.Routes {
		n := testing.AllocsPerRun(100, func() {
			if _, _, e := GuardFields(rt, body, obj, 0); e != nil {
				t.Fatal(e)
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocations", rt.Path(), n)
		}
	}
}

// ACCEPTANCE 113 (the client's kv_transfer_params and uuid included):
// through the server, a reserved field is a 400 with its param before any
// node runs, and a stripped uuid never reaches the workflow.
func TestReservedFieldsServed(t *testing.T) {
	runner := &fakeRunner{}
	h := start(t, runner, nil)
	for _, rt := range engine.Routes {
		resp, b := h.do(t, "POST", rt.Path(), `{"token_ids":[1],"sampling_params":{"extra_args":{"kv_transfer_params":{"remote_host":"evil"}}}}`, nil)
		if resp.StatusCode != 400 {
			t.Fatalf("%s: %d %s", rt.Path(), resp.StatusCode, b)
		}
		r := rawReply{status: resp.StatusCode, header: resp.Header, body: b}
		if code, param := r.jsonError(t); code != "reserved_field" || param != "sampling_params.extra_args.kv_transfer_params" {
			t.Errorf("%s: code %q param %q", rt.Path(), code, param)
		}
	}
	if runner.calls() != 0 {
		t.Fatalf("the workflow ran %d times", runner.calls())
	}
	resp, b := h.do(t, "POST", "/v1/chat/completions", `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:,"},"uuid":"victim"}]}]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	run := runner.last()
	if got := string(run.State.Body); got != `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]}` || string(run.Req.Body) != got ||
		run.State.BodyObj == nil || string(run.State.BodyObj.Buf) != got {
		t.Errorf("the run got %s", got)
	}
}

// FuzzGuardFields: GuardFields never panics on a valid body; an admitted
// body is valid JSON equal (as encoding/json reads it) to the input minus
// the uuid of every chat content part object, and nothing else changes.
func FuzzGuardFields(f *testing.F) {
	f.Add(`{"messages":[{"content":[{"type":"image_url","uuid":"v"}]}]}`, uint8(0))
	f.Add(`{"kv_transfer_params":{}}`, uint8(1))
	f.Fuzz(func(t *testing.T, body string, allow uint8) {
		obj, err := jsonb.Parse([]byte(body))
		if err != nil {
			return
		}
		for _, rt := range engine.Routes {
			nb, no, e := GuardFields(rt, []byte(body), obj, ClientFields(allow))
			if e != nil {
				if e.Kind != engine.KindReservedField || e.Param == "" {
					t.Fatalf("%s: unexpected error %v", rt.Path(), e)
				}
				continue
			}
			if no == nil || string(no.Buf) != string(nb) {
				t.Fatalf("%s: index does not match the body", rt.Path())
			}
			in, err1 := decodeNumbers(body)
			out, err2 := decodeNumbers(string(nb))
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %q -> %q: %v %v", rt.Path(), body, nb, err1, err2)
			}
			if rt == engine.RouteChat && !ClientFields(allow).has(FieldMediaUUID) {
				dropPartUUIDs(in)
			}
			if !reflect.DeepEqual(in, out) {
				t.Fatalf("%s: %s became %s", rt.Path(), body, nb)
			}
		}
	})
}

// dropPartUUIDs is the reference: delete "uuid" from every object of
// messages[*].content[*].
func dropPartUUIDs(v any) {
	top, _ := v.(map[string]any)
	msgs, _ := top["messages"].([]any)
	for _, m := range msgs {
		mo, _ := m.(map[string]any)
		parts, _ := mo["content"].([]any)
		for _, p := range parts {
			if po, ok := p.(map[string]any); ok {
				delete(po, "uuid")
			}
		}
	}
}

func decodeNumbers(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// The trust check on a typical chat body without reserved fields, and on
// one whose image part carries a uuid (the strip re-indexes the body).
func BenchmarkGuardFields(b *testing.B) {
	img := `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 200<<10) + `"}`
	for _, c := range []struct{ name, body string }{
		{"clean-200KiB", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},` + img + `}]}],"max_tokens":5,"sampling_params":{"extra_args":{"a":1}}}`},
		{"part-uuid-200KiB", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},` + img + `,"uuid":"x"}]}],"max_tokens":5}`},
	} {
		body := []byte(c.body)
		obj, err := jsonb.Parse(body)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, e := GuardFields(engine.RouteChat, body, obj, 0); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// trust.client_fields reaches requests through Options and through a live
// swap (a reload): a trusted family is served, the rest stays refused.
func TestClientFieldsLive(t *testing.T) {
	runner := &fakeRunner{}
	h := start(t, runner, func(o *Options) { o.ClientFields = FieldKVTransfer })
	kv := `{"kv_transfer_params":{"remote_host":"trusted"}}`
	if resp, b := h.do(t, "POST", "/v1/completions", kv, nil); resp.StatusCode != 200 {
		t.Fatalf("trusted kv: %d %s", resp.StatusCode, b)
	}
	if resp, _ := h.do(t, "POST", "/v1/completions", `{"bootstrap_room":1}`, nil); resp.StatusCode != 400 {
		t.Fatalf("untrusted bootstrap: %d", resp.StatusCode)
	}
	l := h.srv.Live()
	l.ClientFields = 0
	h.srv.SetLive(l)
	if resp, _ := h.do(t, "POST", "/v1/completions", kv, nil); resp.StatusCode != 400 {
		t.Fatalf("after the swap: %d", resp.StatusCode)
	}
	if runner.calls() != 1 {
		t.Errorf("workflow ran %d times, want 1", runner.calls())
	}
}
