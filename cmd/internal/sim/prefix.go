package sim

// prefixBlock is the block size of the gateway's per-endpoint prefix index
// and of produced KV, as vLLM's default KV block.
const prefixBlock = DefaultBlockSize

// PrefixCache is the Prefer: if-available view of a KVCache: a decode
// worker's (or the gateway's per-endpoint) idea of which prompts it can
// serve from cache. It reads the same whole blocks as the worker's
// cached_tokens, plus the prompt tails the KVCache records, so that a short
// prompt repeated to the same worker is a hit for this rule (a celflow
// convention; vLLM itself caches whole blocks only).
type PrefixCache struct {
	kv *KVCache
}

// NewPrefixCache keeps at most size blocks (minimum 1) of prefixBlock
// tokens, and as many prompt tails.
func NewPrefixCache(size int) *PrefixCache {
	return &PrefixCache{kv: NewKVCache(size, prefixBlock)}
}

// KV is the cache underneath.
func (c *PrefixCache) KV() *KVCache { return c.kv }

// Insert records p's blocks and tail as most recently used.
func (c *PrefixCache) Insert(p promptInfo) { c.kv.Insert(p) }

// Covered is the length of p's longest cached prefix (0 when none): whole
// blocks from the start, or all of p when its tail is recorded too.
func (c *PrefixCache) Covered(p promptInfo) int { return c.kv.covered(p) }

// Hit reports whether a cached prefix covers at least half of p's tokens:
// the rule both the worker's `Prefer: if-available` check and the gateway
// use. A repeated prompt always hits while it is cached.
func (c *PrefixCache) Hit(p promptInfo) bool {
	n := c.Covered(p)
	return n > 0 && 2*n >= len(p.Tokens)
}

// Len is the number of cached blocks and prompt tails.
func (c *PrefixCache) Len() int { return c.kv.entries() }
