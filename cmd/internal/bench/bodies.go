package bench

import (
	"bytes"
	"encoding/base64"
	"strings"
)

// body is one request body of the matrix (docs/benchmarks.md: a small chat body
// and a 200 KB prompt).
type body struct {
	key, title string
	data       []byte
}

func chatBody(prompt string, stream bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"bench","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"`)
	b.WriteString(prompt)
	b.WriteString(`"}],"max_tokens":16,"temperature":0.7,"seed":12345678901234567890`)
	if stream {
		b.WriteString(`,"stream":true`)
	}
	b.WriteString("}")
	return b.Bytes()
}

// longPrompt is n bytes of plain words (no JSON escapes needed).
func longPrompt(n int) string {
	const words = "the quick brown fox jumps over the lazy dog while seven tired engineers measure every hop "
	s := strings.Repeat(words, n/len(words)+1)
	return s[:n]
}

func bodies() []body {
	return []body{
		{"small", "small chat body", chatBody("Say hello in one word.", false)},
		{"200KB", "200 KB prompt", chatBody(longPrompt(200<<10), false)},
	}
}

// imageBody is a chat with one inline 1 MiB image (base64 of pseudo-random
// bytes): the issue 7 allocation budget's body. Only the in-process
// benchmarks use it: on a text-only worker the load matrix would measure
// base64 copying, not celflow.
func imageBody() []byte {
	raw := make([]byte, 3<<18) // 768 KiB → 1 MiB of base64
	x := uint32(2463534242)
	for i := range raw {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		raw[i] = byte(x)
	}
	var b bytes.Buffer
	b.WriteString(`{"model":"bench","messages":[{"role":"user","content":[{"type":"text","text":"What is in this picture?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,`)
	enc := base64.NewEncoder(base64.StdEncoding, &b)
	_, _ = enc.Write(raw)
	_ = enc.Close()
	b.WriteString(`"}}]}],"max_tokens":16}`)
	return b.Bytes()
}
