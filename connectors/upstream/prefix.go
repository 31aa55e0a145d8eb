package upstream

import (
	"math/bits"
	"sync"
)

// Conditional decode in direct mode (docs/protocol.md, Conditional
// decode): celflow plays the EPP's prefix-cache scorer with a model of
// vLLM's prefix cache. A prompt is cut into blocks of PrefixBlockTokens
// tokens; block i is named by a chained hash h_i = H(h_{i-1}, block_i), so
// a name stands for the whole prefix up to that block, as in vLLM. Each
// decode endpoint keeps a bounded set of the names of prompts sent to it.
//
// Decision: a prompt is a predicted hit on an endpoint when the name of its
// LAST FULL block is in that endpoint's index (or the pool's CacheSource
// says the endpoint holds every full block), i.e. decode would have to
// compute at most one block itself: the tokens after the last full block,
// or, for a prompt of exactly k blocks, the last block, which vLLM
// recomputes for its last token. A prompt shorter than one block has no
// full block and is a miss (vLLM caches only full blocks), unless
// ShortPromptTokens covers it.
//
// A prompt's LoRA adapter and media items are folded into the names
// (cachekey.go), as vLLM folds them into its block hashes; the target of a
// pick remembers them, so RecordPrefix names the blocks it records the same
// way. A wrong hit costs time (decode computes the prompt), never
// correctness.

// predictHit: see Client.PredictHit. Gateway mode always misses (the EPP
// answers 412 itself; the caller sends the leg).
func (c *client) predictHit(tokens []int64) (*Target, bool) {
	if !c.direct {
		return nil, false
	}
	return c.predictHitIn(c.pools[roleIndex(RoleDecode)], CacheKey{Tokens: tokens})
}

// predictHitIn predicts within one pool (the decode role's, or a named pool
// a target rule chose).
func (c *client) predictHitIn(p *pool, key CacheKey) (*Target, bool) {
	tokens := key.Tokens
	if p == nil || tokens == nil {
		return nil, false
	}
	if n := c.cfg.ShortPromptTokens; n > 0 && len(tokens) <= n {
		// Nothing of it can be cached: by rotation, or by load under the
		// cache-aware picker.
		return c.pickIn(p, nil, CacheKey{}), true
	}
	bs := c.cfg.PrefixBlockTokens
	if len(tokens) < bs {
		return nil, false
	}
	key, known := c.lora(p, key)
	if !known {
		// The pool's adapter list is not in yet (adapters.go): the
		// model may be an adapter whose blocks no index can name yet.
		return nil, false
	}
	buf := hashBufs.Get().(*[]uint64)
	names, ok := blockNames(key, bs, (*buf)[:0])
	var h uint64
	if ok {
		h = names[len(names)-1]
	}
	*buf = names[:0]
	hashBufs.Put(buf)
	if !ok {
		return nil, false
	}
	// Every healthy endpoint that holds the prefix is a candidate, not only
	// the next in rotation; the least loaded wins, ties by rotation. Where
	// the pool's CacheSource has a trustworthy view of an endpoint, it
	// decides for that endpoint (the same view the cache-aware picker
	// scores on); elsewhere the prediction index does.
	full := len(tokens) / bs * bs
	src := c.cacheSourceOf(p)
	if p.scraper != nil {
		p.scraper.bind(c.rt)
	}
	now := p.now().UnixNano()
	n := uint64(len(p.eps))
	start := p.next.Add(1) - 1
	var best *endpoint
	var bestN float64
	bestSrc := SourceIndex
	for k := range n {
		e := p.eps[(start+k)%n]
		if !e.healthy(now) {
			continue
		}
		held, from := false, SourceIndex
		if src != nil && !e.truth.distrusted(now) {
			if n, ok := src.Cached(e.base, key); ok {
				held, from = n >= full, SourceEvents
			} else {
				held = e.prefix.has(h)
			}
		} else {
			held = e.prefix.has(h)
		}
		if !held {
			continue
		}
		if in := p.load(e, now); best == nil || in < bestN {
			best, bestN, bestSrc = e, in, from
		}
	}
	if best == nil {
		return nil, false
	}
	t := p.take(best)
	t.key = key
	t.key.Tokens = nil
	predicted := min(full, (len(tokens)-1)/bs*bs)
	t.Route = &RouteInfo{Picker: pickPredict, CachedBlocks: predicted / bs, Load: bestN, Source: bestSrc,
		PromptTokens: len(tokens), Predicted: predicted}
	return t, true
}

// pickPredict names a predicted conditional-decode hit in RouteInfo.
const pickPredict = "predict"

// recordPrefix stores the names of every full block of tokens in the index
// of t's decode endpoint, under the adapter and media items t was picked for
// (Target.key). No-op for the gateway, other roles, or nil tokens.
func (c *client) recordPrefix(t *Target, tokens []int64) {
	if t == nil || t.ep == nil || t.ep.prefix == nil || len(tokens) == 0 || t.unnamed {
		return
	}
	bs := c.cfg.PrefixBlockTokens
	if len(tokens)/bs == 0 {
		return
	}
	k := t.key
	k.Tokens = tokens
	buf := hashBufs.Get().(*[]uint64)
	hs, ok := blockNames(k, bs, (*buf)[:0])
	if ok {
		t.ep.prefix.add(hs)
	}
	*buf = hs[:0]
	hashBufs.Put(buf)
}

var hashBufs = sync.Pool{New: func() any { b := make([]uint64, 0, 256); return &b }}

const hashSeed uint64 = 0x9e3779b97f4a7c15

// chainHash names block given the name of the prefix before it. Not
// cryptographic: a collision only mispredicts a hit. Two token ids are
// folded into one 64-bit word (the second rotated into the high half: exact
// for ids below 2^32, i.e. every vocabulary) so a multiply covers two ids;
// two independent lanes let consecutive multiplies overlap. Blocks do not
// wait on each other: only the final mix64 is chained. Against one
// multiply per id and two mix64 per block this names a 50k-token prompt in
// about 0.7 of the time (BenchmarkPrefixHash50k).
func chainHash(prev uint64, block []int64) uint64 {
	a, b := uint64(len(block)), uint64(0x6a09e667f3bcc908)
	i := 0
	for ; i+3 < len(block); i += 4 {
		a = (a ^ uint64(block[i]) ^ bits.RotateLeft64(uint64(block[i+1]), 32)) * 0xff51afd7ed558ccd
		b = (b ^ uint64(block[i+2]) ^ bits.RotateLeft64(uint64(block[i+3]), 32)) * 0xc4ceb9fe1a85ec53
		a ^= a >> 29
		b ^= b >> 29
	}
	for ; i < len(block); i++ {
		a = (a ^ uint64(block[i])) * 0xff51afd7ed558ccd
		a ^= a >> 29
	}
	return mix64(prev ^ a ^ b*0x9e3779b97f4a7c15)
}

// mix64 is splitmix64's finaliser: full avalanche of the block state.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// prefixIndex is a bounded set of block names with CLOCK eviction (an LRU
// approximation without a list to maintain on every hit).
type prefixIndex struct {
	mu   sync.Mutex
	cap  int
	slot nameTable // name → index in keys
	keys []uint64
	ref  []bool // referenced since the hand last passed
	hand int
}

func newPrefixIndex(capacity int) *prefixIndex {
	return &prefixIndex{cap: capacity}
}

func (x *prefixIndex) has(h uint64) bool {
	x.mu.Lock()
	i, ok := x.slot.find(x.keys, h)
	if ok {
		x.ref[i] = true
	}
	x.mu.Unlock()
	return ok
}

// add inserts the names of one prompt, in prefix order. Names are chained,
// so the longest prefix already present was recorded before: it is marked
// referenced and only the names after it are inserted (a repeated prompt
// costs one lookup, a follow-up turn only its new blocks). When one call
// brings more names than fit, the later (longer) prefixes survive, which
// are the ones a hit checks.
//
// The longest present prefix is found by bisection (a dozen lookups for a
// 50k-token prompt, where a scan from the end cost one per block for every
// new prompt). Presence is prefix-closed unless eviction took early names of
// a prompt; bisection may then stop below the longest present name, and the
// loop below marks the present names it meets and puts the missing ones
// back: never fewer names than the scan kept.
func (x *prefixIndex) add(hs []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(hs) == 0 {
		return
	}
	if i, ok := x.slot.find(x.keys, hs[len(hs)-1]); ok { // a repeated prompt
		x.ref[i] = true
		return
	}
	// Invariant: hs[lo] present (lo == -1: none), hs[hi] absent.
	lo, hi := -1, len(hs)-1
	for hi-lo > 1 {
		mid := (lo + hi) / 2 // lo >= -1 and hi >= lo+2: no overflow, no negative
		if _, ok := x.slot.find(x.keys, hs[mid]); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo >= 0 {
		i, _ := x.slot.find(x.keys, hs[lo])
		x.ref[i] = true
	}
	hs = hs[lo+1:]
	for _, h := range hs {
		if i, ok := x.slot.find(x.keys, h); ok {
			x.ref[i] = true
			continue
		}
		if len(x.keys) < x.cap {
			x.keys = append(x.keys, h)
			x.ref = append(x.ref, false)
			x.slot.insert(x.keys, int32(len(x.keys)-1))
			continue
		}
		for x.ref[x.hand] { // bounded: each pass clears one bit
			x.ref[x.hand] = false
			x.hand = (x.hand + 1) % x.cap
		}
		x.slot.remove(x.keys, x.keys[x.hand])
		x.keys[x.hand] = h
		x.slot.insert(x.keys, int32(x.hand))
		x.hand = (x.hand + 1) % x.cap
	}
}

// longest is how many of hs, from the first, the index holds: found by
// bisection, as add finds it (presence is prefix-closed unless eviction
// took an early name; then it may answer less, never more than is there,
// up to the last name it finds). It marks nothing referenced: scoring
// reads every endpoint's index, and only the one picked is recorded to.
func (x *prefixIndex) longest(hs []uint64) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(hs) == 0 || x.slot.n == 0 {
		return 0
	}
	if _, ok := x.slot.find(x.keys, hs[len(hs)-1]); ok {
		return len(hs)
	}
	lo, hi := -1, len(hs)-1 // hs[lo] present (-1: none), hs[hi] absent
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, ok := x.slot.find(x.keys, hs[mid]); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + 1
}

func (x *prefixIndex) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.slot.n
}
