package front

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// isUUIDv4 reports whether s is a minted id.
func isUUIDv4(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.Version() == 4 && u.String() == s
}

// ACCEPTANCE 5, 6, 7: the canonical id reaches the run (so every leg) and
// the reply; a rejected value appears in no reply or log, only its length.
func TestRequestID(t *testing.T) {
	valid128 := strings.Repeat("aZ9-", 32)
	tests := []struct {
		name, in string
		keep     bool
	}{
		{"valid", "my-req-1", true},
		{"exactly 128", valid128, true},
		{"129 characters", valid128 + "x", false},
		{"spaces", "my req 1", false},
		{"underscore", "my_req", false},
		{"absent", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, nil, nil)
			hdr := map[string]string{}
			if tt.in != "" {
				hdr["X-Request-Id"] = tt.in
			}
			resp, body := h.do(t, "POST", "/v1/chat/completions", `{"model":"m"}`, hdr)
			got := resp.Header.Get("X-Request-Id")
			if n := len(resp.Header.Values("X-Request-Id")); n != 1 {
				t.Fatalf("%d X-Request-Id headers", n)
			}
			run := h.runner.last()
			if run == nil {
				t.Fatal("no run")
			}
			if run.Req.ID != got {
				t.Fatalf("run id %q, reply id %q", run.Req.ID, got)
			}
			if tt.keep {
				if got != tt.in {
					t.Fatalf("id %q, want %q", got, tt.in)
				}
				return
			}
			if !isUUIDv4(got) {
				t.Fatalf("id %q is not a UUIDv4", got)
			}
			if vs := run.Req.Header.Values("X-Request-Id"); len(vs) != 0 {
				t.Fatalf("rejected id still in the run's headers: %q", vs)
			}
			if tt.in != "" {
				h.shutdown(t)
				if strings.Contains(string(body), tt.in) || strings.Contains(h.logs.String(), tt.in) {
					t.Fatal("the rejected value was echoed or logged")
				}
				if !strings.Contains(h.logs.String(), `"rejected_request_id_len":`+strconv.Itoa(len(tt.in))) {
					t.Fatalf("length not logged: %s", h.logs.String())
				}
			}
		})
	}
}

// ACCEPTANCE 6: CR/LF cannot travel in HTTP/1.1, so this is a unit test
// on the id rule and on the handler with a crafted request.
func TestRequestIDControlCharacters(t *testing.T) {
	for _, v := range []string{"a\r\nb", "a\nb", "a\tb", "ok\x00", "é"} {
		if validID(v) {
			t.Errorf("validID(%q) = true", v)
		}
	}
	r := &fakeRunner{}
	opts, logs := newOpts(t, r, logrus.DebugLevel) // headers are logged too
	s := New(opts)
	req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(`{}`))
	req.Header["X-Request-Id"] = []string{"evil\r\nSet-Cookie: x=secret-marker"}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	got := rec.Header().Get("X-Request-Id")
	if !isUUIDv4(got) || r.last().Req.ID != got {
		t.Fatalf("id %q, run id %q", got, r.last().Req.ID)
	}
	if strings.Contains(logs.String(), "secret-marker") || strings.Contains(rec.Body.String(), "secret-marker") {
		t.Fatal("rejected value leaked")
	}
}

// ACCEPTANCE 8, 9: every reply has X-Request-Id; error messages end with it.
func TestEveryReplyHasRequestID(t *testing.T) {
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		switch {
		case bytes.Contains(run.Req.Body, []byte("sse")):
			w, _ := run.Answer()
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {}\n\n")
			return &engine.Report{Answered: true}
		case bytes.Contains(run.Req.Body, []byte("fail4")):
			e := engine.Errorf(engine.KindUpstreamRejected, "")
			e.Node, e.Status, e.UpstreamMsg = "prefill", 422, "max_tokens must be positive"
			return &engine.Report{Err: e}
		case bytes.Contains(run.Req.Body, []byte("fail5")):
			return &engine.Report{Err: &engine.Error{Kind: engine.KindBadGateway, Node: "decode", Item: -1, Msg: "connection refused"}}
		case bytes.Contains(run.Req.Body, []byte("panic")):
			panic("boom")
		}
		return answerJSON(run, `{}`)
	}}
	h := start(t, r, nil)
	hdr := map[string]string{"X-Request-Id": "client-id-9"}
	tests := []struct {
		name, method, path, body string
		status                   int
		msgSuffix                string
	}{
		{"json 200", "POST", "/v1/chat/completions", `{}`, 200, ""},
		{"sse 200", "POST", "/v1/chat/completions", `{"x":"sse"}`, 200, ""},
		{"4xx relayed", "POST", "/v1/chat/completions", `{"x":"fail4"}`, 422,
			"prefill rejected the request: HTTP 422: max_tokens must be positive (request_id: client-id-9)"},
		{"5xx", "POST", "/v1/completions", `{"x":"fail5"}`, 502, "decode: connection refused (request_id: client-id-9)"},
		{"panic 500", "POST", "/v1/completions", `{"x":"panic"}`, 500, "(request_id: client-id-9)"},
		{"400", "POST", "/v1/completions", `[1]`, 400, "(request_id: client-id-9)"},
		{"404", "GET", "/nope", "", 404, "(request_id: client-id-9)"},
		{"405", "GET", "/v1/completions", "", 405, "(request_id: client-id-9)"},
		{"probe", "GET", "/healthz", "", 200, ""},
	}
	for _, tt := range tests {
		resp, body := h.do(t, tt.method, tt.path, tt.body, hdr)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d (%s)", tt.name, resp.StatusCode, tt.status, body)
			continue
		}
		if got := resp.Header.Get("X-Request-Id"); got != "client-id-9" {
			t.Errorf("%s: X-Request-Id %q", tt.name, got)
		}
		if tt.msgSuffix != "" {
			msg, _, _ := errorReply(t, resp, body)
			if !strings.HasSuffix(msg, tt.msgSuffix) {
				t.Errorf("%s: message %q, want suffix %q", tt.name, msg, tt.msgSuffix)
			}
		}
	}
}

// ACCEPTANCE 10: the body cap, declared or chunked; no run.
func TestBodyTooLarge(t *testing.T) {
	r := &fakeRunner{}
	h := start(t, r, func(o *Options) { o.MaxBodyBytes = MiB })
	ok := `{"p":"` + strings.Repeat("a", MiB-8) + `"}` // exactly 1 MiB
	if len(ok) != MiB {
		t.Fatalf("len %d", len(ok))
	}
	if resp, body := h.do(t, "POST", "/v1/completions", ok, nil); resp.StatusCode != 200 {
		t.Fatalf("1 MiB: %d %s", resp.StatusCode, body)
	}
	big := ok + " " // 1,048,577 bytes
	for _, chunked := range []bool{false, true} {
		req, _ := http.NewRequest("POST", h.url+"/v1/completions", strings.NewReader(big))
		if chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(strings.NewReader(big))
		}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Fatalf("chunked=%v: status %d", chunked, resp.StatusCode)
		}
		if _, _, code := errorReply(t, resp, body); code != "request_too_large" {
			t.Fatalf("code %q", code)
		}
	}
	if r.calls() != 1 {
		t.Fatalf("runner called %d times, want 1", r.calls())
	}
}

// ACCEPTANCE 11: a body that is not a JSON object is 400 invalid_json; no run.
func TestBodyNotAnObject(t *testing.T) {
	r := &fakeRunner{}
	h := start(t, r, nil)
	for _, body := range []string{`{"a":`, ``, `null`, `[1,2]`, `"str"`, `42`, `{} {}`, "\xff"} {
		resp, b := h.do(t, "POST", "/v1/chat/completions", body, nil)
		if resp.StatusCode != 400 {
			t.Errorf("%q: status %d", body, resp.StatusCode)
			continue
		}
		if _, typ, code := errorReply(t, resp, b); code != "invalid_json" || typ != "invalid_request_error" {
			t.Errorf("%q: %s %s", body, typ, code)
		}
	}
	if r.calls() != 0 {
		t.Fatalf("runner called %d times", r.calls())
	}
}

// ACCEPTANCE 12, 13: {} with text/plain runs; model read, not validated;
// stream only for the literal true. The body reaches the run byte-exact.
func TestBodyFields(t *testing.T) {
	r := &fakeRunner{}
	h := start(t, r, nil)
	tests := []struct {
		body   string
		model  string
		stream bool
	}{
		{`{}`, "", false},
		{`{"model":"llama","stream":true}`, "llama", true},
		{`{"model":"l\u0061ma","stream":"true"}`, "lama", false},
		{`{"model":42,"stream":1}`, "", false},
		{`{"stream" : true , "seed":12345678901234567890,"temperature":1.0}`, "", true},
	}
	for _, tt := range tests {
		resp, b := h.do(t, "POST", "/v1/chat/completions", tt.body, map[string]string{"Content-Type": "text/plain"})
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", tt.body, resp.StatusCode, b)
		}
		run := r.last()
		if run.Req.Model != tt.model || run.Req.Stream != tt.stream || string(run.Req.Body) != tt.body ||
			string(run.State.Body) != tt.body || run.Req.Route != engine.RouteChat {
			t.Errorf("%s: model %q stream %v body %q route %v", tt.body, run.Req.Model, run.Req.Stream, run.Req.Body, run.Req.Route)
		}
	}
}

// PROTOCOL 1.5: generate bodies are validated at entry and their tokens
// reach the run; a bad token_ids is 400 invalid_request and no run.
func TestGenerateParsedAtEntry(t *testing.T) {
	r := &fakeRunner{}
	h := start(t, r, nil)
	resp, b := h.do(t, "POST", "/inference/v1/generate", `{"token_ids":[5,6,7]}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if tk := r.last().State.Tokens; !tk.Known || len(tk.IDs) != 3 || tk.IDs[2] != 7 {
		t.Fatalf("tokens %+v", tk)
	}
	for _, body := range []string{`{}`, `{"token_ids":null}`, `{"token_ids":[]}`, `{"token_ids":[1.5]}`, `{"token_ids":[-1]}`} {
		resp, b := h.do(t, "POST", "/inference/v1/generate", body, nil)
		if resp.StatusCode != 400 {
			t.Errorf("%s: %d", body, resp.StatusCode)
			continue
		}
		if _, _, code := errorReply(t, resp, b); code != "invalid_request" {
			t.Errorf("%s: code %q", body, code)
		}
	}
	if r.calls() != 1 {
		t.Fatalf("runner called %d times", r.calls())
	}
}
