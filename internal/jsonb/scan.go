package jsonb

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxDepth bounds nesting so a hostile body cannot exhaust the stack.
const maxDepth = 512

// SyntaxError is a JSON syntax error at a byte offset.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at offset %d: %s", e.Offset, e.Msg)
}

// ErrNotObject is returned by Parse when the document is valid JSON but not an object.
var ErrNotObject = errors.New("JSON body is not an object")

type scanner struct {
	b     []byte
	depth int
	// dups turns on duplicate-name detection (Parse, ObjectAt); dupAt is
	// the first repeated key's opening quote, -1 for none. The scan goes on
	// after a duplicate so that a syntax error anywhere still wins.
	dups  bool
	dupAt int
	keys  keyStack
	// names collects keyBit of every member name scanned (Object.names).
	names uint64
}

// keyBit is a name's bit in Object.names: FNV-1a, folded to 6 bits.
func keyBit(name string) uint64 {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return 1 << ((h ^ h>>6 ^ h>>12 ^ h>>18 ^ h>>24) & 63)
}

// keyBitRaw is keyBit of a plain key's bytes, without a string.
func keyBitRaw(name []byte) uint64 {
	h := uint32(2166136261)
	for _, c := range name {
		h = (h ^ uint32(c)) * 16777619
	}
	return 1 << ((h ^ h>>6 ^ h>>12 ^ h>>18 ^ h>>24) & 63)
}

func (s *scanner) fail(i int, msg string) error { return &SyntaxError{Offset: i, Msg: msg} }

func (s *scanner) ws(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value validates the value starting at i (no leading whitespace) and
// returns the offset one past its end.
func (s *scanner) value(i int) (int, error) {
	if i >= len(s.b) {
		return i, s.fail(i, "unexpected end of input")
	}
	switch c := s.b[i]; {
	case c == '{':
		return s.object(i, nil)
	case c == '[':
		return s.array(i, nil)
	case c == '"':
		return s.str(i)
	case c == 't':
		return s.lit(i, "true")
	case c == 'f':
		return s.lit(i, "false")
	case c == 'n':
		return s.lit(i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.num(i)
	default:
		return i, s.fail(i, fmt.Sprintf("unexpected character %q", c))
	}
}

func (s *scanner) lit(i int, w string) (int, error) {
	if len(s.b)-i < len(w) || string(s.b[i:i+len(w)]) != w {
		return i, s.fail(i, "invalid literal")
	}
	return i + len(w), nil
}

func (s *scanner) num(i int) (int, error) {
	b := s.b
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, s.fail(start, "invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return i, s.fail(start, "invalid number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return i, s.fail(start, "invalid number")
		}
	}
	return i, nil
}

// str validates a string starting at its opening quote.
func (s *scanner) str(i int) (int, error) {
	b := s.b
	start := i
	i++
	for {
		// Long strings (prompts, base64 payloads): find the next quote with
		// the runtime's vectorised search, then prove the run before it has
		// no backslash (vectorised too) and no control byte (one SWAR test
		// per word), and jump there at once.
		if q := bytes.IndexByte(b[i:], '"'); q > 64 {
			run := b[i : i+q]
			if bytes.IndexByte(run, '\\') < 0 && !hasControl(run) {
				return i + q + 1, nil
			}
		}
		// Skip 8 bytes at a time while none is a quote, a backslash or a
		// control character.
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			if hasLess(w, 0x20)|hasZero(w^(lsb*'"'))|hasZero(w^(lsb*'\\')) != 0 {
				break
			}
			i += 8
		}
		for i < len(b) {
			c := b[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			i++
		}
		if i >= len(b) {
			return i, s.fail(start, "unterminated string")
		}
		switch b[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if i+1 >= len(b) {
				return i, s.fail(start, "unterminated string")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex4(b[i+2:i+6]) {
					return i, s.fail(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, s.fail(i, "invalid escape")
			}
		default:
			return i, s.fail(i, "control character in string")
		}
	}
}

// key scans an object key whose quote is at i, like str, and reports
// whether it is plain (no escape, valid UTF-8: its bytes are its name).
// Keys are short, so one byte loop does both; an escape or a control byte
// hands the key to str, which validates and words the error.
func (s *scanner) key(i int) (int, bool, error) {
	b := s.b
	high := false
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, !high || utf8.Valid(b[i+1:j]), nil
		case c == '\\' || c < 0x20:
			end, err := s.str(i)
			return end, false, err
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	end, err := s.str(i) // unterminated
	return end, false, err
}

func isHex4(h []byte) bool {
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func (s *scanner) object(i int, members *[]Member) (int, error) {
	if s.depth++; s.depth > maxDepth {
		return i, s.fail(i, "nesting too deep")
	}
	names := memberSet{base: s.keys.n}
	defer func() { s.depth--; s.keys.n = names.base }()
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s.b) || s.b[i] != '"' {
			return i, s.fail(i, "expected object key")
		}
		ks := i
		ke, plain, err := s.key(i)
		if err != nil {
			return ke, err
		}
		if s.dups && names.add(&s.keys, s.b, ks, ke, plain) && s.dupAt < 0 {
			s.dupAt = ks
		}
		if s.dups {
			if plain {
				s.names |= keyBitRaw(s.b[ks+1 : ke-1])
			} else {
				s.names |= keyBit(unquoteKey(s.b[ks:ke])) // escaped names: rare
			}
		}
		i = s.ws(ke)
		if i >= len(s.b) || s.b[i] != ':' {
			return i, s.fail(i, "expected ':'")
		}
		i = s.ws(i + 1)
		vs := i
		ve, err := s.value(i)
		if err != nil {
			return ve, err
		}
		if members != nil {
			name := ""
			if plain {
				name = string(s.b[ks+1 : ke-1])
			} else {
				name = unquoteKey(s.b[ks:ke])
			}
			*members = append(*members, Member{Key: name, KeyStart: ks, ValStart: vs, ValEnd: ve})
		}
		i = s.ws(ve)
		if i >= len(s.b) {
			return i, s.fail(i, "unterminated object")
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case '}':
			return i + 1, nil
		default:
			return i, s.fail(i, "expected ',' or '}'")
		}
	}
}

func (s *scanner) array(i int, elems *[][2]int) (int, error) {
	if s.depth++; s.depth > maxDepth {
		return i, s.fail(i, "nesting too deep")
	}
	defer func() { s.depth-- }()
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == ']' {
		return i + 1, nil
	}
	for {
		vs := i
		var ve int
		if j, ok := s.plainInt(i); ok { // token arrays: tens of thousands of these
			ve = j
		} else {
			var err error
			if ve, err = s.value(i); err != nil {
				return ve, err
			}
		}
		if elems != nil {
			*elems = append(*elems, [2]int{vs, ve})
		}
		i = s.ws(ve)
		if i >= len(s.b) {
			return i, s.fail(i, "unterminated array")
		}
		switch s.b[i] {
		case ',':
			i = s.ws(i + 1)
		case ']':
			return i + 1, nil
		default:
			return i, s.fail(i, "expected ',' or ']'")
		}
	}
}

// unquoteKey returns a key's text as encoding/json decodes it: escapes
// resolved, each invalid UTF-8 byte and lone surrogate as U+FFFD. Keys
// that need neither (nearly all) are a plain conversion.
func unquoteKey(q []byte) string {
	if plainKey(q) {
		return string(q[1 : len(q)-1])
	}
	if s, ok := unquoteString(q); ok {
		return s
	}
	return string(q[1 : len(q)-1]) // not reached for a string the scanner accepted
}

// unquoteString decodes a quoted JSON string the way encoding/json does.
func unquoteString(q []byte) (string, bool) {
	var s string
	if json.Unmarshal(q, &s) != nil {
		return "", false
	}
	return s, true
}

func parse(buf []byte) (*Object, error) {
	s := scanner{b: buf, dups: true, dupAt: -1}
	s.keys.init(buf)
	i := s.ws(0)
	if i >= len(buf) {
		return nil, s.fail(i, "empty body")
	}
	o := &Object{Buf: buf, Start: i}
	var end int
	var err error
	if buf[i] == '{' {
		o.Members = make([]Member, 0, 8)
		end, err = s.object(i, &o.Members)
	} else {
		end, err = s.value(i)
	}
	if err != nil {
		return nil, err
	}
	if j := s.ws(end); j != len(buf) {
		return nil, s.fail(j, "trailing data after JSON value")
	}
	if s.dupAt >= 0 {
		return nil, duplicateAt(buf, i, s.dupAt)
	}
	if buf[i] != '{' {
		return nil, ErrNotObject
	}
	o.End, o.names = end, s.names
	return o, nil
}

func objectAt(buf []byte, start int) (*Object, error) {
	s := scanner{b: buf, dups: true, dupAt: -1}
	s.keys.init(buf)
	if start < 0 || start >= len(buf) || buf[start] != '{' {
		return nil, ErrNotObject
	}
	o := &Object{Buf: buf, Start: start}
	end, err := s.object(start, &o.Members)
	if err != nil {
		return nil, err
	}
	if s.dupAt >= 0 {
		return nil, duplicateAt(buf, start, s.dupAt)
	}
	o.End, o.names = end, s.names
	return o, nil
}

func elements(buf []byte, start int) ([][2]int, error) {
	s := scanner{b: buf}
	if start < 0 || start >= len(buf) || buf[start] != '[' {
		return nil, errors.New("not an array")
	}
	var out [][2]int
	_, err := s.array(start, &out)
	return out, err
}

// Valid reports whether buf is one valid JSON value (surrounding whitespace
// allowed): syntax only, exactly as encoding/json's Valid, so duplicate
// member names pass here (Parse and ObjectAt refuse them).
func Valid(buf []byte) bool {
	s := scanner{b: buf}
	i := s.ws(0)
	end, err := s.value(i)
	return err == nil && s.ws(end) == len(buf)
}

func (o *Object) find(key string) int {
	key = normName(key)
	for i := range o.Members {
		if o.Members[i].Key == key {
			return i
		}
	}
	return -1
}

func (o *Object) get(key string) ([]byte, bool) {
	if i := o.find(key); i >= 0 {
		m := &o.Members[i]
		return o.Buf[m.ValStart:m.ValEnd], true
	}
	return nil, false
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasZero is non-zero when some byte of w is zero; hasLess when some byte
// is below n (n <= 128). Both may flag extra bytes above a true hit, never
// miss one, which is all a skip loop needs.
func hasZero(w uint64) uint64 { return (w - lsb) & ^w & msb }

func hasLess(w uint64, n uint64) uint64 { return (w - lsb*n) & ^w & msb }

// hasControl reports whether p holds a byte below 0x20.
func hasControl(p []byte) bool {
	i := 0
	for ; i+32 <= len(p); i += 32 {
		w0 := binary.LittleEndian.Uint64(p[i:])
		w1 := binary.LittleEndian.Uint64(p[i+8:])
		w2 := binary.LittleEndian.Uint64(p[i+16:])
		w3 := binary.LittleEndian.Uint64(p[i+24:])
		if hasLess(w0, 0x20)|hasLess(w1, 0x20)|hasLess(w2, 0x20)|hasLess(w3, 0x20) != 0 {
			return true
		}
	}
	for ; i < len(p); i++ {
		if p[i] < 0x20 {
			return true
		}
	}
	return false
}

// plainInt is the fast path for an array element that is a plain positive
// integer followed directly by ',' or ']': it returns the end of the digits.
// Anything else (0, a sign, a fraction, an exponent, white space) goes the
// general way through value.
func (s *scanner) plainInt(i int) (int, bool) {
	b := s.b
	if i >= len(b) || b[i] < '1' || b[i] > '9' {
		return i, false
	}
	j := i + 1
	for j < len(b) && b[j]-'0' < 10 {
		j++
	}
	if j < len(b) && (b[j] == ',' || b[j] == ']') {
		return j, true
	}
	return i, false
}
