package kvevents

import (
	"container/list"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
)

// Defaults of Settings (docs/configuration.md, upstream.kv_events).
const (
	DefaultStaleAfter         = 30 * time.Second
	DefaultMaxBlocksPerWorker = 65536
)

// maxMMStates bounds the key states a multimodal lookup follows per block.
const maxMMStates = 16

// workerIndex is one worker's view: the blocks it holds, keyed by celflow's
// chain hash of their token ids, and how far that view can be trusted.
type workerIndex struct {
	base string // the endpoint URL without trailing slash, as CacheSource names it

	mu       sync.RWMutex
	bs       int              // block size of the worker's events; 0 before the first BlockStored
	keys     map[uint64]int32 // celflow key → engine blocks naming it
	byEngine map[Hash]*list.Element
	order    *list.List // of *block, oldest first
	max      int
	kinds    map[int64]string // kv_cache_spec_kind per group_idx, as BlockStored announced it

	// Trust: see trusted. Guarded by mu.
	synced    bool      // a batch was applied since the view was last emptied by a reconnect
	gapped    bool      // batches were lost and could not be replayed
	connected bool      // connect topology: the SUB holds a connection; bind: always true
	downSince time.Time // connect topology: when the connection was lost (zero: never connected)
	lastBatch time.Time // when the last batch was applied
	lag       time.Duration

	batches, events, gaps, replayed, replayFailures, decodeErrors, orphans, restarts atomic.Int64
	connectFailures                                                                  atomic.Int64
}

// block is one engine block the worker holds.
type block struct {
	engine Hash
	key    uint64
	lastMM uint64 // the last multimodal item folded into key (0: none), to see an item continue into the next block
}

func newWorkerIndex(base string, max int) *workerIndex {
	return &workerIndex{base: base, max: max, keys: map[uint64]int32{}, byEngine: map[Hash]*list.Element{}, order: list.New(), connected: true,
		kinds: map[int64]string{}}
}

// clear forgets every block (AllBlocksCleared, a restart, a gap). w.mu is held.
func (w *workerIndex) clear() {
	clear(w.keys)
	clear(w.byEngine)
	w.order.Init()
}

// put records engine block h under key, refreshing it when present. When
// the worker holds more than max blocks, the oldest go. w.mu is held.
func (w *workerIndex) put(h Hash, key, lastMM uint64) {
	if el, ok := w.byEngine[h]; ok {
		b := el.Value.(*block)
		if b.key != key { // the engine reused a hash for other tokens: take the new ones
			w.unref(b.key)
			w.keys[key]++
			b.key = key
		}
		b.lastMM = lastMM
		w.order.MoveToBack(el)
		return
	}
	w.byEngine[h] = w.order.PushBack(&block{engine: h, key: key, lastMM: lastMM})
	w.keys[key]++
	for w.order.Len() > w.max {
		w.drop(w.order.Front())
	}
}

func (w *workerIndex) drop(el *list.Element) {
	b := el.Value.(*block)
	w.order.Remove(el)
	delete(w.byEngine, b.engine)
	w.unref(b.key)
}

func (w *workerIndex) unref(key uint64) {
	if n := w.keys[key] - 1; n > 0 {
		w.keys[key] = n
	} else {
		delete(w.keys, key)
	}
}

// apply folds one batch's events into the view. now is when it was
// received. w.mu is held.
func (w *workerIndex) apply(b *Batch, now time.Time) {
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case AllBlocksCleared:
			w.clear()
			w.gapped = false
		case BlockRemoved:
			if !gpu(e.Medium) || !w.counts(e) {
				continue
			}
			for _, h := range e.BlockHashes {
				if el, ok := w.byEngine[h]; ok {
					w.drop(el)
				}
			}
		case BlockStored:
			if e.HasGroup && e.SpecKind != "" {
				w.kinds[e.Group] = e.SpecKind
			}
			if !gpu(e.Medium) || !w.counts(e) || len(e.TokenIDs) == 0 {
				continue
			}
			w.store(e)
		}
	}
	w.events.Add(int64(len(b.Events)))
	w.batches.Add(1)
	w.synced = true
	w.lastBatch = now
	if b.TS > 0 {
		w.lag = now.Sub(time.Unix(0, int64(b.TS*1e9)))
	}
}

// gpu: only blocks in the GPU cache count as cached for routing; vLLM names
// no medium (nil) or "GPU" for them, and "CPU" (or a connector's tier) for
// offloaded copies, which are tracked by their own events.
func gpu(medium string) bool { return medium == "" || medium == "GPU" }

// counts says whether an event's KV cache group is the one a prefix hit
// needs: events without group_idx (one group), a group announced as
// full_attention, or, before any announcement, group 0. A sliding-window
// group drops old blocks by design; its removals must not remove what the
// full-attention group holds. w.mu is held.
func (w *workerIndex) counts(e *Event) bool {
	if !e.HasGroup {
		return true
	}
	if k, ok := w.kinds[e.Group]; ok {
		return k == "full_attention"
	}
	return e.Group == 0
}

func (w *workerIndex) store(e *Event) {
	bs := e.BlockSize
	if w.bs != 0 && w.bs != bs {
		// A worker's block size is fixed for its life: another one is
		// another engine behind the same address.
		w.clear()
	}
	w.bs = bs
	lora := loraOf(e)
	key, lastMM := seedKey(lora), uint64(0)
	if e.HasParent {
		el, ok := w.byEngine[e.Parent]
		if !ok {
			// The parent was stored before this view began (or was
			// evicted from it): these blocks cannot be named. Only a
			// miss results.
			w.orphans.Add(1)
			return
		}
		p := el.Value.(*block)
		key, lastMM = p.key, p.lastMM
	}
	for i, h := range e.BlockHashes {
		key = upstream.ChainHash(key, e.TokenIDs[i*bs:(i+1)*bs])
		if e.ExtraKeys != nil {
			first := true
			for _, s := range e.ExtraKeys[i] {
				if s == e.LoRAName && s != "" {
					continue // the adapter is in the seed
				}
				ih := itemHash(s)
				if first && ih == lastMM {
					first = false
					continue // the item that began in the previous block
				}
				first = false
				key, lastMM = foldItem(key, ih), ih
			}
		}
		w.put(h, key, lastMM)
	}
}

// loraOf names the event's adapter as a request names it: lora_name, or for
// a vLLM that sends only the deprecated lora_id, "#<id>" (which a request
// naming its adapter never matches: a miss, not a wrong hit).
func loraOf(e *Event) string {
	if e.LoRAName != "" {
		return e.LoRAName
	}
	if e.LoRAID != 0 {
		return fmt.Sprintf("#%d", e.LoRAID)
	}
	return ""
}

// seedKey starts a prompt's chain: the empty prefix for the base model, a
// different one per adapter, so blocks of one adapter never name blocks of
// another.
func seedKey(lora string) uint64 {
	if lora == "" {
		return upstream.PrefixSeed
	}
	return upstream.Mix64(upstream.PrefixSeed ^ itemHash("lora\x00"+lora))
}

func itemHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64() | 1 // never 0: 0 means "no item"
}

// foldItem folds a multimodal item that begins in a block into its key.
func foldItem(key, item uint64) uint64 {
	return upstream.Mix64(key ^ item*0x9e3779b97f4a7c15)
}

// cached is how many leading blocks of k the worker holds, counted with
// block size bs.
func (w *workerIndex) cached(k upstream.CacheKey, bs int) int {
	nb := len(k.Tokens) / bs
	if nb == 0 || len(w.keys) == 0 {
		return 0
	}
	key := seedKey(k.LoRA)
	if len(k.MM) == 0 {
		for i := range nb {
			key = upstream.ChainHash(key, k.Tokens[i*bs:(i+1)*bs])
			if w.keys[key] == 0 {
				return i
			}
		}
		return nb
	}
	// With images the request does not say in which block each begins:
	// every count of items beginning in each block is tried, and only
	// names the worker holds go on (usually one).
	type state struct {
		key uint64
		j   int // items folded so far
	}
	states := []state{{key, 0}}
	var next []state
	for i := range nb {
		next = next[:0]
		for _, s := range states {
			base := upstream.ChainHash(s.key, k.Tokens[i*bs:(i+1)*bs])
			key := base
			for j := s.j; ; j++ {
				if w.keys[key] > 0 && len(next) < maxMMStates {
					next = append(next, state{key, j})
				}
				if j == len(k.MM) {
					break
				}
				key = foldItem(key, itemHash(k.MM[j]))
			}
		}
		if len(next) == 0 {
			return i
		}
		states, next = next, states
	}
	return nb
}

// trusted says whether the view may be used now: a batch has been applied
// since it began, no batch was lost, and it is current: in the connect
// topology the connection is up (or was lost less than staleAfter ago); in
// the bind topology, where a worker's connection is not visible, its last
// batch is less than staleAfter old. w.mu is held (read).
func (w *workerIndex) trusted(now time.Time, connect bool, staleAfter time.Duration) bool {
	if !w.synced || w.gapped {
		return false
	}
	if connect {
		return w.connected || now.Sub(w.downSince) < staleAfter
	}
	return now.Sub(w.lastBatch) < staleAfter
}

// Index is the per-worker block views of the subscribed workers, keyed by
// base URL. It answers upstream.CacheSource through Source.
type Index struct {
	workers    map[string]*workerIndex // immutable after NewIndex
	connect    bool
	staleAfter time.Duration
	blockSize  int // for a worker that has not said its own yet
	now        func() time.Time
}

// NewIndex makes an empty view for each base URL. connect says which
// topology feeds it (see trusted); blockSize is the block size assumed for
// a worker that has sent no BlockStored yet (its view is empty then).
func NewIndex(bases []string, connect bool, staleAfter time.Duration, maxBlocks, blockSize int) *Index {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	if maxBlocks <= 0 {
		maxBlocks = DefaultMaxBlocksPerWorker
	}
	if blockSize <= 0 {
		blockSize = upstream.DefaultPrefixBlockTokens
	}
	x := &Index{workers: map[string]*workerIndex{}, connect: connect, staleAfter: staleAfter, blockSize: blockSize, now: time.Now}
	for _, b := range bases {
		b = upstream.BaseOf(b)
		x.workers[b] = newWorkerIndex(b, maxBlocks)
	}
	return x
}

// Cached implements upstream.CacheSource.
func (x *Index) Cached(base string, k upstream.CacheKey) (int, bool) {
	w := x.workers[base]
	if w == nil {
		return 0, false
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.trusted(x.now(), x.connect, x.staleAfter) {
		return 0, false
	}
	bs := w.bs
	if bs == 0 {
		bs = x.blockSize
	}
	return w.cached(k, bs) * bs, true
}

var _ upstream.CacheSource = (*Index)(nil)

// Apply folds a batch received from the worker at base into its view, as a
// subscriber does after its sequence checks (tests feed batches directly).
func (x *Index) Apply(base string, b *Batch) {
	w := x.workers[base]
	if w == nil {
		return
	}
	w.mu.Lock()
	w.apply(b, x.now())
	w.mu.Unlock()
}

// Blocks is how many blocks the view of base holds.
func (x *Index) Blocks(base string) int {
	w := x.workers[base]
	if w == nil {
		return 0
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.order.Len()
}
