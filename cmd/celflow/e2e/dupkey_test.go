//go:build e2e

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 10 (duplicate keys split the parse): a body that repeats a member
// name in any object is refused by the front with 400 duplicate_key naming
// the path, on chat, completions and generate, in direct and gateway mode,
// and no worker (nor the gateway) receives anything. Before the fix the
// editor capped the first max_tokens while the workers read the last one,
// a second kv_transfer_params steered prefill, and "stream":false,
// "stream":true became a 502 after three prefill attempts.
func TestDuplicateKeys(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"duplicate keys are refused"}]`
	const evil = `{"do_remote_prefill":true,"remote_host":"203.0.113.9","remote_port":7777,"remote_engine_id":"x","remote_block_ids":[1]}`
	cases := []struct{ name, path, body, param string }{
		{"chat max_tokens", "/v1/chat/completions", `{"model":"` + model + `",` + msgs + `,"max_tokens":1,"min_tokens":1,"max_tokens":300}`, "max_tokens"},
		{"chat stream", "/v1/chat/completions", `{"model":"` + model + `",` + msgs + `,"stream":false,"stream":true}`, "stream"},
		{"chat kv_transfer_params", "/v1/chat/completions", `{"model":"` + model + `",` + msgs + `,"kv_transfer_params":null,"max_tokens":4,"kv_transfer_params":` + evil + `}`, "kv_transfer_params"},
		{"chat escaped spelling", "/v1/chat/completions", `{"model":"` + model + `",` + msgs + `,"max_tokens":1,"max_\u0074okens":300}`, "max_tokens"},
		{"completions max_tokens", "/v1/completions", `{"model":"` + model + `","prompt":"dup","max_tokens":1,"max_tokens":300}`, "max_tokens"},
		{"completions stream", "/v1/completions", `{"model":"` + model + `","prompt":"dup","stream":false,"stream":true}`, "stream"},
		{"completions kv_transfer_params", "/v1/completions", `{"model":"` + model + `","prompt":"dup","kv_transfer_params":{},"kv_transfer_params":` + evil + `}`, "kv_transfer_params"},
		{"generate max_tokens", "/inference/v1/generate", `{"model":"` + model + `","token_ids":[1,2,3],"sampling_params":{"max_tokens":1,"min_tokens":1,"max_tokens":300}}`, "sampling_params.max_tokens"},
		{"generate stream", "/inference/v1/generate", `{"model":"` + model + `","token_ids":[1,2,3],"stream":false,"stream":true}`, "stream"},
		{"generate kv_transfer_params", "/inference/v1/generate", `{"model":"` + model + `","token_ids":[1,2,3],"sampling_params":{"extra_args":{"kv_transfer_params":{},"kv_transfer_params":` + evil + `}}}`,
			"sampling_params.extra_args.kv_transfer_params"},
	}
	for _, gw := range []bool{false, true} {
		t.Run(modeName(gw), func(t *testing.T) {
			t.Parallel()
			st := startStack(t, stackOpts{gateway: gw})
			for i, c := range cases {
				id := "e2e-dupkey-" + modeName(gw) + "-" + string(rune('a'+i))
				status, body := postRaw(t, st.url+c.path, id, []byte(c.body), nil)
				var rep struct {
					Error struct {
						Message, Type, Code string
						Param               *string
					}
				}
				if err := json.Unmarshal(body, &rep); err != nil || status != 400 {
					t.Errorf("%s: %d %s", c.name, status, body)
					continue
				}
				e := rep.Error
				if e.Code != "duplicate_key" || e.Type != "invalid_request_error" || e.Param == nil || *e.Param != c.param ||
					!strings.HasSuffix(e.Message, "(request_id: "+id+")") {
					t.Errorf("%s: %s", c.name, body)
				}
				if legs := st.legs(id); len(legs) != 0 {
					t.Errorf("%s: workers received legs:\n%s", c.name, describe(legs))
				}
				if st.gateway != nil {
					if recs := st.records(st.gateway, id); len(recs) != 0 {
						t.Errorf("%s: the gateway received %d requests", c.name, len(recs))
					}
				}
			}
		})
	}
}
