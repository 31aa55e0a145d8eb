package upstream

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// cacheSources holds the CacheSource installed per pool (SetCacheSource).
// The map is replaced whole on every change and read without a lock on the
// request path.
type cacheSources struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[*pool]CacheSource]
}

// of is the source installed for p, nil when none.
func (s *cacheSources) of(p *pool) CacheSource {
	if m := s.m.Load(); m != nil {
		return (*m)[p]
	}
	return nil
}

func (s *cacheSources) set(p *pool, src CacheSource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[*pool]CacheSource{}
	if m := s.m.Load(); m != nil {
		for k, v := range *m {
			next[k] = v
		}
	}
	if src == nil {
		delete(next, p)
	} else {
		next[p] = src
	}
	s.m.Store(&next)
}

// cacheSourceOf is the CacheSource that scoring consults for the endpoints
// of p before its prediction index; nil when none is installed.
func (c *client) cacheSourceOf(p *pool) CacheSource { return c.sources.of(p) }

// SetCacheSource installs s as the view of the KV caches of the direct-mode
// pool named pool ("" or "decode" for the decode role's, else a named
// pool's); nil removes it. The pool then asks s first for each endpoint and
// falls back to its prediction index where s has no trustworthy view. It is
// an error in gateway mode and for a pool that does not exist.
func (c *Client) SetCacheSource(pool string, s CacheSource) error {
	ci := c.impl
	if !ci.direct {
		return fmt.Errorf("a cache source needs direct mode")
	}
	if pool == "" {
		pool = string(RoleDecode)
	}
	p := ci.poolNamed(pool)
	if p == nil {
		return fmt.Errorf("%w: no pool named %q", ErrNoEndpoint, pool)
	}
	ci.sources.set(p, s)
	return nil
}

// CacheSourceOf is the source SetCacheSource installed for pool ("" for
// decode), nil when none (tests, diagnostics).
func (c *Client) CacheSourceOf(pool string) CacheSource {
	if pool == "" {
		pool = string(RoleDecode)
	}
	p := c.impl.poolNamed(pool)
	if p == nil {
		return nil
	}
	return c.impl.sources.of(p)
}

// BaseOf is how an endpoint's URL is spelled as CacheSource's base: without
// a trailing slash.
func BaseOf(url string) string {
	for len(url) > 0 && url[len(url)-1] == '/' {
		url = url[:len(url)-1]
	}
	return url
}

// ChainHash is celflow's block hash (the prefix index's): the name of a
// block given the name of the prefix before it. A KV-event index keys
// blocks with it so that one algorithm names a prompt's blocks on both
// sides, whatever hash the engine uses. PrefixSeed starts a chain.
func ChainHash(prev uint64, block []int64) uint64 { return chainHash(prev, block) }

// Mix64 is the finaliser ChainHash ends with, for folding further words
// (an adapter's or an image's hash) into a block's name.
func Mix64(x uint64) uint64 { return mix64(x) }

// PrefixSeed is the name of the empty prefix.
const PrefixSeed = hashSeed
