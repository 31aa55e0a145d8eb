package upstream

import (
	"fmt"
	"sort"
)

// PoolHeader names the pool a target rule chose on gateway-mode legs, so
// the gateway's HTTPRoute can send them to that InferencePool (a header
// match). celflow owns it: a client's value never reaches a leg.
const PoolHeader = "X-Celflow-Pool"

// HasPool reports whether a leg can go to the named pool: in direct mode a
// configured pool (a role's or a named one); in gateway mode always (the
// gateway routes by PoolHeader).
func (c *Client) HasPool(name string) bool {
	if !c.impl.direct {
		return true
	}
	return c.impl.poolNamed(name) != nil
}

// PoolNames lists the direct-mode pools with endpoints, roles included,
// sorted (for diagnostics); nil in gateway mode.
func (c *Client) PoolNames() []string {
	var out []string
	for _, p := range c.impl.allPools() {
		out = append(out, string(p.role))
	}
	sort.Strings(out)
	return out
}

// PickPool is Pick for a named pool (direct mode), skipping excluded
// endpoint URLs when it can; in gateway mode it returns the gateway.
func (c *Client) PickPool(name string, exclude ...string) (*Target, error) {
	ci := c.impl
	if !ci.direct {
		return &Target{Base: ci.gateway, Host: ci.gatewayHost}, nil
	}
	p := ci.poolNamed(name)
	if p == nil {
		return nil, fmt.Errorf("%w: no pool named %q", ErrNoEndpoint, name)
	}
	return ci.pickIn(p, exclude, CacheKey{}), nil
}

// PredictHitIn is PredictHit within a named pool (direct mode).
func (c *Client) PredictHitIn(name string, tokens []int64) (*Target, bool) {
	if !c.impl.direct {
		return nil, false
	}
	return c.impl.predictHitIn(c.impl.poolNamed(name), CacheKey{Tokens: tokens})
}

func (c *client) poolNamed(name string) *pool {
	if i := roleIndex(Role(name)); i >= 0 {
		return c.pools[i]
	}
	return c.named[name]
}

// allPools is every direct-mode pool with endpoints: the roles' in role
// order, then the named ones by name.
func (c *client) allPools() []*pool {
	var out []*pool
	for _, p := range c.pools {
		if p != nil {
			out = append(out, p)
		}
	}
	names := make([]string, 0, len(c.named))
	for n := range c.named {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, c.named[n])
	}
	return out
}
