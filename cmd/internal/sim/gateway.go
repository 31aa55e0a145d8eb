package sim

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// GatewayConfig configures the Inference Gateway + EPP stand-in.
type GatewayConfig struct {
	Name                    string   // in records; default "gateway"
	Encode, Prefill, Decode []string // pool members' base URLs
	// Default receives requests without EPP-Profile (the HTTPRoute that
	// sends client traffic to celflow); "" answers them 400.
	Default         string
	PrefixCacheSize int // per decode member; default 4096
	RecordLimit     int // default 1024
	RecordBodyLimit int // default 1 MiB
	// UpstreamTLS verifies https:// members (nil: the system roots).
	UpstreamTLS *tls.Config
	// Pools are InferencePools beyond the roles', by name: a request whose
	// X-Celflow-Pool header names one goes to its members (an HTTPRoute
	// header match), picked as its EPP-Profile's pool would be; a name not
	// listed is 503. In-process only (no flag).
	Pools map[string][]string
}

// poolHeader is celflow's pool header (upstream.PoolHeader).
const poolHeader = "X-Celflow-Pool"

// Gateway routes by EPP-Profile to round-robin pool members through a
// streaming-safe reverse proxy that strips nothing but hop-by-hop headers.
// For decode it plays the EPP's prefix-aware scorer: it keeps one prefix
// index per decode member, learnt from the decode replies it relayed, sends a
// decode to the member holding the prompt's prefix when there is one, and
// answers `Prefer: if-available` on a miss with 412 without contacting any
// worker (docs/protocol.md, Conditional decode).
type Gateway struct {
	cfg   GatewayConfig
	pools map[Role]*pool
	named map[string]*pool // GatewayConfig.Pools
	def   *url.URL
	rec   *Recorder
	proxy *httputil.ReverseProxy
}

var _ http.Handler = (*Gateway)(nil)

type pool struct {
	members []*member
	next    atomic.Uint64
}

type member struct {
	url    *url.URL
	prefix *PrefixCache
}

// route is the per-request decision, passed to the proxy hooks.
type route struct {
	to     *member
	role   Role
	prompt *promptInfo // decode: the prompt to learn on a 2xx
	rec    *Record
}

type routeKey struct{}

// NewGateway builds a gateway from cfg.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if cfg.Name == "" {
		cfg.Name = "gateway"
	}
	if cfg.PrefixCacheSize <= 0 {
		cfg.PrefixCacheSize = 4096
	}
	if cfg.RecordLimit <= 0 {
		cfg.RecordLimit = 1024
	}
	if cfg.RecordBodyLimit <= 0 {
		cfg.RecordBodyLimit = 1 << 20
	}
	g := &Gateway{cfg: cfg, pools: map[Role]*pool{}, rec: NewRecorder(cfg.RecordLimit, cfg.RecordBodyLimit)}
	for role, urls := range map[Role][]string{RoleEncode: cfg.Encode, RolePrefill: cfg.Prefill, RoleDecode: cfg.Decode} {
		p := &pool{}
		for _, s := range urls {
			u, err := parseBase(s)
			if err != nil {
				return nil, fmt.Errorf("%s member: %v", role, err)
			}
			p.members = append(p.members, &member{url: u, prefix: NewPrefixCache(cfg.PrefixCacheSize)})
		}
		g.pools[role] = p
	}
	for name, urls := range cfg.Pools {
		p := &pool{}
		for _, s := range urls {
			u, err := parseBase(s)
			if err != nil {
				return nil, fmt.Errorf("pool %s member: %v", name, err)
			}
			p.members = append(p.members, &member{url: u, prefix: NewPrefixCache(cfg.PrefixCacheSize)})
		}
		if g.named == nil {
			g.named = map[string]*pool{}
		}
		g.named[name] = p
	}
	if cfg.Default != "" {
		u, err := parseBase(cfg.Default)
		if err != nil {
			return nil, fmt.Errorf("default: %v", err)
		}
		g.def = u
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		FlushInterval:  -1,
		Transport:      &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second, TLSClientConfig: cfg.UpstreamTLS},
		ModifyResponse: g.learn,
		ErrorHandler:   g.proxyError,
	}
	return g, nil
}

func parseBase(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("want an http(s) base URL, got %q", s)
	}
	return u, nil
}

// Records is the gateway's request log.
func (g *Gateway) Records() *Recorder { return g.rec }

// ServeHTTP routes one request. The record gets its role, upstream, cache
// verdict and status before the reply's body is relayed, and is done when
// the relay ends.
func (g *Gateway) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/sim/records" {
		g.rec.ServeHTTP(rw, r)
		return
	}
	start := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxBody))
	rec := g.rec.add(g.cfg.Name, r, body)
	sw := &statusWriter{ResponseWriter: rw}
	defer func() {
		g.rec.update(rec, func(x *Record) {
			x.Status, x.Done = sw.status, true
			x.Cancelled = r.Context().Err() != nil // the client left before the reply ended
			x.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		})
	}()
	fail := func(status int, msg string) {
		g.rec.update(rec, func(x *Record) { x.Status = status })
		writeError(sw, status, msg)
	}
	if err != nil {
		fail(http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	rt, status, msg := g.pick(r, body)
	rt.rec = rec
	g.rec.update(rec, func(x *Record) {
		x.Role = rt.role
		if rt.to != nil {
			x.Upstream = rt.to.url.String()
		}
		switch {
		case status == http.StatusPreconditionFailed:
			x.Cache = "miss"
		case rt.role == RoleDecode && rt.prompt != nil && rt.to.prefix.Hit(*rt.prompt):
			x.Cache = "hit"
		case rt.role == RoleDecode && rt.prompt != nil:
			x.Cache = "miss"
		}
	})
	if status != 0 {
		if status == http.StatusPreconditionFailed {
			sw.Header().Set("X-Sim-Cache", "miss")
		}
		fail(status, msg)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	g.proxy.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), routeKey{}, &rt)))
}

// pick chooses the member for a request, or a status and message to answer.
func (g *Gateway) pick(r *http.Request, body []byte) (route, int, string) {
	profile := strings.ToLower(strings.TrimSpace(r.Header.Get("EPP-Profile")))
	if profile == "" {
		if g.def == nil {
			return route{}, http.StatusBadRequest, "gateway: no EPP-Profile header and no default route"
		}
		return route{to: &member{url: g.def}}, 0, ""
	}
	role := Role(profile)
	p, ok := g.pools[role]
	if !ok {
		return route{}, http.StatusBadRequest, fmt.Sprintf("gateway: unknown EPP-Profile %q", profile)
	}
	if name := r.Header.Get(poolHeader); name != "" {
		if p = g.named[name]; p == nil {
			return route{role: role}, http.StatusServiceUnavailable, "gateway: no InferencePool " + name
		}
	}
	if len(p.members) == 0 {
		return route{role: role}, http.StatusServiceUnavailable, "gateway: no endpoints for profile " + profile
	}
	rt := route{role: role}
	if role == RoleDecode {
		if f, ok := pathFormat(r.URL.Path); ok {
			if req, err := parseRequest(f, body); err == nil {
				rt.prompt = &req.Prompt
			}
		}
		var best *member
		bestN := 0
		if rt.prompt != nil {
			for _, m := range p.members {
				if n := m.prefix.Covered(*rt.prompt); n > bestN && m.prefix.Hit(*rt.prompt) {
					best, bestN = m, n
				}
			}
		}
		if best != nil {
			rt.to = best
			return rt, 0, ""
		}
		if preferIfAvailable(r.Header) {
			return rt, http.StatusPreconditionFailed, "gateway: no decode endpoint has this prompt's prefix cached (Prefer: if-available)"
		}
	}
	rt.to = p.members[(p.next.Add(1)-1)%uint64(len(p.members))]
	return rt, 0, ""
}

func pathFormat(path string) (format, bool) {
	switch path {
	case "/v1/chat/completions":
		return fmtChat, true
	case "/v1/completions":
		return fmtCompletions, true
	case "/inference/v1/generate":
		return fmtGenerate, true
	}
	return 0, false
}

// forwardedHeaders are kept as the client sent them: Rewrite would drop them.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.SetURL(rt.to.url)
	for _, k := range forwardedHeaders {
		if v, ok := pr.In.Header[k]; ok {
			pr.Out.Header[k] = v
		}
	}
}

// learn records a decode's prompt in its member's prefix index once the
// member answered 2xx.
func (g *Gateway) learn(resp *http.Response) error {
	rt := resp.Request.Context().Value(routeKey{}).(*route)
	g.rec.update(rt.rec, func(x *Record) { x.Status = resp.StatusCode })
	if rt.role == RoleDecode && rt.prompt != nil && resp.StatusCode/100 == 2 {
		rt.to.prefix.Insert(*rt.prompt)
	}
	return nil
}

func (g *Gateway) proxyError(rw http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client left; nobody reads the reply
	}
	rt := r.Context().Value(routeKey{}).(*route)
	writeError(rw, http.StatusBadGateway, "gateway: upstream "+rt.to.url.String()+": "+err.Error())
}
