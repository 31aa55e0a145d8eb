package upstream

import (
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/celflow/celflow/internal/tlsfiles"
)

// client is the implementation behind Client. Everything but the pools'
// health and prefix state is immutable after newClient.
type client struct {
	cfg         Config
	direct      bool
	gateway     string // base URL without trailing slash (gateway mode)
	gatewayHost string
	render      string           // render service base URL without trailing slash
	pools       [numRoles]*pool  // direct mode; nil entry = no endpoints
	named       map[string]*pool // direct mode: pools beyond the roles', chosen by a node's target rules
	rt          *http.Transport
	bases       *baseCache          // parsed base URLs, so a leg does not parse its URL
	owned       map[string]struct{} // Config.OwnedHeaders, canonical; nil when none
	health      healthHook          // SetHealthHook's function, read by the pools
	sources     cacheSources        // SetCacheSource's sources per pool (cachesource_set.go)
	tls         *tlsfiles.Client    // upstream.tls material; nil = crypto/tls defaults
	// gwInflight counts gateway-mode legs per role between Pick and Done.
	gwInflight [numRoles]atomic.Int64
	gwDone     [numRoles]func(failed bool)
}

// inFlight sums a role's legs in flight: its endpoints' counts in direct
// mode, the gateway's per-role count otherwise.
func (c *client) inFlight(r Role) int64 {
	i := roleIndex(r)
	if i < 0 {
		return 0
	}
	if !c.direct {
		return c.gwInflight[i].Load()
	}
	var n int64
	if p := c.pools[i]; p != nil {
		for _, e := range p.eps {
			n += e.inflight.Load()
		}
	}
	return n
}

const numRoles = 3

// roleIndex maps a role to its pool slot; -1 for render ("") or unknown.
func roleIndex(r Role) int {
	switch r {
	case RoleEncode:
		return 0
	case RolePrefill:
		return 1
	case RoleDecode:
		return 2
	}
	return -1
}

func newClient(cfg Config) (*Client, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	c := &client{cfg: cfg, rt: newTransport(cfg), render: strings.TrimRight(cfg.Render, "/")}
	for i := range c.gwDone {
		n := &c.gwInflight[i]
		c.gwDone[i] = func(bool) { n.Add(-1) } // built once: a gateway Pick allocates no closure
	}
	if cfg.TLS.Configured() {
		if c.tls, err = tlsfiles.NewClient(cfg.TLS); err != nil {
			return nil, tlsErrors(err)
		}
		c.rt.DialTLSContext = c.tls.DialTLS(c.rt.DialContext)
	}
	for _, name := range cfg.OwnedHeaders {
		if c.owned == nil {
			c.owned = map[string]struct{}{}
		}
		c.owned[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))] = struct{}{}
	}
	switch cfg.Mode {
	case modeGateway:
		c.gateway = strings.TrimRight(cfg.Gateway, "/")
		c.gatewayHost = hostOf(c.gateway)
	case modeDirect:
		c.direct = true
		for r, eps := range cfg.Pools {
			if len(eps) == 0 {
				continue
			}
			p := newPool(r, eps, cfg)
			p.hook = &c.health
			if i := roleIndex(r); i >= 0 {
				c.pools[i] = p
				continue
			}
			if c.named == nil {
				c.named = map[string]*pool{}
			}
			c.named[string(r)] = p
		}
	}
	bases := []string{c.gateway, c.render}
	for _, p := range c.allPools() {
		for _, e := range p.eps {
			bases = append(bases, e.base)
		}
	}
	c.bases = newBaseCache(bases...)
	return &Client{impl: c}, nil
}

// newTransport is the one transport of a Client. Proxy is nil on purpose:
// render and worker legs never go through HTTP_PROXY (docs/protocol.md).
// There is no ResponseHeaderTimeout: time to first byte is a
// per-leg budget (Leg.TTFB). HTTP/2 is not attempted: vLLM speaks HTTP/1.1
// and h2 would put every leg to a worker on one TCP connection.
func newTransport(cfg Config) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          0, // no global cap; the per-host cap bounds it
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		MaxConnsPerHost:       cfg.MaxConnsPerHost,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 0,
		ForceAttemptHTTP2:     false,
		// Bigger buffers than the 4 KiB default: legs carry prompts of
		// hundreds of KiB and fewer syscalls per leg matter;
		// kept modest because every pooled connection holds both.
		WriteBufferSize: 16 << 10,
		ReadBufferSize:  8 << 10,
	}
}

func (c *client) hasRole(r Role) bool {
	if !c.direct {
		return roleIndex(r) >= 0
	}
	i := roleIndex(r)
	return i >= 0 && c.pools[i] != nil
}

// hostOf is the host name (no port, no brackets) of a base URL.
func hostOf(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// CloseIdle closes the idle keep-alive connections of the client (shutdown,
// tests).
func (c *Client) CloseIdle() { c.impl.rt.CloseIdleConnections() }
