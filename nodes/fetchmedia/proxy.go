package fetchmedia

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// tunnel dials media targets through the explicit media proxy
// (docs/protocol.md, fetch-media): it resolves the target itself, applies the
// guard to every address, and asks the proxy to CONNECT to the checked IP
// literal. The guard therefore judges the real target, never the proxy, and the
// proxy cannot re-resolve the name to something else. The proxy itself is
// celflow's infrastructure: it is dialled without the guard, and failing to
// reach it is a 502.
type tunnel struct {
	d     *dialer
	proxy *url.URL
}

// proxyError is the media proxy failing (bad_gateway, not the client's fault).
type proxyError struct {
	msg   string
	cause error
}

func (e *proxyError) Error() string { return e.msg }
func (e *proxyError) Unwrap() error { return e.cause }

func (t *tunnel) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	addrs, err := t.d.guard.resolve(ctx, t.d.lookup, host)
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort(addrs[0].String(), port)
	paddr := t.proxy.Host
	if t.proxy.Port() == "" {
		def := "80"
		if t.proxy.Scheme == "https" {
			def = "443"
		}
		paddr = net.JoinHostPort(t.proxy.Hostname(), def)
	}
	var plain net.Dialer
	conn, err := plain.DialContext(ctx, "tcp", paddr)
	if err != nil {
		return nil, &proxyError{msg: "media proxy unreachable", cause: err}
	}
	if t.proxy.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: t.proxy.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, &proxyError{msg: "media proxy unreachable (TLS)", cause: err}
		}
		conn = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if u := t.proxy.User; u != nil {
		pw, _ := u.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)) + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		conn.Close()
		return nil, &proxyError{msg: "media proxy unreachable", cause: err}
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		return nil, &proxyError{msg: "media proxy broke the CONNECT exchange", cause: err}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		if resp.StatusCode == http.StatusProxyAuthRequired {
			return nil, &proxyError{msg: "media proxy refused its credentials (HTTP 407)"}
		}
		// The proxy could not reach the (checked) target.
		return nil, &fetchError{msg: fmt.Sprintf("media proxy could not reach the host: HTTP %d", resp.StatusCode)}
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufConn reads what the proxy sent right after its CONNECT answer first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }
