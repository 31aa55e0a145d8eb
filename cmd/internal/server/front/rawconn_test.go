package front

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
)

// rawReply is one response read off a raw connection.
type rawReply struct {
	status int
	header http.Header
	body   []byte
	closed bool // the server closed the connection after the reply
}

// rawDo writes req on a fresh connection to addr (in a goroutine, so that a
// server answering before the whole request is read is observed as a
// client sees it), reads one response, then whether the connection closes.
func rawDo(t *testing.T, addr string, req []byte) rawReply {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = c.Write(req) }()
	br := bufio.NewReader(c)
	return readRaw(t, br, true)
}

// rawSendThenRead is rawDo as urllib and many HTTP/1.0 clients behave: the
// whole request is written before the response is read, and a failed write
// (the server closed with body bytes unread: a reset) ends the exchange
// without reading the reply.
func rawSendThenRead(t *testing.T, addr string, req []byte) (rawReply, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(req); err != nil {
		return rawReply{}, err // urllib raises here: the reply is never read
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return rawReply{}, err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return rawReply{}, err
	}
	r := rawReply{status: resp.StatusCode, header: resp.Header, body: b}
	_, err = br.ReadByte()
	r.closed = err != nil
	return r, nil
}

func readRaw(t *testing.T, br *bufio.Reader, wantClose bool) rawReply {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	r := rawReply{status: resp.StatusCode, header: resp.Header, body: b}
	if wantClose {
		_, err = br.ReadByte()
		r.closed = err != nil
	}
	return r
}

// jsonError checks an OpenAI-shaped error with x-request-id and returns
// its code and param ("" for null).
func (r rawReply) jsonError(t *testing.T) (code, param string) {
	t.Helper()
	if r.header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id on the reply")
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var b struct {
		Error struct {
			Message, Type string
			Param         *string
			Code          string
		}
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	if !strings.HasSuffix(b.Error.Message, "(request_id: "+r.header.Get("X-Request-Id")+")") {
		t.Errorf("message %q does not end with the request id", b.Error.Message)
	}
	if b.Error.Param != nil {
		param = *b.Error.Param
	}
	return b.Error.Code, param
}

func postHead(proto string, extra ...string) string {
	return "POST /v1/chat/completions " + proto + "\r\nHost: x\r\n" + strings.Join(extra, "")
}

// Front limits: header count and size give a JSON 431 and
// close the connection; at the limits the request is served.
func TestHeaderLimitsRaw(t *testing.T) {
	h := start(t, nil, func(o *Options) { o.Limits = Limits{MaxHeaderBytes: 4096, MaxHeaderCount: 20} })
	many := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		return b.String()
	}
	body := `{}`
	tests := []struct {
		name   string
		hdrs   string
		status int
	}{
		{"at the count limit", many(17), 200}, // + Host, Content-Length, Connection = 20
		{"one header too many", many(18), 431},
		{"9000 headers", many(9000), 431},
		{"one huge header", "X-Big: " + strings.Repeat("a", 5000) + "\r\n", 431},
		{"under the size limit", "X-Big: " + strings.Repeat("a", 3000) + "\r\n", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := postHead("HTTP/1.1", tt.hdrs, fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body))
			r := rawDo(t, h.addr, []byte(req))
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.status == 431 {
				if code, _ := r.jsonError(t); code != "request_header_fields_too_large" {
					t.Errorf("code %q", code)
				}
				if !r.closed {
					t.Error("connection not closed after the 431")
				}
			}
		})
	}
}

// Ambiguous framing is refused with 400 (or net/http's own refusal) and the
// connection closes; a smuggled request inside the body never runs.
func TestFramingRaw(t *testing.T) {
	runner := &fakeRunner{}
	h := start(t, runner, nil)
	smuggled := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 2, "{}")
	tests := []struct {
		name   string
		req    string
		status int
		json   bool // celflow's JSON reply
	}{
		{"CL and TE chunked", postHead("HTTP/1.1", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n") + chunk + smuggled, 400, true},
		{"TE then CL, odd case", postHead("HTTP/1.1", "transfer-encoding: Chunked\r\ncontent-length: 70\r\n\r\n") + chunk + smuggled, 400, true},
		{"TE on HTTP/1.0", postHead("HTTP/1.0", "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}"), 400, true},
		{"TE on HTTP/1.0 without CL", postHead("HTTP/1.0", "Transfer-Encoding: chunked\r\n\r\n") + chunk, 400, true},
		{"folded header", postHead("HTTP/1.1", "X-A: 1\r\n Content-Length: 9\r\nContent-Length: 2\r\n\r\n{}"), 400, true},
		// net/http refuses these itself (400 or 501, plain text): framedConn
		// answers first, as the others.
		{"differing CLs", postHead("HTTP/1.1", "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x"), 400, true},
		{"CL not a number", postHead("HTTP/1.1", "Content-Length: +2\r\n\r\n{}"), 400, true},
		{"TE gzip", postHead("HTTP/1.1", "Transfer-Encoding: gzip\r\n\r\n") + chunk, 400, true},
		{"TE gzip, chunked", postHead("HTTP/1.1", "Transfer-Encoding: gzip, chunked\r\n\r\n") + chunk, 400, true},
		{"TE chunked twice", postHead("HTTP/1.1", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n") + chunk, 400, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runner.calls()
			r := rawDo(t, h.addr, []byte(tt.req))
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if tt.json {
				if code, _ := r.jsonError(t); code != "invalid_framing" {
					t.Errorf("code %q", code)
				}
			}
			if !r.closed {
				t.Error("connection not closed")
			}
			if n := runner.calls() - before; n != 0 {
				t.Errorf("the workflow ran %d times", n)
			}
		})
	}
}

// Keep-alive: well-framed requests (CL, chunked with extensions and
// trailers) are served in sequence; the tracker follows their boundaries,
// so an ambiguous third request is the one refused.
func TestFramingKeepAliveRaw(t *testing.T) {
	runner := &fakeRunner{}
	h := start(t, runner, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(s string) {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// The body holds a fake header block: only real framing counts.
	fake := `{"x":"\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"}`
	send(postHead("HTTP/1.1", fmt.Sprintf("Content-Length: %d\r\n\r\n", len(fake))) + fake)
	if r := readRaw(t, br, false); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	send(postHead("HTTP/1.1", "Transfer-Encoding: chunked\r\n\r\n") + "1;ext=1\r\n{\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n")
	if r := readRaw(t, br, false); r.status != 200 {
		t.Fatalf("second: %d %s", r.status, r.body)
	}
	send(postHead("HTTP/1.1", "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n") + "2\r\n{}\r\n0\r\n\r\n")
	r := readRaw(t, br, true)
	if r.status != 400 || !r.closed {
		t.Fatalf("third: %d closed=%v %s", r.status, r.closed, r.body)
	}
	if runner.calls() != 2 {
		t.Errorf("workflow ran %d times, want 2", runner.calls())
	}
}

// ACCEPTANCE 10: the 413 reaches clients that send the whole body before reading
// (Connection: close, HTTP/1.0, chunked), every time: the server drains
// the body after replying instead of resetting the connection.
func Test413DeliveredRaw(t *testing.T) {
	h := start(t, nil, func(o *Options) { o.MaxBodyBytes = 1 << 20 })
	big := strings.Repeat("a", 6<<20) // more than loopback socket buffers absorb, less than the drain bound
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)
	shapes := []struct{ name, req string }{
		{"HTTP/1.1 Connection: close", postHead("HTTP/1.1", fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n", len(big))) + big},
		{"HTTP/1.1 keep-alive", postHead("HTTP/1.1", fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big))) + big},
		{"HTTP/1.0", postHead("HTTP/1.0", fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big))) + big},
		{"chunked, Connection: close", postHead("HTTP/1.1", "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n") + chunked},
	}
	const rounds = 15 // x4 shapes; a reset showed in about half the tries before
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			for i := range rounds {
				r, err := rawSendThenRead(t, h.addr, []byte(sh.req))
				if err != nil {
					t.Fatalf("round %d: no reply: %v", i, err)
				}
				if r.status != 413 {
					t.Fatalf("round %d: status %d", i, r.status)
				}
				if code, _ := r.jsonError(t); code != "request_too_large" {
					t.Fatalf("round %d: code %q", i, code)
				}
				if !r.closed {
					t.Fatalf("round %d: connection left open", i)
				}
			}
		})
	}
}

// server.read_header_timeout and server.read_timeout apply: a client that
// stalls in its headers is cut off, one that stalls in its body gets a 400.
func TestReadTimeoutsRaw(t *testing.T) {
	h := start(t, nil, func(o *Options) {
		o.ReadHeaderTimeout = 200 * time.Millisecond
		o.ReadTimeout = 400 * time.Millisecond
	})
	t.Run("headers", func(t *testing.T) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"))
		start := time.Now()
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("want the server to close, got %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("closed after %v", d)
		}
	})
	t.Run("body", func(t *testing.T) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte(postHead("HTTP/1.1", "Content-Length: 100\r\n\r\n{\"a\":")))
		r := readRaw(t, bufio.NewReader(c), false)
		if r.status != 400 {
			t.Fatalf("status %d %s", r.status, r.body)
		}
		if code, _ := r.jsonError(t); code != "invalid_json" {
			t.Errorf("code %q", code)
		}
	})
}

// Under TLS the framing is not tracked, but the smuggling shape still
// cannot reach a second request: a chunked HTTP/1.1 request ends its
// connection, so the bytes after its chunked body are never parsed.
func TestFramingTLSChunkedCloses(t *testing.T) {
	runner := &fakeRunner{}
	st := newTLSSetup(t, tlsfiles.ServerConfig{})
	h := startTLS(t, runner, st)
	c, err := tls.Dial("tcp", h.addr, &tls.Config{RootCAs: st.ca.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	smuggled := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	req := postHead("HTTP/1.1", "Content-Length: 70\r\nTransfer-Encoding: chunked\r\n\r\n") + "2\r\n{}\r\n0\r\n\r\n" + smuggled
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	r := readRaw(t, bufio.NewReader(c), true)
	if r.status != 200 || !r.closed {
		t.Fatalf("status %d closed %v", r.status, r.closed)
	}
	if n := runner.calls(); n != 1 {
		t.Errorf("workflow ran %d times, want 1 (the smuggled request must not run)", n)
	}
}
