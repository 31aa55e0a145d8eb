package front

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// Ambiguous request framing (RFC 9112 6.3, 11.2: request smuggling).
//
// net/http serves a request carrying BOTH Content-Length and
// Transfer-Encoding: chunked, deleting both headers before the handler sees
// them (transfer.go fixLength); it ignores Transfer-Encoding on HTTP/1.0 and
// joins folded header lines. A proxy in front that frames by the other
// header would see a different request boundary: the classic smuggling
// shape, which Envoy refuses with 400. Other ambiguous shapes net/http
// refuses itself, but in plain text and with 501 for a Transfer-Encoding
// other than one "chunked". The handler cannot see the raw headers, so each
// plain connection is wrapped in framedConn, which watches the bytes
// net/http reads: it follows request boundaries as net/http does (headers,
// then a Content-Length body or chunks) and judges each header block.
//   - A shape net/http would serve: the ordinal of that request is marked;
//     its handler answers 400 invalid_framing and the connection closes
//     (badFraming), so the refusal is logged and counted like any reply.
//   - A shape net/http would refuse itself (differing Content-Length
//     values, an invalid one, a Transfer-Encoding other than exactly one
//     "chunked" on HTTP/1.1): net/http never sees the block; framedConn
//     writes the same JSON 400 itself, drains and closes.
// Tracking stops there: nothing after an ambiguous request is trusted or
// served.
//
// TLS connections are not wrapped (net/http must see the *tls.Conn itself,
// for ALPN and Request.TLS): there net/http's own checks apply, and admit
// (limits.go) closes the connection after every chunked HTTP/1.1 request.

// framedListener wraps accepted plain connections in framedConn.
type framedListener struct {
	net.Listener
	maxLine int // a header line longer than this stops tracking (net/http answers 431)
	log     *logrus.Logger
}

func (l framedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, ok := c.(*tls.Conn); ok {
		return c, nil
	}
	return &framedConn{Conn: c, t: framing{maxLine: l.maxLine}, log: l.log}, nil
}

type connKey struct{}

// connContext is http.Server.ConnContext: the handler finds its framedConn.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// framedConn is a net.Conn whose reads feed a framing tracker.
type framedConn struct {
	net.Conn
	log    *logrus.Logger
	mu     sync.Mutex
	t      framing
	served int  // handlers started on this connection
	closed bool // refused here: every later read fails
}

// errRefused ends net/http's reads after framedConn refused a request. It
// is a read *net.OpError, which net/http treats as a vanished client: it
// closes the connection without writing a reply of its own.
var errRefused = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("ambiguous request framing refused")}

func (c *framedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, errRefused
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.t.feed(p[:n])
		why, id := c.t.reject, string(c.t.reqID)
		c.closed = why != ""
		c.mu.Unlock()
		if why != "" {
			// A one-byte read is net/http's background read while a handler
			// may still be writing its reply: no second writer then; the
			// connection just closes.
			if len(p) > 1 {
				c.refuse(why, id)
			}
			return 0, errRefused
		}
	}
	return n, err
}

// refuse writes the 400 invalid_framing reply net/http would not have
// written as JSON, then half-closes and drains (limits.go) before net/http
// closes the connection.
func (c *framedConn) refuse(why, rawID string) {
	id, _ := requestID(http.Header{"X-Request-Id": {rawID}})
	if rawID == "" {
		id, _ = requestID(http.Header{})
	}
	e := engine.Errorf(engine.KindBadFraming, "ambiguous request framing: %s", why)
	rec := recorder{h: http.Header{}}
	engine.WriteError(&rec, e, id)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", rec.status, http.StatusText(rec.status))
	rec.h.Set("Content-Length", strconv.Itoa(len(rec.body)))
	_ = rec.h.Write(&b)
	b.WriteString("\r\n")
	b.Write(rec.body)
	_ = c.Conn.SetWriteDeadline(time.Now().Add(drainTime))
	_, _ = c.Conn.Write(b.Bytes())
	_ = c.CloseWrite()
	_ = c.Conn.SetReadDeadline(time.Now().Add(drainTime))
	_, _ = io.CopyN(io.Discard, c.Conn, drainBytes)
	if c.log != nil {
		c.log.WithFields(logrus.Fields{"request_id": id, "status": rec.status, "code": e.Code(), "remote": c.RemoteAddr().String()}).
			Warn("request refused before parsing: " + e.Msg)
	}
}

// CloseWrite half-closes a TCP connection (the linger after a refusal).
func (c *framedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// next is called once per request, as its handler starts: it reports why
// this request's framing is ambiguous ("" when it is not).
func (c *framedConn) next() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served++
	if c.t.bad != "" && c.served >= c.t.badAt {
		return c.t.bad
	}
	return ""
}

// badFraming returns why the request's framing is ambiguous, "" when it is
// not (or the connection is not tracked).
func badFraming(ctx context.Context) string {
	fc, _ := ctx.Value(connKey{}).(*framedConn)
	if fc == nil {
		return ""
	}
	return fc.next()
}
