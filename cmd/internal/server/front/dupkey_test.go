package front

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 10: a member name repeated in any object of the body is a 400
// duplicate_key naming the second occurrence's path, on every route, found
// by the front's one parse; no run starts. The message ends with the
// request id and x-request-id is set, like every error reply.
func TestDuplicateKeyRefused(t *testing.T) {
	r := &fakeRunner{}
	h := start(t, r, nil)
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"m","max_tokens":1,"messages":[],"max_tokens":300}`, "max_tokens"},
		{"/v1/chat/completions", `{"stream":false,"stream":true}`, "stream"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b","role":"system"}]}`, "messages[1].role"},
		{"/v1/completions", `{"prompt":"x","kv_transfer_params":{"remote_host":"a"},"kv_transfer_params":{"remote_host":"b"}}`, "kv_transfer_params"},
		{"/v1/completions", `{"prompt":"x","\u0073tream":true,"stream":false}`, "stream"},
		{"/inference/v1/generate", `{"token_ids":[1],"sampling_params":{"max_tokens":1,"max_tokens":300}}`, "sampling_params.max_tokens"},
		{"/inference/v1/generate", `{"token_ids":[1],"sampling_params":{"extra_args":{"kv_transfer_params":{},"kv_transfer_params":{"x":1}}}}`,
			"sampling_params.extra_args.kv_transfer_params"},
	} {
		resp, b := h.do(t, "POST", tc.path, tc.body, map[string]string{"X-Request-Id": "dup-1"})
		if resp.StatusCode != 400 {
			t.Errorf("%s %s: status %d %s", tc.path, tc.body, resp.StatusCode, b)
			continue
		}
		var rep struct {
			Error struct {
				Message, Type, Code string
				Param               *string
			}
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		e := rep.Error
		if e.Type != "invalid_request_error" || e.Code != "duplicate_key" || e.Param == nil || *e.Param != tc.param ||
			!strings.HasSuffix(e.Message, "(request_id: dup-1)") || !strings.Contains(e.Message, tc.param) {
			t.Errorf("%s %s: %s", tc.path, tc.body, b)
		}
		if resp.Header.Get("X-Request-Id") != "dup-1" {
			t.Errorf("x-request-id %q", resp.Header.Get("X-Request-Id"))
		}
	}
	// Invalid JSON wins over a duplicate seen before the syntax error.
	resp, b := h.do(t, "POST", "/v1/chat/completions", `{"a":1,"a":2`, nil)
	if _, _, code := errorReply(t, resp, b); resp.StatusCode != 400 || code != "invalid_json" {
		t.Errorf("truncated body with a duplicate: %d %s", resp.StatusCode, b)
	}
	if r.calls() != 0 {
		t.Fatalf("runner called %d times", r.calls())
	}
}
