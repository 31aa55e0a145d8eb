package sim

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// PROTOCOL 4.1: chat render answers one object with token_ids and features
// whose per-modality arrays have one entry per item.
func TestRenderChatEndpoint(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleRender}})
	img := dataURI(make([]byte, 2048))
	body := `{"model":"qwen","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},
	  {"type":"image_url","image_url":{"url":"` + img + `"}},{"type":"image_url","image_url":{"url":"` + dataURI([]byte("b")) + `"}}]}],"max_tokens":7}`
	status, h, b := post(t, srv.URL+"/v1/chat/completions/render", body, "X-Request-Id: r-1")
	if status != http.StatusOK || h.Get("X-Request-Id") != "r-1" {
		t.Fatalf("status %d, x-request-id %q: %s", status, h.Get("X-Request-Id"), b)
	}
	var r struct {
		RequestID string `json:"request_id"`
		TokenIDs  []int  `json:"token_ids"`
		Features  struct {
			MMHashes       map[string][]string      `json:"mm_hashes"`
			MMPlaceholders map[string][]placeholder `json:"mm_placeholders"`
			KwargsData     map[string][]string      `json:"kwargs_data"`
		} `json:"features"`
		Model string `json:"model"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.RequestID != "r-1" || r.Model != "qwen" || r.TokenIDs[0] != BOS || len(r.TokenIDs) != 1+3+6+4 {
		t.Errorf("render: %s", b)
	}
	hs, phs, kws := r.Features.MMHashes["image"], r.Features.MMPlaceholders["image"], r.Features.KwargsData["image"]
	if len(hs) != 2 || len(phs) != 2 || len(kws) != 2 {
		t.Fatalf("features: %s", b)
	}
	if phs[0] != (placeholder{4, 6}) || phs[1] != (placeholder{10, 4}) || !hex64.MatchString(hs[0]) || hs[0] == hs[1] {
		t.Errorf("placeholders %v hashes %v", phs, hs)
	}
	if blob, err := base64.StdEncoding.DecodeString(kws[0]); err != nil || blob[0] != 0x82 {
		t.Errorf("kwargs_data is not base64 msgpack: %v", err)
	}
	// Text-only: features null.
	_, _, b = post(t, srv.URL+"/v1/chat/completions/render", `{"messages":[{"role":"user","content":"hi"}]}`)
	if m := decodeJSON(t, b); m["features"] != nil || m["model"] != "sim-model" {
		t.Errorf("text-only render: %s", b)
	}
}

// PROTOCOL 4.2: completions render answers a one-element array.
func TestRenderCompletionsEndpoint(t *testing.T) {
	_, srv := startWorker(t, Config{Roles: []Role{RoleRender}})
	status, _, b := post(t, srv.URL+"/v1/completions/render", `{"model":"m","prompt":"a b c","seed":12345678901234567890}`)
	var arr []map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(b, &arr) != nil || len(arr) != 1 {
		t.Fatalf("status %d: %s", status, b)
	}
	if got := string(arr[0]["token_ids"]); got != "[1,"+strconv.Itoa(WordID("a"))+","+strconv.Itoa(WordID("b"))+","+strconv.Itoa(WordID("c"))+"]" {
		t.Errorf("token_ids %s", got)
	}
	if string(arr[0]["features"]) != "null" {
		t.Errorf("features %s", arr[0]["features"])
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/completions/render", `{"prompt":42}`, "prompt"},
		{"/v1/completions/render", `[1]`, "JSON object"},
		{"/v1/chat/completions/render", `{"model":"m"}`, "messages"},
	} {
		status, _, b := post(t, srv.URL+tc.path, tc.body)
		if status != http.StatusBadRequest || !strings.Contains(errorMessage(t, b), tc.want) {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, status, b)
		}
	}
}

// A worker without the render role does not serve render, and a render-only
// worker does not serve inference.
func TestRoleGating(t *testing.T) {
	_, dec := startWorker(t, Config{Roles: []Role{RoleDecode}})
	if status, _, _ := post(t, dec.URL+"/v1/chat/completions/render", `{"messages":[{"role":"user","content":"x"}]}`); status != http.StatusNotFound {
		t.Errorf("render on a decode worker: %d", status)
	}
	status, _, b := post(t, dec.URL+"/v1/completions", `{"prompt":"x"}`, "EPP-Profile: prefill")
	if status != http.StatusBadRequest || !strings.Contains(errorMessage(t, b), "does not serve role prefill") {
		t.Errorf("prefill leg on a decode worker: %d %s", status, b)
	}
	_, ren := startWorker(t, Config{Roles: []Role{RoleRender}})
	if status, _, _ := post(t, ren.URL+"/v1/completions", `{"prompt":"x"}`); status != http.StatusBadRequest {
		t.Errorf("inference on a render worker: %d", status)
	}
}
