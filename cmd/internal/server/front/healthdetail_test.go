package front

import (
	"encoding/json"
	"testing"
)

// GET /health carries the live set's detail members (the workers cache-aware
// routing reports as mispredicting) beside "status":"ok", and stays 200;
// /healthz never does; a reload's set replaces the detail.
func TestHealthDetail(t *testing.T) {
	h := start(t, nil, nil)
	get := func(path string) map[string]any {
		t.Helper()
		resp, b := h.do(t, "GET", path, "", nil)
		var m map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return m
	}
	if m := get("/health"); len(m) != 1 || m["status"] != "ok" {
		t.Fatalf("/health without a detail: %v", m)
	}
	l := h.srv.Live()
	bad := map[string]any{"routing": map[string]any{"mispredicting": []any{map[string]any{"pool": "decode"}}}, "status": "overridden"}
	l.HealthDetail = func() map[string]any { return bad }
	h.srv.SetLive(l)
	if m := get("/health"); m["status"] != "ok" || m["routing"] == nil {
		t.Fatalf("/health with a detail: %v", m)
	}
	if m := get("/healthz"); len(m) != 1 {
		t.Fatalf("/healthz took the detail: %v", m)
	}
	l.HealthDetail = func() map[string]any { return nil }
	h.srv.SetLive(l)
	if m := get("/health"); len(m) != 1 {
		t.Fatalf("/health after the detail emptied: %v", m)
	}
}
