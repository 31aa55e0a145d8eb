package sim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
	"time"
)

// DefaultBlockSize is vLLM's default KV block size in tokens.
const DefaultBlockSize = 16

// KVCache is the simulator's KV cache, modelled on vLLM's automatic prefix
// caching: the prompt is cut into whole blocks of blockSize tokens, each
// keyed by a chain hash (the hash of its parent block's key and its own
// tokens, multimodal item hashes folded in at their offsets), and only
// whole blocks are cached. It holds at most capacity blocks and evicts the
// least recently used one when full; it lives in memory, so a restart
// loses it. The last partial block of a prompt is not cached, as in vLLM,
// but its key is kept in a separate bounded set of prompt "tails" that only
// PrefixCache's Prefer: if-available rule reads (a celflow convention for
// short prompts, not a vLLM one): it never counts as cached tokens.
type KVCache struct {
	mu        sync.Mutex
	blockSize int
	capacity  int
	blocks    *list.List // of blockKey, most recent first
	bm        map[blockKey]*list.Element
	tails     *list.List // of blockKey, most recent first
	tm        map[blockKey]*list.Element
	pub       *kvPublisher // nil: no KV events (kvevents.go)
	seed      uint64       // seeds the engine hashes of the events
}

// publishTo makes the cache publish its changes as vLLM's KV events.
func (c *KVCache) publishTo(p *kvPublisher, seed uint64) {
	c.mu.Lock()
	c.pub, c.seed = p, seed
	c.mu.Unlock()
}

type blockKey struct {
	h uint64
	n int // prefix length in tokens that this key covers
}

// NewKVCache holds at most capacity blocks (min 1) of blockSize tokens
// (DefaultBlockSize when not positive).
func NewKVCache(capacity, blockSize int) *KVCache {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	return &KVCache{
		blockSize: blockSize, capacity: max(capacity, 1),
		blocks: list.New(), bm: map[blockKey]*list.Element{},
		tails: list.New(), tm: map[blockKey]*list.Element{},
	}
}

// chainKeys hashes p block by block: the keys of its whole blocks in order
// and, when p ends inside a block, the key of the whole prompt (tail; ok
// false otherwise). Each key's hash chains all tokens before it, so a block
// matches only under the same prefix.
func chainKeys(p promptInfo, blockSize int) (blocks []blockKey, tail blockKey, ok bool) {
	h := fnv.New64a()
	if p.LoRA != "" { // an adapter's blocks are its own (lora.go)
		h.Write([]byte("lora\x00" + p.LoRA + "\x00"))
	}
	var b [8]byte
	next := 0 // next item to fold, items are in offset order
	blocks = make([]blockKey, 0, len(p.Tokens)/blockSize)
	for i, t := range p.Tokens {
		for next < len(p.Items) && p.Items[next].Offset == i {
			h.Write([]byte(p.Items[next].Hash))
			next++
		}
		binary.LittleEndian.PutUint64(b[:], uint64(t))
		h.Write(b[:])
		if n := i + 1; n%blockSize == 0 {
			blocks = append(blocks, blockKey{h.Sum64(), n})
		} else if n == len(p.Tokens) {
			tail, ok = blockKey{h.Sum64(), n}, true
		}
	}
	return blocks, tail, ok
}

// BlockSize is the cache's block size in tokens.
func (c *KVCache) BlockSize() int { return c.blockSize }

// Capacity is the number of blocks the cache can hold.
func (c *KVCache) Capacity() int { return c.capacity }

// Blocks is the number of blocks held.
func (c *KVCache) Blocks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks.Len()
}

// Cacheable is how many of p's tokens a cache can ever serve, as vLLM
// counts them: the whole blocks within all but the last prompt token (vLLM
// always recomputes the last token to get its logits, so a prompt of
// exactly k blocks can hit at most k-1 of them).
func (c *KVCache) Cacheable(p promptInfo) int {
	if len(p.Tokens) == 0 {
		return 0
	}
	return (len(p.Tokens) - 1) / c.blockSize * c.blockSize
}

// Cached is the number of p's prompt tokens the cache holds, as vLLM
// reports usage.prompt_tokens_details.cached_tokens: the longest run of
// cached whole blocks from the start, times the block size, capped at
// Cacheable. The blocks hit become most recently used.
func (c *KVCache) Cached(p promptInfo) int {
	keys, _, _ := chainKeys(p, c.blockSize)
	keys = keys[:c.Cacheable(p)/c.blockSize]
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.hits(keys)
	return n * c.blockSize
}

// hits is how many of keys, from the first, the cache holds; those become
// most recently used. c.mu is held.
func (c *KVCache) hits(keys []blockKey) int {
	n := 0
	for _, k := range keys {
		if _, ok := c.bm[k]; !ok {
			break
		}
		n++
	}
	c.touch(keys[:n])
	return n
}

// covered is the length of p's longest cached prefix counting its tail:
// the whole blocks cached from the start, or all of p when every whole
// block and the tail are there. Hits become most recently used.
func (c *KVCache) covered(p promptInfo) int {
	keys, tail, hasTail := chainKeys(p, c.blockSize)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.hits(keys)
	if n == len(keys) && hasTail {
		if e, ok := c.tm[tail]; ok {
			c.tails.MoveToFront(e)
			return tail.n
		}
	}
	return n * c.blockSize
}

// touch makes keys most recently used, the first block last so that, as in
// vLLM's free queue, a prompt's later blocks are evicted before its earlier
// (more shared) ones.
func (c *KVCache) touch(keys []blockKey) {
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := c.bm[keys[i]]; ok {
			c.blocks.MoveToFront(e)
		}
	}
}

// Insert caches p's whole blocks (and records its tail), evicting the least
// recently used blocks beyond capacity. It returns how many blocks were new.
func (c *KVCache) Insert(p promptInfo) int {
	keys, tail, hasTail := chainKeys(p, c.blockSize)
	c.mu.Lock()
	defer c.mu.Unlock()
	added := 0
	var isNew []bool // per block, for the events
	if c.pub != nil {
		isNew = make([]bool, len(keys))
	}
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		if e, ok := c.bm[k]; ok {
			c.blocks.MoveToFront(e)
			continue
		}
		c.bm[k] = c.blocks.PushFront(k)
		added++
		if isNew != nil {
			isNew[i] = true
		}
	}
	var evicted []blockKey
	for c.blocks.Len() > c.capacity {
		old := c.blocks.Back()
		c.blocks.Remove(old)
		delete(c.bm, old.Value.(blockKey))
		if c.pub != nil {
			evicted = append(evicted, old.Value.(blockKey))
		}
	}
	if c.pub != nil && (added > 0 || len(evicted) > 0) {
		c.pub.publish(c.events(p, keys, isNew, evicted))
	}
	if hasTail {
		if e, ok := c.tm[tail]; ok {
			c.tails.MoveToFront(e)
		} else {
			c.tm[tail] = c.tails.PushFront(tail)
			for c.tails.Len() > c.capacity {
				old := c.tails.Back()
				c.tails.Remove(old)
				delete(c.tm, old.Value.(blockKey))
			}
		}
	}
	return added
}

// events describes one Insert as vLLM would: a BlockStored per run of
// consecutive new blocks (its parent the block before the run), then a
// BlockRemoved of the evicted ones. c.mu is held.
func (c *KVCache) events(p promptInfo, keys []blockKey, isNew []bool, evicted []blockKey) []kvEvent {
	var evs []kvEvent
	bs := c.blockSize
	mm := len(p.Items) > 0 || p.LoRA != ""
	for i := 0; i < len(keys); {
		if !isNew[i] {
			i++
			continue
		}
		ev := kvEvent{kind: "BlockStored", bs: bs, lora: p.LoRA, loraID: p.LoRAID}
		if i > 0 {
			ev.parent = engineHash(c.seed, keys[i-1])
		}
		for ; i < len(keys) && isNew[i]; i++ {
			ev.hashes = append(ev.hashes, engineHash(c.seed, keys[i]))
			ev.tokens = append(ev.tokens, p.Tokens[i*bs:(i+1)*bs]...)
			if mm { // vLLM's extra keys: the adapter's name first, then the items
				var ks []string
				if p.LoRA != "" {
					ks = append(ks, p.LoRA)
				}
				ev.extra = append(ev.extra, append(ks, itemsIn(p.Items, i*bs, (i+1)*bs)...))
			}
		}
		evs = append(evs, ev)
	}
	if len(evicted) > 0 {
		ev := kvEvent{kind: "BlockRemoved"}
		for _, k := range evicted {
			ev.hashes = append(ev.hashes, engineHash(c.seed, k))
		}
		evs = append(evs, ev)
	}
	return evs
}

// itemsIn is the hashes of the items overlapping tokens [from, to), as
// vLLM's extra keys name a block's multimodal inputs; nil when none.
func itemsIn(items []item, from, to int) []string {
	var out []string
	for _, it := range items {
		if it.Offset < to && it.Offset+max(it.Length, 1) > from {
			out = append(out, it.Hash)
		}
	}
	return out
}

// entries is the number of blocks and tails held.
func (c *KVCache) entries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks.Len() + c.tails.Len()
}

// answerLen is the length of each choice of req's answer, as plan sizes it: OutputTokens, at
// least min_tokens, cut to max_tokens.
func (w *Worker) answerLen(req *request) int {
	n := max(w.cfg.OutputTokens, int(req.MinTokens))
	if req.MaxTokens.Set && req.MaxTokens.V < int64(n) {
		n = int(req.MaxTokens.V)
	}
	return n
}

// kvBlocks is the number of KV blocks req holds while it runs: its prompt
// and every choice's answer, rounded up to whole blocks, as vLLM allocates.
func (w *Worker) kvBlocks(req *request) int {
	n := len(req.Prompt.Tokens) + req.N*w.answerLen(req)
	return (n + w.cache.blockSize - 1) / w.cache.blockSize
}

// prefillCost is the time to compute c's uncached prompt tokens. Encode
// computes no KV, and a decode that pulls its KV from a prefill computes
// none itself.
func (w *Worker) prefillCost(c *call) time.Duration {
	if w.cfg.PrefillPerToken <= 0 || c.role == RoleEncode || kvFlag(c.req.KV, "do_remote_prefill") {
		return 0
	}
	return time.Duration(len(c.req.Prompt.Tokens)-c.cached) * w.cfg.PrefillPerToken
}
