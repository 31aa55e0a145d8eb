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
// TLS connections are not wrapped (net/http must see the *tls.Conn itself);
// behind TLS only net/http's own checks apply.

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

// framing states.
const (
	fsHeader    = iota // reading a header block's lines
	fsBody             // a Content-Length body: remain bytes left
	fsChunkSize        // a chunk-size line
	fsChunkData        // chunk data: remain bytes left, then its CRLF line
	fsChunkEnd         // the CRLF after chunk data
	fsTrailer          // trailer lines until the empty one
	fsDead             // not tracking any more
)

// framing follows HTTP/1.x request boundaries in a byte stream. It is not a
// validating parser: whatever net/http refuses ends the connection anyway,
// so on anything unexpected it stops (fsDead) rather than guess.
type framing struct {
	maxLine int
	state   int
	line    []byte // the current line, without its '\n'
	remain  int64

	// The header block being read.
	lines   int  // lines of the block so far, the request line included
	http10  bool // the request line says HTTP/1.0
	cl      []byte
	clCount int
	clDiff  bool
	te      []byte
	teCount int
	folded  bool

	reqID []byte // the block's x-request-id (cut at MaxRequestIDLen+1)

	blocks int    // header blocks completed
	bad    string // why request badAt is ambiguous (net/http would serve it)
	badAt  int    // its ordinal (1-based)
	reject string // why the last block is ambiguous in a way net/http refuses itself
}

func (f *framing) feed(p []byte) {
	for len(p) > 0 && f.state != fsDead {
		switch f.state {
		case fsBody, fsChunkData:
			k := int64(len(p))
			if k > f.remain {
				k = f.remain
			}
			f.remain -= k
			p = p[k:]
			if f.remain == 0 {
				if f.state == fsBody {
					f.state = fsHeader
				} else {
					f.state = fsChunkEnd
				}
			}
			continue
		}
		i := 0
		for i < len(p) && p[i] != '\n' {
			i++
		}
		if len(f.line)+i > f.maxLine {
			f.state = fsDead
			return
		}
		f.line = append(f.line, p[:i]...)
		if i == len(p) {
			return // the line continues in a later read
		}
		p = p[i+1:]
		line := f.line
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		f.onLine(line)
		f.line = f.line[:0]
	}
}

// onLine handles one complete line in a line-oriented state.
func (f *framing) onLine(line []byte) {
	switch f.state {
	case fsHeader:
		f.headerLine(line)
	case fsChunkSize:
		n, ok := chunkSize(line)
		switch {
		case !ok:
			f.state = fsDead
		case n == 0:
			f.state = fsTrailer
		default:
			f.state, f.remain = fsChunkData, n
		}
	case fsChunkEnd:
		if len(line) != 0 {
			f.state = fsDead
			return
		}
		f.state = fsChunkSize
	case fsTrailer:
		if len(line) == 0 {
			f.state = fsHeader
		}
	}
}

func (f *framing) headerLine(line []byte) {
	if f.lines == 0 {
		if !requestLine(line) {
			// Not HTTP/1.x text (TLS records, if a server ever wraps this
			// connection in TLS itself, or garbage net/http refuses): stop,
			// rather than read framing into bytes that have none.
			f.state = fsDead
			return
		}
		f.lines = 1
		f.http10 = string(line[len(line)-8:]) == "HTTP/1.0"
		return
	}
	if len(line) > 0 {
		f.lines++
		if line[0] == ' ' || line[0] == '\t' {
			f.folded = true
			return
		}
		name, val, ok := cutColon(line)
		if !ok {
			return
		}
		switch {
		case equalFold(name, "content-length"):
			v := trimOWS(val)
			if f.clCount > 0 && string(v) != string(f.cl) {
				f.clDiff = true
			}
			f.cl = append(f.cl[:0], v...)
			f.clCount++
		case equalFold(name, "transfer-encoding"):
			f.te = append(f.te[:0], trimOWS(val)...)
			f.teCount++
		case equalFold(name, "x-request-id") && len(f.reqID) == 0:
			v := trimOWS(val)
			f.reqID = append(f.reqID[:0], v[:min(len(v), MaxRequestIDLen+1)]...)
		}
		return
	}
	f.endBlock()
}

// endBlock decides a finished header block's framing and the next state,
// following net/http's order (transfer.go): Transfer-Encoding first (only on
// HTTP/1.1), then the Content-Length values.
func (f *framing) endBlock() {
	f.blocks++
	var bad, reject string
	var n int64
	clOK := true
	if f.clCount > 0 {
		var err error
		n, err = strconv.ParseInt(string(f.cl), 10, 64)
		clOK = err == nil && n >= 0 && f.cl[0] != '+'
	}
	switch {
	case f.folded:
		// net/http joins folded lines: what it reads as the framing
		// headers is not what a proxy may read.
		bad = "a header line is folded (obs-fold)"
	case !f.http10 && (f.teCount > 1 || f.teCount == 1 && !equalFold(f.te, "chunked")):
		reject = "Transfer-Encoding other than exactly chunked"
	case f.clDiff:
		reject = "Content-Length values differ"
	case !clOK:
		reject = "Content-Length is not a number"
	case f.teCount > 0 && f.http10:
		bad = "Transfer-Encoding on an HTTP/1.0 request"
	case f.teCount > 0 && f.clCount > 0:
		bad = "both Content-Length and Transfer-Encoding are present"
	}
	te := f.teCount
	f.lines, f.http10, f.cl, f.clCount, f.clDiff, f.te, f.teCount, f.folded, f.reqID =
		0, false, f.cl[:0], 0, false, f.te[:0], 0, false, f.reqID[:0]
	switch {
	case reject != "":
		f.reject, f.state = reject, fsDead
	case bad != "":
		f.bad, f.badAt, f.state = bad, f.blocks, fsDead
	case te > 0:
		f.state = fsChunkSize
	case n > 0:
		f.state, f.remain = fsBody, n
	default:
		f.state = fsHeader
	}
}

// requestLine: the line ends in " HTTP/1.<digit>", as every request line
// net/http serves does (it accepts any HTTP/1 minor version and raw bytes in
// the target, so nothing else is required here).
func requestLine(line []byte) bool {
	n := len(line)
	return n >= 10 && string(line[n-9:n-1]) == " HTTP/1." && line[n-1] >= '0' && line[n-1] <= '9'
}

// chunkSize parses a chunk-size line: hex digits, then optional extensions.
func chunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			goto done
		}
		if n > (1<<62)>>4 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
done:
	if i == 0 {
		return 0, false
	}
	rest := trimOWS(line[i:])
	return n, len(rest) == 0 || rest[0] == ';'
}

func cutColon(line []byte) (name, val []byte, ok bool) {
	for i, c := range line {
		if c == ':' {
			return line[:i], line[i+1:], true
		}
	}
	return nil, nil, false
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold compares ASCII case-insensitively against a lower-case want.
func equalFold(b []byte, want string) bool {
	if len(b) != len(want) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}
