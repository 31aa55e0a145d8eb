package bench

import (
	"bytes"
	"strings"
)

// body is one request body of the matrix (PERFORMANCE.md: a small chat body
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
