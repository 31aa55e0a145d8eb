package kvevents

import (
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
)

const base = "http://w1:8000"

// stored is a BlockStored of consecutive blocks of size bs cut from toks,
// the engine naming block i hashes[i] and its parent parent (0: none).
func stored(hashes []Hash, parent Hash, toks []int64, bs int) Event {
	return Event{Kind: BlockStored, BlockHashes: hashes, Parent: parent, HasParent: parent != 0, TokenIDs: toks, BlockSize: bs}
}

func seq(from, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from + i)
	}
	return out
}

func newTestIndex(max int) *Index {
	return NewIndex([]string{base + "/"}, false, time.Minute, max, 4)
}

func TestIndexCached(t *testing.T) {
	prompt := seq(100, 10) // two whole blocks of 4 and a partial one
	other := append(seq(100, 4), seq(900, 6)...)
	cases := []struct {
		name   string
		events []Event
		key    upstream.CacheKey
		want   int
	}{
		{"nothing stored", nil, upstream.CacheKey{Tokens: prompt}, 0},
		{"both blocks in one event", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4)}, upstream.CacheKey{Tokens: prompt}, 8},
		{"chained over two events", []Event{stored([]Hash{1}, 0, prompt[:4], 4), stored([]Hash{2}, 1, prompt[4:8], 4)}, upstream.CacheKey{Tokens: prompt}, 8},
		{"a shared first block only", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4)}, upstream.CacheKey{Tokens: other}, 4},
		{"shorter than a block", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4)}, upstream.CacheKey{Tokens: prompt[:3]}, 0},
		{"removed by engine hash", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4), {Kind: BlockRemoved, BlockHashes: []Hash{2}}}, upstream.CacheKey{Tokens: prompt}, 4},
		{"first block removed", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4), {Kind: BlockRemoved, BlockHashes: []Hash{1}}}, upstream.CacheKey{Tokens: prompt}, 0},
		{"all cleared", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4), {Kind: AllBlocksCleared}}, upstream.CacheKey{Tokens: prompt}, 0},
		{"orphan (parent unknown)", []Event{stored([]Hash{2}, 1, prompt[4:8], 4)}, upstream.CacheKey{Tokens: prompt}, 0},
		{"CPU copies do not count", []Event{{Kind: BlockStored, BlockHashes: []Hash{1}, TokenIDs: prompt[:4], BlockSize: 4, Medium: "CPU"}}, upstream.CacheKey{Tokens: prompt}, 0},
		{"CPU removal leaves the GPU block", []Event{stored([]Hash{1}, 0, prompt[:4], 4), {Kind: BlockRemoved, BlockHashes: []Hash{1}, Medium: "CPU"}}, upstream.CacheKey{Tokens: prompt}, 4},
		{"another adapter's blocks", []Event{{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4, LoRAName: "a"}}, upstream.CacheKey{Tokens: prompt}, 0},
		{"the same adapter's blocks", []Event{{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4, LoRAName: "a",
			ExtraKeys: [][]string{{"a"}, {"a"}}}}, upstream.CacheKey{Tokens: prompt, LoRA: "a"}, 8},
		{"base blocks for an adapter", []Event{stored([]Hash{1, 2}, 0, prompt[:8], 4)}, upstream.CacheKey{Tokens: prompt, LoRA: "a"}, 0},
		{"image in block 2", []Event{{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4,
			ExtraKeys: [][]string{nil, {"img"}}}}, upstream.CacheKey{Tokens: prompt, MM: []string{"img"}}, 8},
		{"another image", []Event{{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4,
			ExtraKeys: [][]string{nil, {"img"}}}}, upstream.CacheKey{Tokens: prompt, MM: []string{"other"}}, 4},
		{"image spanning both blocks, stored in two events", []Event{
			{Kind: BlockStored, BlockHashes: []Hash{1}, TokenIDs: prompt[:4], BlockSize: 4, ExtraKeys: [][]string{{"img"}}},
			{Kind: BlockStored, BlockHashes: []Hash{2}, Parent: 1, HasParent: true, TokenIDs: prompt[4:8], BlockSize: 4, ExtraKeys: [][]string{{"img"}}},
		}, upstream.CacheKey{Tokens: prompt, MM: []string{"img"}}, 8},
		{"two images", []Event{{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4,
			ExtraKeys: [][]string{{"a"}, {"a", "b"}}}}, upstream.CacheKey{Tokens: prompt, MM: []string{"a", "b"}}, 8},
		{"a sliding-window group's removal", []Event{
			{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4, HasGroup: true, Group: 0, SpecKind: "full_attention"},
			{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4, HasGroup: true, Group: 1, SpecKind: "sliding_window"},
			{Kind: BlockRemoved, BlockHashes: []Hash{1}, HasGroup: true, Group: 1},
		}, upstream.CacheKey{Tokens: prompt}, 8},
		{"the full-attention group's removal", []Event{
			{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4, HasGroup: true, Group: 0, SpecKind: "full_attention"},
			{Kind: BlockRemoved, BlockHashes: []Hash{2}, HasGroup: true, Group: 0},
		}, upstream.CacheKey{Tokens: prompt}, 4},
		{"an unannounced group other than 0", []Event{
			{Kind: BlockStored, BlockHashes: []Hash{1, 2}, TokenIDs: prompt[:8], BlockSize: 4, HasGroup: true, Group: 3},
		}, upstream.CacheKey{Tokens: prompt}, 0},
		{"stored without token ids", []Event{{Kind: BlockStored, BlockHashes: []Hash{1, 2}, BlockSize: 4}}, upstream.CacheKey{Tokens: prompt}, 0},
		{"text prompt, image blocks", []Event{{Kind: BlockStored, BlockHashes: []Hash{1}, TokenIDs: prompt[:4], BlockSize: 4,
			ExtraKeys: [][]string{{"img"}}}}, upstream.CacheKey{Tokens: prompt}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := newTestIndex(100)
			x.Apply(base, &Batch{Events: c.events})
			got, ok := x.Cached(base, c.key)
			if !ok || got != c.want {
				t.Fatalf("Cached = %d, %v; want %d, true", got, ok, c.want)
			}
		})
	}
}

// Issue 20: a different engine hash seed (or algorithm) changes every
// block hash the events carry; the index, keyed by token ids, holds the
// same view.
func TestIndexIgnoresEngineHashes(t *testing.T) {
	prompt := seq(7, 64)
	feed := func(x *Index, salt Hash) {
		hs := func(i int) Hash { return salt*1000003 + Hash(i) + 1 }
		x.Apply(base, &Batch{Events: []Event{stored([]Hash{hs(0), hs(1)}, 0, prompt[:8], 4)}})
		x.Apply(base, &Batch{Events: []Event{stored([]Hash{hs(2), hs(3)}, hs(1), prompt[8:16], 4)}})
		x.Apply(base, &Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []Hash{hs(3)}}}})
	}
	a, b := newTestIndex(100), newTestIndex(100)
	feed(a, 1)
	feed(b, 99)
	for n := 0; n <= len(prompt); n++ {
		k := upstream.CacheKey{Tokens: prompt[:n]}
		ga, _ := a.Cached(base, k)
		gb, _ := b.Cached(base, k)
		if ga != gb {
			t.Fatalf("prefix %d: %d tokens with one seed, %d with the other", n, ga, gb)
		}
	}
	if got, _ := a.Cached(base, upstream.CacheKey{Tokens: prompt}); got != 12 {
		t.Fatalf("Cached = %d, want 12", got)
	}
}

func TestIndexBounded(t *testing.T) {
	x := newTestIndex(3)
	p := seq(0, 40)
	x.Apply(base, &Batch{Events: []Event{stored([]Hash{1, 2, 3, 4, 5}, 0, p[:20], 4)}})
	if n := x.Blocks(base); n != 3 {
		t.Fatalf("%d blocks held, want 3", n)
	}
	// The oldest (the first blocks) went, so no prefix is held any more.
	if got, _ := x.Cached(base, upstream.CacheKey{Tokens: p}); got != 0 {
		t.Fatalf("Cached = %d after the first blocks were evicted", got)
	}
	// A re-stored block is the newest: storing 1 again evicts 3, not 1.
	x.Apply(base, &Batch{Events: []Event{stored([]Hash{1}, 0, p[:4], 4)}})
	x.Apply(base, &Batch{Events: []Event{stored([]Hash{6}, 0, seq(500, 4), 4)}})
	if got, _ := x.Cached(base, upstream.CacheKey{Tokens: p}); got != 4 {
		t.Fatalf("Cached = %d, want the re-stored first block", got)
	}
}

// Issue 20's stale view: a worker whose events stopped, or that lost batches, is not
// trusted (the caller falls back to its prediction index).
func TestIndexTrust(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		name    string
		connect bool
		prep    func(w *workerIndex)
		at      time.Duration
		wantOK  bool
	}{
		{"no batch yet", false, func(w *workerIndex) {}, 0, false},
		{"fresh batch (bind)", false, func(w *workerIndex) { w.synced, w.lastBatch = true, now }, time.Second, true},
		{"stale (bind)", false, func(w *workerIndex) { w.synced, w.lastBatch = true, now }, time.Minute, false},
		{"gapped", false, func(w *workerIndex) { w.synced, w.lastBatch, w.gapped = true, now, true }, time.Second, false},
		{"idle but connected (connect)", true, func(w *workerIndex) { w.synced, w.lastBatch, w.connected = true, now, true }, time.Hour, true},
		{"just lost (connect)", true, func(w *workerIndex) { w.synced, w.connected, w.downSince = true, false, now }, time.Second, true},
		{"lost for stale_after (connect)", true, func(w *workerIndex) { w.synced, w.connected, w.downSince = true, false, now }, time.Minute, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := NewIndex([]string{base}, c.connect, time.Minute, 10, 4)
			c.prep(x.workers[base])
			x.now = func() time.Time { return now.Add(c.at) }
			if _, ok := x.Cached(base, upstream.CacheKey{Tokens: seq(0, 8)}); ok != c.wantOK {
				t.Fatalf("ok = %v, want %v", ok, c.wantOK)
			}
		})
	}
	x := newTestIndex(10)
	if _, ok := x.Cached("http://elsewhere:1", upstream.CacheKey{}); ok {
		t.Fatal("an unknown worker was trusted")
	}
}

func TestBlockSizeChangeClears(t *testing.T) {
	x := newTestIndex(100)
	p := seq(0, 16)
	x.Apply(base, &Batch{Events: []Event{stored([]Hash{1, 2}, 0, p[:8], 4)}})
	x.Apply(base, &Batch{Events: []Event{stored([]Hash{9}, 0, p[:8], 8)}})
	if got, _ := x.Cached(base, upstream.CacheKey{Tokens: p}); got != 8 || x.Blocks(base) != 1 {
		t.Fatalf("Cached = %d with %d blocks; want one block of 8", got, x.Blocks(base))
	}
}

// Cached runs on the request path while events are applied.
func TestIndexConcurrent(t *testing.T) {
	x := newTestIndex(1000)
	p := seq(0, 400)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			x.Apply(base, &Batch{Events: []Event{stored([]Hash{Hash(i*2 + 1), Hash(i*2 + 2)}, 0, p[:8], 4)}})
			x.Apply(base, &Batch{Events: []Event{{Kind: BlockRemoved, BlockHashes: []Hash{Hash(i*2 + 2)}}}})
		}
	}()
	for i := 0; i < 2000; i++ {
		if got, _ := x.Cached(base, upstream.CacheKey{Tokens: p}); got > 8 {
			t.Fatalf("Cached = %d", got)
		}
	}
	<-done
}

// BenchmarkCached4k: a 4096-token prompt (256 blocks of 16) fully held,
// asked once per candidate worker on the request path.
func BenchmarkCached4k(b *testing.B) {
	x := NewIndex([]string{base}, false, time.Minute, 1<<16, 16)
	p := seq(1, 4096)
	hs := make([]Hash, 256)
	for i := range hs {
		hs[i] = Hash(i + 1)
	}
	x.Apply(base, &Batch{Events: []Event{stored(hs, 0, p, 16)}})
	k := upstream.CacheKey{Tokens: p}
	b.ReportAllocs()
	for b.Loop() {
		if got, ok := x.Cached(base, k); !ok || got != 4096 {
			b.Fatal(got, ok)
		}
	}
}
