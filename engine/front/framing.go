package front

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
)

// Ambiguous request framing (RFC 9112 6.3, 11.2: request smuggling).
//
// net/http refuses some ambiguous shapes itself (differing Content-Length
// values: 400; a Transfer-Encoding other than one "chunked": 501; both with
// Connection: close), but it serves a request carrying BOTH Content-Length
// and Transfer-Encoding: chunked, deleting both headers before the handler
// sees them (transfer.go fixLength), and it ignores Transfer-Encoding on
// HTTP/1.0. A proxy in front that frames by the other header would see a
// different request boundary: the classic smuggling shape, which Envoy
// refuses with 400. The handler cannot see the raw headers, so each plain
// connection is wrapped in framedConn, which watches the bytes net/http
// reads: it follows request boundaries as net/http does (headers, then a
// Content-Length body or chunks) and marks the ordinal of the first request
// whose header block is ambiguous. That request's handler answers 400
// invalid_framing and the connection closes (badFraming). Tracking stops
// there: nothing after an ambiguous request is trusted or served.
//
// TLS connections are not wrapped (net/http must see the *tls.Conn itself);
// behind TLS only net/http's own checks apply.

// framedListener wraps accepted plain connections in framedConn.
type framedListener struct {
	net.Listener
	maxLine int // a header line longer than this stops tracking (net/http answers 431)
}

func (l framedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if _, ok := c.(*tls.Conn); ok {
		return c, nil
	}
	return &framedConn{Conn: c, t: framing{maxLine: l.maxLine}}, nil
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
	mu     sync.Mutex
	t      framing
	served int // handlers started on this connection
}

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.t.feed(p[:n])
		c.mu.Unlock()
	}
	return n, err
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

	blocks int    // header blocks completed
	bad    string // why request badAt is ambiguous
	badAt  int    // its ordinal (1-based)
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
		f.lines = 1
		f.http10 = len(line) >= 8 && string(line[len(line)-8:]) == "HTTP/1.0"
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
		}
		return
	}
	f.endBlock()
}

// endBlock decides a finished header block's framing and the next state.
func (f *framing) endBlock() {
	f.blocks++
	bad := ""
	var n int64
	switch {
	case f.folded:
		bad = "a header line is folded (obs-fold)"
	case f.teCount > 0 && f.clCount > 0:
		bad = "both Content-Length and Transfer-Encoding are present"
	case f.teCount > 0 && f.http10:
		bad = "Transfer-Encoding on an HTTP/1.0 request"
	case f.teCount > 1 || f.teCount == 1 && !equalFold(f.te, "chunked"):
		bad = "Transfer-Encoding other than exactly chunked"
	case f.clDiff:
		bad = "Content-Length values differ"
	case f.clCount > 0:
		var err error
		if n, err = strconv.ParseInt(string(f.cl), 10, 64); err != nil || n < 0 || f.cl[0] == '+' {
			bad = "Content-Length is not a number"
		}
	}
	te := f.teCount
	f.lines, f.http10, f.cl, f.clCount, f.clDiff, f.te, f.teCount, f.folded = 0, false, f.cl[:0], 0, false, f.te[:0], 0, false
	switch {
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
