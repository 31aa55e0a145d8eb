package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func post(t *testing.T, h http.Handler, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// The worker plays each role a text request needs.
func TestWorkerRoles(t *testing.T) {
	w := &Worker{Chunks: 2}
	for _, tc := range []struct {
		name   string
		path   string
		hdr    map[string]string
		status int
		check  func(t *testing.T, b []byte)
	}{
		{"decode", "/v1/chat/completions", nil, 200, func(t *testing.T, b []byte) {
			if !bytes.Equal(b, decodeReply) {
				t.Errorf("%s", b)
			}
		}},
		{"conditional decode misses", "/v1/chat/completions", map[string]string{"Prefer": "if-available", "EPP-Profile": "decode"}, 412, nil},
		{"prefill carries kv_transfer_params", "/v1/chat/completions", map[string]string{"EPP-Profile": "prefill"}, 200, func(t *testing.T, b []byte) {
			var v struct {
				KV map[string]any `json:"kv_transfer_params"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.KV["remote_engine_id"] != "bench-engine" {
				t.Errorf("%v %s", err, b)
			}
		}},
		{"stream", "/v1/chat/completions", map[string]string{"Accept": "text/event-stream"}, 200, func(t *testing.T, b []byte) {
			if n := bytes.Count(b, []byte(`"t":`)); n != 2 || !bytes.HasSuffix(b, doneEvent) {
				t.Errorf("%d stamped events: %s", n, b)
			}
		}},
	} {
		rec := post(t, w, tc.path, tc.hdr, `{"model":"m"}`)
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, rec.Code, tc.status)
			continue
		}
		if tc.check != nil {
			tc.check(t, rec.Body.Bytes())
		}
	}
}

// Render: a unique first token per call (so celflow's prefix index never
// predicts a hit), one token per 4 body bytes, at least 31 after the first.
func TestWorkerRender(t *testing.T) {
	w := &Worker{}
	ids := func(b []byte) []int64 {
		var v struct {
			IDs []int64 `json:"token_ids"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%v: %.100s", err, b)
		}
		return v.IDs
	}
	a := ids(post(t, w, "/v1/chat/completions/render", nil, "{}").Body.Bytes())
	b := ids(post(t, w, "/v1/chat/completions/render", nil, "{}").Body.Bytes())
	if len(a) != 32 || len(b) != 32 || a[0] == b[0] || a[1] != b[1] {
		t.Errorf("short body: %v / %v", a, b)
	}
	big := strings.Repeat("x", 4000)
	if n := len(ids(post(t, w, "/v1/chat/completions/render", nil, big).Body.Bytes())); n != 1001 {
		t.Errorf("4000-byte body: %d ids, want 1001", n)
	}
	var arr []struct {
		IDs []int64 `json:"token_ids"`
	}
	if rec := post(t, w, "/v1/completions/render", nil, "{}"); json.Unmarshal(rec.Body.Bytes(), &arr) != nil || len(arr) != 1 || len(arr[0].IDs) != 32 {
		t.Errorf("completions render: %s", rec.Body)
	}
}

// The bare proxy relays to its target and answers /healthz itself.
func TestProxy(t *testing.T) {
	up := httptest.NewServer(&Worker{})
	defer up.Close()
	u, _ := url.Parse(up.URL)
	px := httptest.NewServer(NewProxy(u))
	defer px.Close()
	resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(b, decodeReply) {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	if resp, err := http.Get(px.URL + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("healthz: %v %v", resp, err)
	}
}

// exactBody stops at the declared length without another read of the
// underlying body (the read that fails once net/http has closed it).
func TestExactBody(t *testing.T) {
	under := &countReader{r: strings.NewReader("abcdefXYZ")}
	b := &exactBody{ReadCloser: io.NopCloser(under), left: 6}
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "abcdef" {
		t.Fatalf("%q %v", got, err)
	}
	calls := under.calls
	if n, err := b.Read(make([]byte, 4)); n != 0 || err != io.EOF || under.calls != calls {
		t.Errorf("read past the length: %d %v, %d underlying calls (was %d)", n, err, under.calls, calls)
	}
}

type countReader struct {
	r     io.Reader
	calls int
}

func (c *countReader) Read(p []byte) (int, error) { c.calls++; return c.r.Read(p) }
