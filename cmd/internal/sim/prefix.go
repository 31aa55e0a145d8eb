package sim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
)

// prefixBlock is the block size of prefix hashing, as vLLM hashes KV blocks.
const prefixBlock = 16

// PrefixCache is a bounded LRU of prompt-prefix hashes: a decode worker's
// (or the gateway's per-endpoint) idea of which prompts have KV cached.
// Inserting a prompt records the hash of every block-aligned prefix and of
// the whole prompt; mm hashes are folded in at their offsets.
type PrefixCache struct {
	mu  sync.Mutex
	cap int
	ll  *list.List // of prefixKey, most recent first
	m   map[prefixKey]*list.Element
}

type prefixKey struct {
	h uint64
	n int // prefix length in tokens
}

// NewPrefixCache keeps at most size prefix hashes (minimum 1).
func NewPrefixCache(size int) *PrefixCache {
	return &PrefixCache{cap: max(size, 1), ll: list.New(), m: map[prefixKey]*list.Element{}}
}

// prefixKeys lists the keys of p's block-aligned prefixes and of p itself.
func prefixKeys(p promptInfo) []prefixKey {
	h := fnv.New64a()
	var b [8]byte
	next := 0 // next item to fold, items are in offset order
	keys := make([]prefixKey, 0, len(p.Tokens)/prefixBlock+1)
	for i, t := range p.Tokens {
		for next < len(p.Items) && p.Items[next].Offset == i {
			h.Write([]byte(p.Items[next].Hash))
			next++
		}
		binary.LittleEndian.PutUint64(b[:], uint64(t))
		h.Write(b[:])
		if n := i + 1; n%prefixBlock == 0 || n == len(p.Tokens) {
			keys = append(keys, prefixKey{h.Sum64(), n})
		}
	}
	return keys
}

// Insert records p's prefixes as most recently used.
func (c *PrefixCache) Insert(p promptInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range prefixKeys(p) {
		if e, ok := c.m[k]; ok {
			c.ll.MoveToFront(e)
			continue
		}
		c.m[k] = c.ll.PushFront(k)
		for c.ll.Len() > c.cap {
			old := c.ll.Back()
			c.ll.Remove(old)
			delete(c.m, old.Value.(prefixKey))
		}
	}
}

// Covered is the length of p's longest cached prefix (0 when none).
func (c *PrefixCache) Covered(p promptInfo) int {
	keys := prefixKeys(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := c.m[keys[i]]; ok {
			c.ll.MoveToFront(e)
			return keys[i].n
		}
	}
	return 0
}

// Hit reports whether a cached prefix covers at least half of p's tokens:
// the rule both the worker's `Prefer: if-available` check and the gateway
// use. A repeated prompt always hits while it is cached.
func (c *PrefixCache) Hit(p promptInfo) bool {
	n := c.Covered(p)
	return n > 0 && 2*n >= len(p.Tokens)
}

// Len is the number of cached prefix hashes.
func (c *PrefixCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
