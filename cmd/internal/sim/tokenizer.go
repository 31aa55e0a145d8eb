package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"strings"
)

// The fake tokenizer's fixed ids. Word ids are a hash of the word into
// [wordMin, wordMax), skipping the placeholder band so that a word can never
// pass for a media placeholder.
const (
	BOS        = 1
	ImageToken = 9000
	VideoToken = 9001
	AudioToken = 9002

	wordMin = 100
	wordMax = 50000

	// MaxPlaceholder caps the placeholder run of one item.
	MaxPlaceholder = 256
)

// WordID is the stable token id of one whitespace-separated word.
func WordID(w string) int {
	h := fnv.New32a()
	h.Write([]byte(w))
	id := wordMin + int(h.Sum32()%(wordMax-wordMin))
	if id >= ImageToken && id < ImageToken+10 {
		id += 10
	}
	return id
}

// Tokenize appends the ids of text's words to dst.
func Tokenize(dst []int, text string) []int {
	for _, w := range strings.Fields(text) {
		dst = append(dst, WordID(w))
	}
	return dst
}

// PlaceholderLen is the placeholder run of an item of size bytes: it grows
// with the size (4 + size/1024) and is capped at MaxPlaceholder.
func PlaceholderLen(size int) int {
	return min(4+size/1024, MaxPlaceholder)
}

// PlaceholderToken is the placeholder id of a modality.
func PlaceholderToken(modality string) int {
	switch modality {
	case "video":
		return VideoToken
	case "audio":
		return AudioToken
	}
	return ImageToken
}

// MediaHash is the 64-hex mm_hash of an item: sha256 of its bytes (or of its
// URL when the simulator was not given the bytes).
func MediaHash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// outputVocab is what the fake model says; the words are picked
// deterministically from the prompt so a repeated prompt gets the same answer.
var outputVocab = strings.Fields(`the sim says hello from a fake vLLM worker whose tokens
flow through celflow prefill and decode with cache hits quick brown fox jumps over
lazy dog answer is forty two`)

// outputWord is the text of generated token i of choice c for a prompt seed.
func outputWord(seed uint64, c, i int) string {
	return outputVocab[(seed+uint64(c)*7+uint64(i))%uint64(len(outputVocab))]
}

// seedOf folds a prompt's tokens into a seed.
func seedOf(tokens []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint64(b[:], uint64(t))
		h.Write(b[:])
	}
	return h.Sum64()
}

// kwargsBlob is a small real msgpack map shaped like vLLM's serialized
// MultiModalKwargsItem: {"pixel_values": bin, "image_grid_thw": [1, 2, 2n]}
// (a 2x2 merge of that grid gives the item's n placeholder tokens).
func kwargsBlob(hash string, n int) []byte {
	px := sha256.Sum256([]byte("pixels:" + hash))
	b := []byte{0x82}
	b = appendFixStr(b, "pixel_values")
	b = append(b, 0xc4, byte(len(px)))
	b = append(b, px[:]...)
	b = appendFixStr(b, "image_grid_thw")
	b = append(b, 0x93)
	for _, v := range []int{1, 2, 2 * n} {
		if v < 128 {
			b = append(b, byte(v))
		} else {
			b = append(b, 0xcd, byte(v>>8), byte(v))
		}
	}
	return b
}

func appendFixStr(b []byte, s string) []byte {
	b = append(b, 0xa0|byte(len(s)))
	return append(b, s...)
}
