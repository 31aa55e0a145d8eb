package front

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// net/http answers a few requests itself, before any handler runs, in plain
// text (server.go, conn.serve): headers above http.Server.MaxHeaderBytes
// (431), a malformed request (400, with a short reason of its own such as
// "missing required Host header"), an HTTP version it does not serve
// (505), a Transfer-Encoding it does not know (501). It writes each as one
// Write to the connection, of exactly this shape:
//
//	HTTP/1.1 <code> <text>[: <reason>]\r\n
//	Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n<body>
//
// On a plain connection that Write reaches framedConn, which turns it into
// celflow's JSON error reply (docs/errors.md) with a request id. No handler
// reply has this shape: every one carries X-Request-Id (serveHTTP) and Date.
// On a TLS connection net/http writes to the *tls.Conn, which celflow
// cannot wrap (ALPN, Request.TLS): there these replies stay plain text.

const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// netHTTPError recognises net/http's own plain-text error reply: its status
// and the reason after "<code> <text>: " ("" when none).
func netHTTPError(p []byte) (status int, reason string, ok bool) {
	const proto = "HTTP/1.1 "
	if len(p) < len(proto)+3 || string(p[:len(proto)]) != proto {
		return 0, "", false
	}
	// The status line is short (net/http's constant texts): look no further
	// than 256 bytes, so a large reply costs nothing.
	end := bytes.Index(p[:min(len(p), 256)], []byte("\r\n"))
	if end < 0 || !bytes.HasPrefix(p[end:], []byte(netHTTPErrorHeaders)) {
		return 0, "", false
	}
	line := p[len(proto):end]
	code, err := strconv.Atoi(string(line[:3]))
	if err != nil || code < 400 || code > 599 || len(line) > 3 && line[3] != ' ' {
		return 0, "", false
	}
	text := string(line[min(len(line), 4):])
	if _, r, found := strings.Cut(text, ": "); found {
		reason = r
	}
	return code, reason, true
}

// netHTTPErrorJSON is the JSON reply that replaces net/http's plain one:
// 431 request_header_fields_too_large, 400 invalid_request (with
// net/http's reason, a constant text of its own, never client bytes), 501
// as the framing refusal celflow gives every Transfer-Encoding other than
// chunked (400 invalid_framing), and any other status kept with
// invalid_request (505 for an HTTP version net/http does not serve).
func netHTTPErrorJSON(status int, reason, id string) ([]byte, *engine.Error) {
	var e *engine.Error
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		e = engine.Errorf(engine.KindHeadersTooLarge,
			"request headers exceed the hard limit (4 × server.max_header_bytes, at least 1 MiB)")
	case http.StatusNotImplemented:
		e = engine.Errorf(engine.KindBadFraming, "ambiguous request framing: Transfer-Encoding other than exactly chunked")
	case http.StatusHTTPVersionNotSupported:
		e = engine.Errorf(engine.KindInvalidRequest, "unsupported HTTP version: send HTTP/1.1, or HTTP/2 over TLS")
	default:
		msg := "malformed request"
		if reason != "" {
			msg += ": " + reason
		}
		e = engine.Errorf(engine.KindInvalidRequest, "%s", msg)
	}
	rec := recorder{h: http.Header{}}
	engine.WriteError(&rec, e, id)
	if status != http.StatusNotImplemented && status != rec.status {
		rec.status = status // the status net/http chose; the body says why
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", rec.status, http.StatusText(rec.status))
	rec.h.Set("Content-Length", strconv.Itoa(len(rec.body)))
	rec.h.Set("Connection", "close") // net/http closes the connection next
	_ = rec.h.Write(&b)
	b.WriteString("\r\n")
	b.Write(rec.body)
	return b.Bytes(), e
}

// Write passes bytes to the connection, except net/http's own plain-text
// error reply, which it replaces by celflow's JSON one.
func (c *framedConn) Write(p []byte) (int, error) {
	status, reason, ok := netHTTPError(p)
	if !ok {
		return c.Conn.Write(p)
	}
	c.mu.Lock()
	raw := string(c.t.reqID) // the refused block's x-request-id, when it was read
	if raw == "" {
		raw = string(c.t.lastID)
	}
	c.mu.Unlock()
	id, _ := requestID(http.Header{"X-Request-Id": {raw}})
	if raw == "" {
		id, _ = requestID(http.Header{})
	}
	out, e := netHTTPErrorJSON(status, reason, id)
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	if c.log != nil && c.log.IsLevelEnabled(logrus.DebugLevel) {
		c.log.WithFields(logrus.Fields{"request_id": id, "status": status, "code": e.Code(), "remote": c.RemoteAddr().String()}).
			Debug("request refused by net/http before parsing: " + e.Msg)
	}
	return len(p), nil
}
