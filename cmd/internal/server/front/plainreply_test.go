package front

import (
	"strings"
	"testing"
)

// Issue 17 item 6: the replies net/http writes itself, in plain text, before
// any handler runs, reach a client on a plain connection as celflow's JSON
// error (with X-Request-Id, the connection closed): headers above the hard
// cap (431), a malformed request (400, net/http's reason kept), an HTTP
// version net/http does not serve (505).
func TestNetHTTPRepliesAreJSON(t *testing.T) {
	h := start(t, nil, func(o *Options) { o.Limits = Limits{MaxHeaderBytes: 4096, MaxHeaderCount: 20} })
	for _, tc := range []struct {
		name, req string
		status    int
		code, msg string
		id        string
	}{
		{"above the hard header cap", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-1\r\nX-Big: " + strings.Repeat("a", 1100<<10) + "\r\n\r\n",
			431, "request_header_fields_too_large", "hard limit", ""},
		{"no Host", "GET /healthz HTTP/1.1\r\nX-Request-Id: nohost-1\r\n\r\n", 400, "invalid_request", "malformed request: missing required Host header", "nohost-1"},
		{"malformed header line", "GET /healthz HTTP/1.1\r\nHost: x\r\nthis is not a header\r\n\r\n", 400, "invalid_request", "malformed request", ""},
		{"HTTP/3.0", "GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", 505, "invalid_request", "unsupported HTTP version", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rawDo(t, h.addr, []byte(tc.req))
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %q", r.status, tc.status, r.body)
			}
			code, _ := r.jsonError(t)
			if code != tc.code || !strings.Contains(string(r.body), tc.msg) {
				t.Fatalf("code %q body %s, want %s %q", code, r.body, tc.code, tc.msg)
			}
			if tc.id != "" && r.header.Get("X-Request-Id") != tc.id {
				t.Errorf("X-Request-Id %q, want the client's %q", r.header.Get("X-Request-Id"), tc.id)
			}
			if !r.closed {
				t.Error("connection not closed")
			}
		})
	}
}

// A handler's own reply never has the shape of net/http's plain one.
func TestNetHTTPErrorShape(t *testing.T) {
	for _, tc := range []struct {
		in     string
		status int
		ok     bool
	}{
		{"HTTP/1.1 400 Bad Request: missing required Host header" + netHTTPErrorHeaders + "400 Bad Request: missing required Host header", 400, true},
		{"HTTP/1.1 431 Request Header Fields Too Large" + netHTTPErrorHeaders + "431 Request Header Fields Too Large", 431, true},
		{"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nX-Request-Id: a\r\n\r\n{}", 0, false},
		{"HTTP/1.1 200 OK" + netHTTPErrorHeaders + "ok", 0, false},
		{"data: " + netHTTPErrorHeaders, 0, false},
	} {
		if st, _, ok := netHTTPError([]byte(tc.in)); ok != tc.ok || st != tc.status {
			t.Errorf("%q: %d %v", tc.in, st, ok)
		}
	}
}
