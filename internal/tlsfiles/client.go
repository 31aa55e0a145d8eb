package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ClientConfig is the `upstream.tls:` section: how celflow verifies https://
// workers, the gateway and render, and the certificate it shows them.
type ClientConfig struct {
	// CAFile: PEM bundle of the roots that sign the upstreams' certificates;
	// "" trusts the system roots.
	CAFile string
	// CertFile and KeyFile: celflow's client certificate (mTLS to workers).
	CertFile, KeyFile string
	// ServerName overrides the name verified (and sent as SNI), for
	// upstreams addressed by IP with a certificate naming a service.
	ServerName string
	MinVersion string // "1.2" (default) or "1.3"
	// InsecureSkipVerify turns verification off. Only when set explicitly;
	// the caller logs it at warning level on every load.
	InsecureSkipVerify bool
	ReloadInterval     time.Duration // file poll; 0 = on SIGHUP only
}

// Configured reports whether any setting differs from the stdlib defaults.
func (c ClientConfig) Configured() bool { return c != (ClientConfig{ReloadInterval: c.ReloadInterval}) }

// Check reports settings that cannot work together, each prefixed by its
// key under upstream.tls.
func (c ClientConfig) Check() []error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, keyErr("cert_file", "cert_file and key_file go together"))
	}
	if c.InsecureSkipVerify && c.CAFile != "" {
		errs = append(errs, keyErr("insecure_skip_verify", "ca_file is unused when verification is off; drop one"))
	}
	if _, err := version(c.MinVersion); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Client is the upstream transport's TLS material. The CA pool and the
// client certificate are read from the current snapshot at each new
// connection, so Reload applies to new connections while pooled ones keep
// theirs.
type Client struct {
	cfg ClientConfig
	cur atomic.Pointer[clientSnap]

	mu     sync.Mutex // one reload at a time
	badSum [32]byte
}

type clientSnap struct {
	sum   [32]byte
	roots *x509.CertPool   // nil: system roots
	cert  *tls.Certificate // empty: no client certificate
}

// NewClient loads cfg's files.
func NewClient(cfg ClientConfig) (*Client, error) {
	if errs := cfg.Check(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c := &Client{cfg: cfg}
	snap, _, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(snap)
	return c, nil
}

// HandshakeTimeout bounds an upstream TLS handshake (http.Transport's
// TLSHandshakeTimeout does not apply to a DialTLSContext).
const HandshakeTimeout = 10 * time.Second

// DialTLS wraps a TCP dialer into the transport's DialTLSContext: each new
// connection is handshaken with a config built from the snapshot current at
// dial time (roots and client certificate), verified by crypto/tls itself
// against ServerName, or the host of the address dialled. Pooled
// connections keep the material they were made with.
func (c *Client) DialTLS(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		conf := c.config(addr)
		tc := tls.Client(raw, conf)
		hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
}

// config is the handshake config of one connection to addr (host:port).
func (c *Client) config(addr string) *tls.Config {
	snap := c.cur.Load()
	conf := &tls.Config{
		ServerName:         c.cfg.ServerName,
		RootCAs:            snap.roots,
		InsecureSkipVerify: c.cfg.InsecureSkipVerify,
		NextProtos:         []string{"http/1.1"}, // legs never use h2 (one TCP connection per leg)
	}
	conf.MinVersion, _ = version(c.cfg.MinVersion)
	if conf.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		conf.ServerName = host
	}
	if snap.cert.Certificate != nil {
		conf.Certificates = []tls.Certificate{*snap.cert}
	}
	return conf
}

// Reload re-reads the files: nil when the new set serves new connections,
// ErrUnchanged when nothing changed, another error when the set is broken
// (the previous one stays).
func (c *Client) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	snap, sum, err := settle(c.load)
	if err != nil {
		if sum != [32]byte{} && sum == c.badSum {
			return ErrUnchanged
		}
		c.badSum = sum
		return err
	}
	if snap.sum == c.cur.Load().sum {
		return ErrUnchanged
	}
	c.badSum = [32]byte{}
	c.cur.Store(snap)
	return nil
}

// Leaf is the client certificate presented now, nil when none.
func (c *Client) Leaf() *x509.Certificate { return c.cur.Load().cert.Leaf }

func (c *Client) load() (*clientSnap, [32]byte, error) {
	fs, err := readFiles("", c.cfg.CAFile, c.cfg.CertFile, c.cfg.KeyFile)
	if err != nil {
		return nil, [32]byte{}, err
	}
	snap := &clientSnap{sum: fs.sum, cert: &tls.Certificate{}}
	if c.cfg.CAFile != "" {
		if snap.roots, err = pool(fs, c.cfg.CAFile); err != nil {
			return nil, fs.sum, err
		}
	}
	if c.cfg.CertFile != "" {
		if snap.cert, err = pair(fs, c.cfg.CertFile, c.cfg.KeyFile); err != nil {
			return nil, fs.sum, fmt.Errorf("client certificate: %w", err)
		}
	}
	return snap, fs.sum, nil
}
