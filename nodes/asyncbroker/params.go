package asyncbroker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

type route struct {
	Model  string `json:"model"`
	Tenant string `json:"tenant"`
	Queue  string `json:"queue"`
	Tier   string `json:"tier"`
}

type objective struct {
	Reserved string `json:"reserved"`
	Overflow string `json:"overflow"`
}

type quota struct {
	Prefix        string           `json:"prefix"`
	Attribute     string           `json:"attribute"`
	Limits        map[string]int64 `json:"limits"`
	WindowSeconds int64            `json:"window_seconds"`
}

type params struct {
	Quota             *quota               `json:"quota"`
	ModeHeader        string               `json:"mode_header"`
	ModeHeaderAlias   string               `json:"mode_header_alias"`
	TenantHeader      string               `json:"tenant_header"`
	TenantHeaderAlias string               `json:"tenant_header_alias"`
	TimeoutHeader     string               `json:"timeout_header"`
	ObjectiveHeader   string               `json:"objective_header"`
	FairnessHeader    string               `json:"fairness_header"`
	DefaultQueue      string               `json:"default_queue"`
	DefaultTier       string               `json:"default_tier"`
	Routes            []route              `json:"routes"`
	Objectives        map[string]objective `json:"objectives"`
	ForwardHeaders    []string             `json:"forward_headers"`
}

// config is the compiled params: canonical header keys (direct map reads
// on the request path, no allocation), the route table, objectives.
type config struct {
	mode, modeAlias     string
	tenant, tenantAlias string
	timeout             string
	objective, fairness string
	defaultQueue        string
	defaultTier         string
	routes              []route
	objectives          map[string]objective
	forward             []string
	quota               *quota // nil: every request is reserved
}

func canon(s, def string) string {
	if s == "" {
		s = def
	}
	return textproto.CanonicalMIMEHeaderKey(s)
}

// parseParams reads and checks the params. queues and tiers, when non-nil,
// are the serve config's (async.queues, async.tiers): a route naming
// another is a load error.
func parseParams(raw json.RawMessage, queues, tiers []string) (*config, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	c := &config{
		mode: canon(p.ModeHeader, "x-llm-d-async-mode"), modeAlias: canon(p.ModeHeaderAlias, "X-AP-Mode"),
		tenant: canon(p.TenantHeader, "x-llm-d-tenant"), tenantAlias: canon(p.TenantHeaderAlias, "X-Team"),
		timeout:   canon(p.TimeoutHeader, "X-Request-Timeout-Seconds"),
		objective: canon(p.ObjectiveHeader, "x-llm-d-inference-objective"),
		fairness:  canon(p.FairnessHeader, "x-llm-d-inference-fairness-id"),
		routes:    p.Routes, objectives: p.Objectives,
		defaultQueue: p.DefaultQueue, defaultTier: p.DefaultTier,
	}
	if q := p.Quota; q != nil && len(q.Limits) > 0 {
		if q.Prefix == "" {
			q.Prefix = "quota:"
		}
		if q.Attribute == "" {
			q.Attribute = "userid"
		}
		if q.WindowSeconds <= 0 {
			q.WindowSeconds = 300
		}
		c.quota = q
	}
	if c.defaultQueue == "" {
		c.defaultQueue = "default"
	}
	if c.defaultTier == "" {
		c.defaultTier = "async"
	}
	c.forward = []string{"X-Llm-D-Slo-Ttft-Ms", "X-Llm-D-Slo-Tpot-Ms"}
	if p.ForwardHeaders != nil {
		c.forward = c.forward[:0]
		for _, h := range p.ForwardHeaders {
			c.forward = append(c.forward, textproto.CanonicalMIMEHeaderKey(h))
		}
	}
	var errs engine.ParamErrors
	check := func(path, what, v string, allowed []string) {
		if v == "" || allowed == nil {
			return
		}
		for _, a := range allowed {
			if a == v {
				return
			}
		}
		errs = append(errs, &engine.ParamError{Path: path,
			Msg: fmt.Sprintf("%s %q is not configured (async.%ss is [%s]): add it there or pick one of those", what, v, what, strings.Join(allowed, ", "))})
	}
	check("/default_queue", "queue", c.defaultQueue, queues)
	check("/default_tier", "tier", c.defaultTier, tiers)
	for i, r := range c.routes {
		check(fmt.Sprintf("/routes/%d/queue", i), "queue", r.Queue, queues)
		check(fmt.Sprintf("/routes/%d/tier", i), "tier", r.Tier, tiers)
	}
	for t := range c.objectives {
		check("/objectives/"+t, "tier", t, tiers)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// pick is the first route matching model and tenant.
func (c *config) pick(model, tenant string) (queue, tier string) {
	queue, tier = c.defaultQueue, c.defaultTier
	for _, r := range c.routes {
		if (r.Model == "" || r.Model == model) && (r.Tenant == "" || r.Tenant == tenant) {
			if r.Queue != "" {
				queue = r.Queue
			}
			if r.Tier != "" {
				tier = r.Tier
			}
			return
		}
	}
	return
}

// legHeader is what celflow stamps on every leg of a request of tier for
// tenant: the tier's objective for the quota class (reserved, or overflow
// when the tenant is over its quota and the tier names one) and the
// fairness id.
func (c *config) legHeader(tier, tenant string, overflow bool) http.Header {
	h := make(http.Header, 2)
	if o, ok := c.objectives[tier]; ok {
		name := o.Reserved
		if overflow && o.Overflow != "" {
			name = o.Overflow
		}
		if name != "" {
			h[c.objective] = []string{name}
		}
	}
	h[c.fairness] = []string{tenant}
	return h
}

// first returns the first value of either key ("" when neither is set).
func first(h http.Header, k, alias string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	if v := h[alias]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// tenantOf reads the tenant header: ok is false when it is ambiguous — both
// spellings present, or more than one value. The tenant scopes every
// result, so a client must not be able to add a value beside the one the
// edge set (first-value-wins would let it override): refuse instead.
func tenantOf(h http.Header, k, alias string) (string, bool) {
	n := len(h[k]) + len(h[alias])
	if k == alias {
		n = len(h[k])
	}
	if n > 1 {
		return "", false
	}
	return first(h, k, alias), true
}

// validTenant is docs/async.md's [A-Za-z0-9._-]{1,64} (a ':' would become part
// of Redis keys).
func validTenant(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// validID is ^[A-Za-z0-9-]{1,128}$.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
