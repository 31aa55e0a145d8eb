package redact

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Body renders a request or response body for a debug log. A JSON body
// keeps its structure and key order, with every string passed through
// String, arrays cut to MaxArrayItems elements plus a "... +N more" string,
// and any object or array nested deeper than MaxDepth (the top-level value
// is depth 1) replaced by "[truncated]". Anything else is cut at MaxRawChars
// characters.
func Body(b []byte) string {
	if !json.Valid(b) {
		return cutChars(string(b), MaxRawChars)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	w := walker{d: d}
	if err := w.value(1); err != nil {
		// json.Valid said yes, so this is unreachable; never log the raw body.
		return "[unreadable]"
	}
	return w.sb.String()
}

type walker struct {
	d  *json.Decoder
	sb strings.Builder
}

// value copies one JSON value at the given depth.
func (w *walker) value(depth int) error {
	tok, err := w.d.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth > MaxDepth {
			w.quote("[truncated]")
			return w.skipRest()
		}
		if t == '{' {
			return w.object(depth)
		}
		return w.array(depth)
	case string:
		w.quote(String(t))
	case json.Number:
		w.sb.WriteString(t.String())
	case bool:
		w.sb.WriteString(strconv.FormatBool(t))
	case nil:
		w.sb.WriteString("null")
	}
	return nil
}

func (w *walker) object(depth int) error {
	w.sb.WriteByte('{')
	for i := 0; w.d.More(); i++ {
		if i > 0 {
			w.sb.WriteByte(',')
		}
		k, err := w.d.Token()
		if err != nil {
			return err
		}
		w.quote(k.(string))
		w.sb.WriteByte(':')
		if err := w.value(depth + 1); err != nil {
			return err
		}
	}
	w.sb.WriteByte('}')
	_, err := w.d.Token() // '}'
	return err
}

func (w *walker) array(depth int) error {
	w.sb.WriteByte('[')
	n := 0
	for ; w.d.More(); n++ {
		if n >= MaxArrayItems {
			if err := w.skipValue(); err != nil {
				return err
			}
			continue
		}
		if n > 0 {
			w.sb.WriteByte(',')
		}
		if err := w.value(depth + 1); err != nil {
			return err
		}
	}
	if n > MaxArrayItems {
		w.sb.WriteByte(',')
		w.quote("... +" + strconv.Itoa(n-MaxArrayItems) + " more")
	}
	w.sb.WriteByte(']')
	_, err := w.d.Token() // ']'
	return err
}

// skipValue consumes one whole value without writing it.
func (w *walker) skipValue() error {
	tok, err := w.d.Token()
	if err != nil {
		return err
	}
	if _, ok := tok.(json.Delim); ok {
		return w.skipRest()
	}
	return nil
}

// skipRest consumes the rest of a container whose opening delimiter was read.
func (w *walker) skipRest() error {
	for open := 1; open > 0; {
		tok, err := w.d.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				open++
			} else {
				open--
			}
		}
	}
	return nil
}

// quote writes s as a JSON string (no HTML escaping: this is a log).
func (w *walker) quote(s string) {
	const hex = "0123456789abcdef"
	w.sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			w.sb.WriteByte('\\')
			w.sb.WriteByte(c)
		case c == '\n':
			w.sb.WriteString(`\n`)
		case c == '\r':
			w.sb.WriteString(`\r`)
		case c == '\t':
			w.sb.WriteString(`\t`)
		case c < 0x20:
			w.sb.WriteString(`\u00`)
			w.sb.WriteByte(hex[c>>4])
			w.sb.WriteByte(hex[c&0xf])
		default:
			w.sb.WriteByte(c)
		}
	}
	w.sb.WriteByte('"')
}
