package sim

import (
	"fmt"
	"strings"
)

// Deterministic (continuable) generation, for failover tests: a request
// whose prompt is an earlier prompt followed by a prefix of that prompt's
// answer must produce exactly the rest of the answer, so that an unbroken
// run and a run broken after k tokens and continued give the same bytes.
//
// The model speaks a vocabulary of its own (detVocab) and generates by
// position: the prompt is split into its base and its answer tail (the
// longest suffix of detVocab tokens), and the token at answer position j is
// a pure function of the base and j. A continuation's prompt therefore has
// the same base, its tail is the answer so far, and it goes on at the
// position where the broken run stopped. The natural end (finish_reason
// "stop") is at answer position OutputTokens counted from the base, so it
// falls at the same place in both runs too.
//
// The price of recognising the answer by its words is that a prompt which
// itself ends in detVocab words is read as already partly answered (its
// answer is shorter and starts with a space). detVocab is the NATO spelling
// alphabet, which prompts seldom end with.

// detVocab is what the deterministic model says. Every word tokenizes to
// one id, and the ids are distinct (checked in init).
var detVocab = strings.Fields(`alfa bravo charlie delta echo foxtrot golf hotel
india juliett kilo lima mike november oscar papa quebec romeo sierra tango
uniform victor whiskey xray yankee zulu`)

// detIDs maps a detVocab token id to its index.
var detIDs = func() map[int]int {
	m := make(map[int]int, len(detVocab))
	for i, w := range detVocab {
		id := WordID(w)
		if _, dup := m[id]; dup {
			panic(fmt.Sprintf("sim: deterministic vocabulary: %q shares token id %d", w, id))
		}
		m[id] = i
	}
	return m
}()

// determ is the deterministic state of one request: the seed of the prompt's
// base and how many answer tokens the prompt already holds.
type determ struct {
	seed uint64
	tail int // answer tokens at the end of the prompt (0 for a fresh prompt)
}

// newDeterm splits prompt into base and answer tail.
func newDeterm(prompt []int) *determ {
	base := len(prompt)
	for base > 0 {
		if _, ok := detIDs[prompt[base-1]]; !ok {
			break
		}
		base--
	}
	return &determ{seed: seedOf(prompt[:base]), tail: len(prompt) - base}
}

// word is the word at answer position pos of choice c.
func (d *determ) word(c, pos int) string {
	h := d.seed + uint64(c)*0x9e3779b97f4a7c15
	h ^= uint64(pos+1) * 0xbf58476d1ce4e5b9
	return detVocab[splitmix64(h)%uint64(len(detVocab))]
}

// text is the text of answer position pos: words are space-separated, so
// the text of the whole answer re-tokenizes to its token ids and a
// continuation's first token carries the space that joins it to the prefix.
func (d *determ) text(c, pos int) string {
	if pos == 0 {
		return d.word(c, pos)
	}
	return " " + d.word(c, pos)
}

// length is the answer length of a request: the natural end at position
// natural from the base (never before the tail: a prompt already past it
// gets an empty answer), at least minTokens (min_tokens holds off the end
// as vLLM's does), cut to maxTokens when set (then finish is "length").
func (d *determ) length(natural int, minTokens int64, maxTokens optInt) (count int, finish string) {
	count = max(natural-d.tail, 0, int(minTokens))
	finish = "stop"
	if maxTokens.Set && maxTokens.V < int64(count) {
		count, finish = int(maxTokens.V), "length"
	}
	return count, finish
}

// splitmix64 is a 64-bit finaliser: neighbouring positions get unrelated
// words.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// deterministic reports whether a request is answered in deterministic
// (continuable) mode: always with --deterministic, else when the request
// asks for greedy sampling (temperature 0), the one setting under which a
// real model's continuation reproduces the rest of its answer. A seed alone
// does not: vLLM restarts the seeded generator for the continuation.
func (w *Worker) deterministic(req *request) bool {
	return w.cfg.Deterministic || req.Greedy
}
