package front

import (
	"net"
	"sync/atomic"
)

// The connection guard: the first wrapper around the listener, below TLS.
//
// server.max_connections caps the open client connections. Past the
// process's file-descriptor limit accept(2) fails with EMFILE, net/http
// backs off and retries, and new connections wait in the kernel's backlog
// (up to 25 s were measured) instead of being refused. The guard refuses
// above the cap at once, well before the fd limit: it accepts the
// connection and closes it with a reset (SO_LINGER 0). It writes no 503:
// the guard sits below TLS, where a plain-text reply would be garbage to a
// TLS client, and before any byte of the request has been read, so even a
// plain HTTP/1.1 client may be mid-write; a reset is what every client
// already treats as "connect failed, retry elsewhere", and it leaves no
// TIME_WAIT socket on celflow's side. netutil.LimitListener is not the
// answer: it stops accepting, which is the backlog wait again.
//
// An address refused by the early-reset policy (resets.go) is turned away
// the same way, before its TLS handshake costs anything.

// ConnObserver receives connection-level events (metrics). Methods must be
// safe for concurrent use and cheap.
type ConnObserver interface {
	// ConnRefused counts a connection closed at accept: reason is
	// RefusedMaxConnections or RefusedResets.
	ConnRefused(reason string)
	// EarlyReset counts a request its client abandoned early (resets.go).
	EarlyReset()
	// TLSHandshakeFailed counts a failed TLS handshake on the listener.
	TLSHandshakeFailed()
}

// Reasons of ConnObserver.ConnRefused.
const (
	RefusedMaxConnections = "max_connections"
	RefusedResets         = "client_resets"
)

// guardListener enforces the connection cap and the reset policy's
// refusals at accept.
type guardListener struct {
	net.Listener
	max    int64 // 0: no cap
	open   atomic.Int64
	resets *resetTable // nil: no reset policy
	obs    ConnObserver
	agg    *refusalLog
}

func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return c, err
		}
		if l.resets != nil {
			if key, ok := clientKey(c.RemoteAddr()); ok && l.resets.banned(key) {
				l.refuse(c, RefusedResets)
				continue
			}
		}
		if l.max > 0 && l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c, RefusedMaxConnections)
			continue
		}
		if l.max <= 0 {
			return c, nil
		}
		return &guardedConn{Conn: c, l: l}, nil
	}
}

// refuse counts c, then closes it with a reset: counted first, so that
// whoever sees the reset (a client, a test) also sees the count.
func (l *guardListener) refuse(c net.Conn, reason string) {
	if l.obs != nil {
		l.obs.ConnRefused(reason)
	}
	l.agg.add(reason)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// guardedConn gives its place under the cap back once, on the first Close.
type guardedConn struct {
	net.Conn
	l      *guardListener
	closed atomic.Bool
}

func (c *guardedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the TCP connection (limits.go and framing.go
// linger after a refusal through it).
func (c *guardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Bounds of the derived connection cap.
const (
	minDerivedConns  = 64
	maxDerivedConns  = 1 << 20
	fallbackMaxConns = 4096 // when the fd limit cannot be read
)

// DefaultMaxConnections is server.max_connections' default: half the
// process's file-descriptor limit (the other half is for the upstream
// legs' connections, the media fetches, Redis, the metrics listener and
// files), at least 64 and at most 2^20.
func DefaultMaxConnections() int {
	n := fdLimit()
	if n == 0 {
		return fallbackMaxConns
	}
	return int(min(max(n/2, minDerivedConns), maxDerivedConns))
}
