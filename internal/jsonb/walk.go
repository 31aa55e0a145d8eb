package jsonb

import (
	"bytes"
	"errors"
)

// The walk functions read JSON that Parse, ObjectAt or Valid already
// accepted (the client body at the front, a worker reply after
// leg.ReadJSON): they locate members and elements without validating
// again, so a 1 MB base64 string costs one memchr, and allocate nothing.
// They share the validating scanner's reading of names (unquoteKey), so a
// walk, Object.Get, the editor and duplicate detection agree on which
// member a name means. On bytes that are not valid JSON they return
// ErrMalformed or stop early; they never panic and never read out of
// bounds, but their ranges are then meaningless.

// ErrMalformed is returned by the walk functions on bytes that are not JSON.
var ErrMalformed = errors.New("malformed JSON")

// Field is one member of an object as EachMember sees it.
type Field struct {
	RawKey   []byte // the key as written, quotes included (aliases the buffer)
	KeyStart int    // offset of the key's opening quote
	// ValStart..ValEnd is the raw value.
	ValStart, ValEnd int
}

// KeyIs reports whether the member's name is name.
func (f *Field) KeyIs(name string) bool { return KeyIs(f.RawKey, name) }

// KeyIs reports whether the raw key (quotes included) names name, compared
// as encoding/json decodes keys. Escape-free keys compare without allocating.
func KeyIs(raw []byte, name string) bool {
	if len(raw) < 2 {
		return false
	}
	if plainKey(raw) {
		return string(raw[1:len(raw)-1]) == name
	}
	return unquoteKey(raw) == normName(name)
}

// EachMember calls fn for every member of the object whose '{' is at start,
// in order, until fn returns false.
func EachMember(buf []byte, start int, fn func(f Field) bool) error {
	b := buf
	if start < 0 || start >= len(b) || b[start] != '{' {
		return ErrMalformed
	}
	i := SkipWS(b, start+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return ErrMalformed
		}
		ke, err := skipString(b, i)
		if err != nil {
			return err
		}
		f := Field{RawKey: b[i:ke], KeyStart: i}
		i = SkipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return ErrMalformed
		}
		f.ValStart = SkipWS(b, i+1)
		if f.ValEnd, err = skipValue(b, f.ValStart); err != nil {
			return err
		}
		if !fn(f) {
			return nil
		}
		i = SkipWS(b, f.ValEnd)
		if i >= len(b) {
			return ErrMalformed
		}
		switch b[i] {
		case ',':
			i = SkipWS(b, i+1)
		case '}':
			return nil
		default:
			return ErrMalformed
		}
	}
}

// EachElement calls fn for every element [vs,ve) of the array whose '[' is
// at start, in order, until fn returns false.
func EachElement(buf []byte, start int, fn func(vs, ve int) bool) error {
	b := buf
	if start < 0 || start >= len(b) || b[start] != '[' {
		return ErrMalformed
	}
	i := SkipWS(b, start+1)
	if i < len(b) && b[i] == ']' {
		return nil
	}
	for {
		ve, err := skipValue(b, i)
		if err != nil {
			return err
		}
		if !fn(i, ve) {
			return nil
		}
		i = SkipWS(b, ve)
		if i >= len(b) {
			return ErrMalformed
		}
		switch b[i] {
		case ',':
			i = SkipWS(b, i+1)
		case ']':
			return nil
		default:
			return ErrMalformed
		}
	}
}

// Lookup returns the value range of member key of the object at start. A
// body Parse accepted has at most one; on bytes nobody checked for
// duplicates the first wins, as in Object.Get and the editor.
func Lookup(buf []byte, start int, key string) (vs, ve int, ok bool) {
	_ = EachMember(buf, start, func(f Field) bool {
		if f.KeyIs(key) {
			vs, ve, ok = f.ValStart, f.ValEnd, true
			return false
		}
		return true
	})
	return vs, ve, ok
}

// TopLevel returns the raw value of a top-level member of buf (an object).
func TopLevel(buf []byte, key string) ([]byte, bool) {
	vs, ve, ok := Lookup(buf, SkipWS(buf, 0), key)
	if !ok {
		return nil, false
	}
	return buf[vs:ve], true
}

// Unquote returns the text of a raw JSON string value (quotes included).
// The escape-free case aliases raw; escapes are decoded into a new slice.
// ok is false when raw is not a string.
func Unquote(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in, true
	}
	s, ok := unquoteString(raw)
	if !ok {
		return nil, false
	}
	return []byte(s), true
}

// KindOf names a raw value's JSON type for messages and type checks:
// object, array, string, null, bool, number, or nothing (empty).
func KindOf(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 'n':
		return "null"
	case 't', 'f':
		return "bool"
	}
	return "number"
}

// SkipWS returns the offset of the first byte at or after i that is not
// JSON white space (len(b) when there is none).
func SkipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset one past the string whose quote is at i:
// the next quote not preceded by an odd run of backslashes.
func skipString(b []byte, i int) (int, error) {
	k := i + 1
	for {
		if k > len(b) {
			return 0, ErrMalformed
		}
		j := bytes.IndexByte(b[k:], '"')
		if j < 0 {
			return 0, ErrMalformed
		}
		q := k + j
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		k = q + 1
	}
}

// skipValue returns the offset one past the value starting at i.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, ErrMalformed
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, ErrMalformed
	default: // number or literal
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			j++
		}
		if j == i {
			return 0, ErrMalformed
		}
		return j, nil
	}
}
