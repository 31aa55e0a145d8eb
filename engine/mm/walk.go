package mm

import (
	"bytes"
	"encoding/json"
	"errors"
)

// This file is a tiny reader over JSON that is already known to be valid
// (the front validated the body with jsonb.Parse; render replies went
// through leg.ReadJSON). It only skips and locates values: strings are
// jumped with bytes.IndexByte, so a 1 MB base64 payload costs a memchr, not
// a byte-by-byte state machine, and nothing is allocated. Every index is
// bounds-checked: on malformed input the walker reports errBadJSON instead
// of panicking or looping.

var errBadJSON = errors.New("malformed JSON")

func ws(b []byte, i int) int {
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

// skipString returns the offset one past the string whose quote is at i.
func skipString(b []byte, i int) (int, error) {
	k := i + 1
	for {
		if k > len(b) {
			return 0, errBadJSON
		}
		j := bytes.IndexByte(b[k:], '"')
		if j < 0 {
			return 0, errBadJSON
		}
		q := k + j
		n := 0 // backslashes right before the quote: odd means escaped
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
		return 0, errBadJSON
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
		return 0, errBadJSON
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
			return 0, errBadJSON
		}
		return j, nil
	}
}

// eachMember calls fn for every member of the object whose '{' is at i,
// with the raw key (quotes included) and the value's [vs,ve). fn returning
// false stops the walk early.
func eachMember(b []byte, i int, fn func(key []byte, vs, ve int) bool) error {
	if i >= len(b) || b[i] != '{' {
		return errBadJSON
	}
	i = ws(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errBadJSON
		}
		ke, err := skipString(b, i)
		if err != nil {
			return err
		}
		key := b[i:ke]
		i = ws(b, ke)
		if i >= len(b) || b[i] != ':' {
			return errBadJSON
		}
		vs := ws(b, i+1)
		ve, err := skipValue(b, vs)
		if err != nil {
			return err
		}
		if !fn(key, vs, ve) {
			return nil
		}
		i = ws(b, ve)
		if i >= len(b) {
			return errBadJSON
		}
		switch b[i] {
		case ',':
			i = ws(b, i+1)
		case '}':
			return nil
		default:
			return errBadJSON
		}
	}
}

// eachElem calls fn for every element [vs,ve) of the array whose '[' is at i.
func eachElem(b []byte, i int, fn func(vs, ve int) bool) error {
	if i >= len(b) || b[i] != '[' {
		return errBadJSON
	}
	i = ws(b, i+1)
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
		i = ws(b, ve)
		if i >= len(b) {
			return errBadJSON
		}
		switch b[i] {
		case ',':
			i = ws(b, i+1)
		case ']':
			return nil
		default:
			return errBadJSON
		}
	}
}

// keyIs compares a raw key (with quotes) to name; escaped keys take the slow path.
func keyIs(raw []byte, name string) bool {
	if len(raw) < 2 {
		return false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return string(in) == name
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == name
}

// stringValue returns a JSON string's text. The common, escape-free case
// aliases the buffer; escapes are decoded into a new slice.
func stringValue(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in, true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// kindOf names a raw value's JSON type for messages and type checks.
func kindOf(raw []byte) string {
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

// lookup returns the raw value of key in the object at i (the last
// occurrence wins, as in the Python workers that read the body after us).
func lookup(b []byte, i int, key string) (vs, ve int, ok bool) {
	vs, ve, ok, _ = lookupErr(b, i, key)
	return
}

// lookupErr is lookup that also reports malformed input.
func lookupErr(b []byte, i int, key string) (vs, ve int, ok bool, err error) {
	err = eachMember(b, i, func(k []byte, s, e int) bool {
		if keyIs(k, key) {
			vs, ve, ok = s, e, true
		}
		return true
	})
	if err != nil {
		return 0, 0, false, err
	}
	return
}

// Unquote returns the text of a raw JSON string value (quotes included in
// raw). The escape-free case aliases raw; false when raw is not a string.
func Unquote(raw []byte) ([]byte, bool) { return stringValue(raw) }

// TopLevel returns the raw value of a top-level member of body (valid JSON;
// the last occurrence wins). Large values are skipped, not scanned.
func TopLevel(body []byte, key string) ([]byte, bool) {
	i := ws(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	vs, ve, ok := lookup(body, i, key)
	if !ok {
		return nil, false
	}
	return body[vs:ve], true
}
