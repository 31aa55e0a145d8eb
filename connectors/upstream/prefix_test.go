package upstream

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func seqTokens(start, n int) []int64 {
	t := make([]int64, n)
	for i := range t {
		t[i] = int64(start + i)
	}
	return t
}

func concat(a, b []int64) []int64 { return append(append([]int64{}, a...), b...) }

// ACCEPTANCE 57 (unit part): a predicted miss returns no target, so no
// decode call can be made; a hit goes to the endpoint holding the prefix.
func TestPredictHit(t *testing.T) {
	recorded := seqTokens(1, 64) // 4 blocks of 16
	tests := []struct {
		name   string
		short  int
		prompt []int64
		hit    bool
	}{
		{"unknown tokens miss", 0, nil, false},
		{"unknown tokens miss even with a short-prompt rule", 100, nil, false},
		{"short prompt hits", 10, seqTokens(500, 10), true},
		{"one over short misses (not recorded)", 10, seqTokens(500, 11), false},
		{"shorter than a block misses", 0, seqTokens(1, 15), false},
		{"same prompt hits", 0, recorded, true},
		{"recorded prompt plus a partial block hits", 0, concat(recorded, seqTokens(900, 15)), true},
		{"recorded prompt plus a full new block misses", 0, concat(recorded, seqTokens(900, 16)), false},
		{"block-aligned prefix of the recorded prompt hits", 0, recorded[:32], true},
		{"prefix plus a partial block hits", 0, recorded[:40], true},
		{"same last block after a different start misses", 0, concat(seqTokens(7000, 48), recorded[48:]), false},
		{"unrelated prompt misses", 0, seqTokens(3000, 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newDirect(t, Config{ShortPromptTokens: tt.short}, 3, RoleDecode)
			// Record on decode-2, then move the rotation so decode-2 is not next.
			var rec *Target
			for rec == nil || rec.Base != "http://decode-2:8000" {
				rec = mustPick(t, c, RoleDecode)
				rec.Done(false)
			}
			c.RecordPrefix(rec, recorded)
			tg, hit := c.PredictHit(tt.prompt)
			if hit != tt.hit {
				t.Fatalf("hit = %v, want %v", hit, tt.hit)
			}
			if !hit {
				if tg != nil {
					t.Fatalf("miss with a target %+v", tg)
				}
				return
			}
			if tt.short == 0 && tg.Base != "http://decode-2:8000" {
				t.Errorf("hit on %s, want the endpoint holding the prefix", tg.Base)
			}
			tg.Done(false)
		})
	}
}

func TestPredictHitSkipsEjected(t *testing.T) {
	c, clk := newDirect(t, Config{FailureThreshold: 1}, 2, RoleDecode)
	p := seqTokens(1, 32)
	tg := mustPick(t, c, RoleDecode)
	c.RecordPrefix(tg, p)
	tg.Done(true) // ejected
	if _, hit := c.PredictHit(p); hit {
		t.Fatal("hit on an ejected endpoint")
	}
	clk.t = clk.t.Add(time.Minute)
	got, hit := c.PredictHit(p)
	if !hit || got.Base != tg.Base {
		t.Fatalf("after rejoin: hit=%v target=%+v", hit, got)
	}
}

func TestPredictHitPrefersLeastLoadedHolder(t *testing.T) {
	c, _ := newDirect(t, Config{}, 3, RoleDecode)
	p := seqTokens(1, 32)
	a, b := mustPick(t, c, RoleDecode), mustPick(t, c, RoleDecode)
	c.RecordPrefix(a, p)
	c.RecordPrefix(b, p)
	b.Done(false) // a keeps one leg in flight
	got, hit := c.PredictHit(p)
	if !hit || got.Base != b.Base {
		t.Fatalf("hit=%v on %+v, want %s", hit, got, b.Base)
	}
}

func TestPredictHitGatewayAndNoDecode(t *testing.T) {
	gw, err := New(Config{Gateway: "http://gw:1", ShortPromptTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if tg, hit := gw.PredictHit(seqTokens(1, 5)); hit || tg != nil {
		t.Error("gateway mode predicted a hit")
	}
	gw.RecordPrefix(&Target{Base: "http://gw:1"}, seqTokens(1, 32)) // no-op, no panic
	c, _ := newDirect(t, Config{ShortPromptTokens: 100}, 1, RolePrefill)
	if _, hit := c.PredictHit(seqTokens(1, 5)); hit {
		t.Error("hit without a decode pool")
	}
	pre := mustPick(t, c, RolePrefill)
	c.RecordPrefix(pre, seqTokens(1, 32)) // not a decode endpoint: ignored
}

func TestPrefixIndexBound(t *testing.T) {
	c, _ := newDirect(t, Config{PrefixIndexSize: 8, PrefixBlockTokens: 4}, 1, RoleDecode)
	tg := mustPick(t, c, RoleDecode)
	idx := tg.ep.prefix
	var prompts [][]int64
	for i := range 20 {
		p := seqTokens(1000*i, 8) // 2 blocks each
		prompts = append(prompts, p)
		c.RecordPrefix(tg, p)
		if n := idx.len(); n > 8 {
			t.Fatalf("index holds %d names, bound 8", n)
		}
	}
	if _, hit := c.PredictHit(prompts[19]); !hit {
		t.Error("latest prompt evicted")
	}
	if _, hit := c.PredictHit(prompts[0]); hit {
		t.Error("oldest prompt still present in a full index")
	}
	// A prompt larger than the index keeps its longest prefixes.
	long := seqTokens(50000, 4*20)
	c.RecordPrefix(tg, long)
	if _, hit := c.PredictHit(long); !hit {
		t.Error("a prompt bigger than the index lost its last block")
	}
}

// CLOCK: a referenced name survives one sweep that evicts unreferenced ones.
func TestPrefixIndexClock(t *testing.T) {
	x := newPrefixIndex(3)
	x.add([]uint64{1, 2, 3})
	if !x.has(1) {
		t.Fatal("1 missing")
	}
	x.add([]uint64{4}) // evicts 2 (1 is referenced)
	if !x.has(1) || x.has(2) || !x.has(3) || !x.has(4) {
		t.Errorf("after one eviction: 1=%v 2=%v 3=%v 4=%v", x.has(1), x.has(2), x.has(3), x.has(4))
	}
	x.add([]uint64{4, 4})
	if x.len() != 3 {
		t.Errorf("len %d", x.len())
	}
}

func TestChainHashDependsOnPrefix(t *testing.T) {
	b := seqTokens(1, 16)
	if chainHash(hashSeed, b) == chainHash(hashSeed+1, b) {
		t.Error("the block name ignores the prefix")
	}
	if chainHash(hashSeed, b) != chainHash(hashSeed, seqTokens(1, 16)) {
		t.Error("not deterministic")
	}
	c := seqTokens(1, 16)
	c[15]++
	if chainHash(hashSeed, b) == chainHash(hashSeed, c) {
		t.Error("the last token is ignored")
	}
}

// Block names of near-identical blocks differ: every single-token change,
// every swap of two tokens, with block sizes that use the tail loop too.
func TestChainHashDistinct(t *testing.T) {
	for _, bs := range []int{16, 5, 1, 33} {
		base := seqTokens(1000, bs)
		seen := map[uint64]string{}
		add := func(what string, block []int64) {
			h := chainHash(hashSeed, block)
			if prev, dup := seen[h]; dup {
				t.Fatalf("block size %d: %s and %s share a name", bs, prev, what)
			}
			seen[h] = what
		}
		add("base", base)
		for i := range bs {
			for _, v := range []int64{0, base[i] + 1, 1<<32 - 1} {
				b := slices.Clone(base)
				b[i] = v
				add(fmt.Sprintf("[%d]=%d", i, v), b)
			}
			// Ids of 2^32 and more fold inexactly (two such changes can
			// cancel), but each alone still changes the name.
			for _, v := range []int64{base[i] + 1<<32, -1} {
				b := slices.Clone(base)
				b[i] = v
				if chainHash(hashSeed, b) == chainHash(hashSeed, base) {
					t.Fatalf("block size %d: [%d]=%d leaves the name unchanged", bs, i, v)
				}
			}
			for j := i + 1; j < bs; j++ {
				b := slices.Clone(base)
				b[i], b[j] = b[j], b[i]
				add(fmt.Sprintf("swap %d,%d", i, j), b)
			}
		}
	}
}

// Recording skips the prefix already present: a repeated prompt adds
// nothing, a follow-up turn adds only its new blocks.
func TestRecordPrefixIncremental(t *testing.T) {
	c, _ := newDirect(t, Config{PrefixBlockTokens: 4}, 1, RoleDecode)
	tg := mustPick(t, c, RoleDecode)
	turn1 := seqTokens(1, 16) // 4 blocks
	c.RecordPrefix(tg, turn1)
	c.RecordPrefix(tg, turn1)
	if n := tg.ep.prefix.len(); n != 4 {
		t.Fatalf("after a repeat: %d names, want 4", n)
	}
	turn2 := concat(turn1, seqTokens(100, 9)) // +2 full blocks and a partial one
	c.RecordPrefix(tg, turn2)
	if n := tg.ep.prefix.len(); n != 6 {
		t.Fatalf("after a follow-up: %d names, want 6", n)
	}
	for _, p := range [][]int64{turn1, turn2, turn2[:20]} {
		if _, hit := c.PredictHit(p); !hit {
			t.Errorf("%d-token prefix missed", len(p))
		}
	}
}

// Naming every block of a 50k-token prompt (a 200 KB prompt rendered), the
// work PredictHit and RecordPrefix each do once per request.
func BenchmarkPrefixHash50k(b *testing.B) {
	tokens := seqTokens(1, 50000)
	for i := range tokens {
		tokens[i] = tokens[i] * 7919 % 151000
	}
	const bs = 16
	b.SetBytes(8 * int64(len(tokens)))
	var sink uint64
	for b.Loop() {
		h := hashSeed
		for i := 0; i+bs <= len(tokens); i += bs {
			h = chainHash(h, tokens[i:i+bs])
		}
		sink ^= h
	}
	_ = sink
}

// Bisection finds the longest recorded prefix whether it is the whole
// prompt, part of it or nothing.
func TestPrefixIndexAddBisects(t *testing.T) {
	names := func(start, n int) []uint64 {
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = uint64(start + i)
		}
		return hs
	}
	for _, tc := range []struct {
		name    string
		before  []uint64 // recorded first
		add     []uint64
		wantLen int
	}{
		{"new prompt", nil, names(1, 100), 100},
		{"repeat", names(1, 100), names(1, 100), 100},
		{"follow-up", names(1, 40), names(1, 100), 100},
		{"prefix of a recorded prompt", names(1, 100), names(1, 7), 100},
		{"unrelated", names(1, 50), names(1000, 50), 100},
		{"one name", nil, names(5, 1), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newPrefixIndex(1000)
			x.add(tc.before)
			x.add(tc.add)
			if n := x.len(); n != tc.wantLen {
				t.Fatalf("%d names, want %d", n, tc.wantLen)
			}
			for _, h := range tc.add {
				if !x.has(h) {
					t.Fatalf("name %d missing", h)
				}
			}
		})
	}
	// Presence not prefix-closed (names 11-50 evicted): bisection stops at
	// 10 and puts 11-50 back, where a scan from the end stopped at 60.
	x := newPrefixIndex(1000)
	x.add(names(1, 10))
	x.add(names(51, 10))
	x.add(names(1, 100))
	for h := uint64(1); h <= 100; h++ {
		if !x.has(h) {
			t.Fatalf("name %d missing", h)
		}
	}
}

// Recording a prompt never seen (the usual case: each conversation's first
// turn): naming 50k tokens and inserting ~3k names into a full index.
func BenchmarkRecordNewPrompt50k(b *testing.B) {
	c, _ := newDirect(b, Config{}, 1, RoleDecode)
	tg := mustPick(b, c, RoleDecode)
	prompt := seqTokens(1, 50000)
	for i := range 4 { // fill the index (10000 names)
		prompt[0] = int64(-1 - i)
		c.RecordPrefix(tg, prompt)
	}
	b.ReportAllocs()
	n := int64(0)
	for b.Loop() {
		n++
		prompt[0] = 1<<40 + n
		c.RecordPrefix(tg, prompt)
	}
}
