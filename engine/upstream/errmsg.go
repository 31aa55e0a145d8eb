package upstream

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// openAIMessage extracts the message of an OpenAI-style error body, the two
// shapes of PROTOCOL 12 and no other: {"error":{"message":S}} and vLLM's flat
// {"object":"error","message":S}. A bare {"message":S} is not an OpenAI
// error and gives "" (PROTOCOL 12 relays only the listed shapes).
//
// b may be a prefix of the body (cut at ErrorBodyLimit): the scan is
// lenient and a string cut by the end of b yields what was read. The
// result is valid UTF-8 of at most max bytes, cut on a rune boundary.
func openAIMessage(b []byte, max int) string {
	s := &jscan{b: b}
	if !s.eat('{') {
		return ""
	}
	var flat string
	var haveFlat, errObject bool
	for {
		key, ok := s.member()
		if !ok {
			break
		}
		switch {
		case key == "error" && s.peek() == '{':
			if m, found := s.nestedMessage(max); found {
				return m
			}
		case key == "message" && s.peek() == '"':
			flat, _ = s.str(max)
			haveFlat = true
		case key == "object" && s.peek() == '"':
			v, complete := s.str(8)
			errObject = complete && v == "error"
		default:
			s.skip() // on a cut value the eat below fails and ends the scan
		}
		if !s.eat(',') {
			break
		}
	}
	if errObject && haveFlat {
		return flat
	}
	return ""
}

// jscan is a minimal, lenient JSON reader over a possibly cut document.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jscan) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// member reads `"key":` and leaves s at the value. Keys are compared only
// when complete and short.
func (s *jscan) member() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	k, complete := s.str(16)
	if !complete || !s.eat(':') {
		return "", false
	}
	s.ws()
	return k, true
}

// nestedMessage scans the object at s for a string "message".
func (s *jscan) nestedMessage(max int) (string, bool) {
	s.eat('{')
	for {
		key, ok := s.member()
		if !ok {
			return "", false
		}
		if key == "message" && s.peek() == '"' {
			m, _ := s.str(max)
			return m, true
		}
		if !s.skip() || !s.eat(',') {
			// End of the error object (or of b): let the caller go on.
			s.eat('}')
			return "", false
		}
	}
}

// str decodes the string at s (which starts with '"'), keeping at most max
// bytes of its value but always consuming it whole. complete is false when
// b ended inside it.
func (s *jscan) str(max int) (v string, complete bool) {
	s.i++ // opening quote
	out := make([]byte, 0, min(max+8, 64))
	keep := func(p ...byte) {
		if len(out) <= max+4 { // a little over max, so the cut lands on a rune boundary
			out = append(out, p...)
		}
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return finishStr(out, max), true
		case c != '\\':
			keep(c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case 'n':
			keep('\n')
		case 't':
			keep('\t')
		case 'r':
			keep('\r')
		case 'b':
			keep('\b')
		case 'f':
			keep('\f')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				s.i = len(s.b)
				break
			}
			if utf16.IsSurrogate(r) && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
				save := s.i
				s.i += 2
				if r2, ok := s.hex4(); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
					r = utf16.DecodeRune(r, r2)
				} else {
					s.i = save
				}
			}
			var rb [utf8.UTFMax]byte
			keep(rb[:utf8.EncodeRune(rb[:], r)]...) // a lone surrogate becomes U+FFFD
		default: // \" \\ \/ and anything lenient
			keep(e)
		}
	}
	s.i = len(s.b)
	return finishStr(out, max), false
}

func (s *jscan) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// finishStr makes the value valid UTF-8 and cuts it to max bytes.
func finishStr(out []byte, max int) string {
	return cutUTF8(strings.ToValidUTF8(string(out), "\uFFFD"), max)
}

// skip consumes one value of any kind; false when b ended inside it.
func (s *jscan) skip() bool {
	switch s.peek() {
	case 0:
		return false
	case '"':
		_, complete := s.str(0)
		return complete
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, complete := s.str(0); !complete {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return true
			}
		}
		return false
	}
	for s.i < len(s.b) { // number, true, false, null
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return true
		}
		s.i++
	}
	return false
}

// cutUTF8 cuts s to at most n bytes on a UTF-8 boundary (the engine's
// CutUTF8, which this package cannot import).
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
