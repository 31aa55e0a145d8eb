package front

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/celflow/celflow/engine"
)

// Limits are the front's request-admission limits on what a client sends
// before its body (server.max_header_bytes, server.max_header_count).
type Limits struct {
	// MaxHeaderBytes caps the sum over header fields of name and value
	// lengths (Host included): 431 above it. 0 means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxHeaderCount caps the number of header fields (each value of a
	// repeated name counts, Host included): 431 above it. 0 means
	// DefaultMaxHeaderCount.
	MaxHeaderCount int
}

// Envoy's defaults (max_request_headers_kb 60, max_headers_count 100).
const (
	DefaultMaxHeaderBytes = 60 << 10
	DefaultMaxHeaderCount = 100
)

// The linger after a refusal sent before the body was read (413, 431,
// invalid framing): the connection is half-closed and up to drainBytes
// (or the body cap, when larger) of the rest are read and discarded for
// at most drainTime, so that a client still sending its body gets the
// reply instead of a TCP reset (closing a socket with unread data resets it).
const (
	drainBytes = 8 << 20
	drainTime  = 5 * time.Second
)

func (l Limits) withDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaderCount <= 0 {
		l.MaxHeaderCount = DefaultMaxHeaderCount
	}
	return l
}

// hardHeaderBytes is http.Server.MaxHeaderBytes: the ceiling above which
// net/http itself answers 431 (plain text, before any handler runs). It is
// well above the limit so that the JSON 431 covers the common case.
func (l Limits) hardHeaderBytes() int {
	return max(4*l.MaxHeaderBytes, http.DefaultMaxHeaderBytes)
}

// checkHeaders applies the header limits (no allocation).
func (l Limits) checkHeaders(r *http.Request) *engine.Error {
	count, size := 1, len("Host")+len(r.Host)
	for k, vs := range r.Header {
		count += len(vs)
		for _, v := range vs {
			size += len(k) + len(v)
		}
	}
	switch {
	case count > l.MaxHeaderCount:
		return engine.Errorf(engine.KindHeadersTooLarge, "request has %d header fields, more than server.max_header_count (%d)", count, l.MaxHeaderCount)
	case size > l.MaxHeaderBytes:
		return engine.Errorf(engine.KindHeadersTooLarge, "request headers total %d bytes, more than server.max_header_bytes (%d)", size, l.MaxHeaderBytes)
	}
	return nil
}

// admit runs the checks due before a request is routed: ambiguous framing
// (framing.go) and the header limits. It reports whether the request may go on;
// when not, the refusal was sent and the connection is closing.
func (s *Server) admit(x *exchange, r *http.Request) bool {
	if why := badFraming(r.Context()); why != "" {
		x.route = routeOf(r.URL.Path)
		// The connection closes after the reply; what follows the headers
		// is drained as raw bytes (its length is what is in doubt), never
		// read as a body or a next request.
		s.refuse(x, r, engine.Errorf(engine.KindBadFraming, "ambiguous request framing: %s", why), drainBytes)
		return false
	}
	if r.TLS != nil && r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
		// Under TLS the framing is not tracked (framing.go): a chunked
		// request ends its connection, so that bytes a proxy in front
		// framed differently (Content-Length) are never read as a next
		// request.
		x.Header().Set("Connection", "close")
	}
	if e := s.limits.checkHeaders(r); e != nil {
		x.route = routeOf(r.URL.Path)
		s.refuse(x, r, e, s.cur.Load().maxBody)
		return false
	}
	return true
}

// refuse answers e before (all of) the body was read, then closes the
// connection reliably: the reply goes out with Content-Length and
// Connection: close, the write side is half-closed, and up to drain bytes of
// the unread body are discarded before the close. HTTP/2 needs none of it
// (a stream ends on its own); there the reply is written as usual.
func (s *Server) refuse(x *exchange, r *http.Request, e *engine.Error, drain int64) {
	x.err = e
	rec := recorder{h: http.Header{}}
	engine.WriteError(&rec, e, x.id)
	h := x.Header()
	for k, vs := range rec.h {
		h[k] = vs
	}
	h.Set("Connection", "close")
	h.Set("Content-Length", strconv.Itoa(len(rec.body)))
	x.WriteHeader(rec.status)
	_, _ = x.Write(rec.body)
	if r.ProtoMajor != 1 {
		return
	}
	rc := http.NewResponseController(x)
	if rc.Flush() != nil {
		return
	}
	conn, brw, err := rc.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	if drain <= 0 {
		return
	}
	drain = max(drain, drainBytes)
	if r.ContentLength >= 0 && e.Kind != engine.KindBadFraming {
		drain = min(drain, r.ContentLength)
	}
	_ = conn.SetReadDeadline(time.Now().Add(drainTime))
	discard(brw.Reader, drain)
}

// discard reads and drops up to n bytes.
func discard(r *bufio.Reader, n int64) {
	_, _ = io.CopyN(io.Discard, r, n)
}

// recorder captures WriteError's reply (it stays the one place that formats
// error replies) so that refuse can send it with a Content-Length.
type recorder struct {
	h      http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(code int)        { r.status = code }
func (r *recorder) Write(b []byte) (int, error) { r.body = append(r.body, b...); return len(b), nil }
