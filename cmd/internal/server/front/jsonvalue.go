package front

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// The value and string encoders of JSONFormatter: encoding/json's output
// for the types a log line usually holds, appended without reflection.

// appendJSONValue appends v as encoding/json (HTML escaping on) prints it
// inside a logrus.Fields map, errors as their text. It reports false when
// encoding/json would fail (NaN, infinities, unsupported types).
func appendJSONValue(dst []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return appendJSONString(dst, v), true
	case bool:
		return strconv.AppendBool(dst, v), true
	case int:
		return strconv.AppendInt(dst, int64(v), 10), true
	case int64:
		return strconv.AppendInt(dst, v, 10), true
	case int32:
		return strconv.AppendInt(dst, int64(v), 10), true
	case int16:
		return strconv.AppendInt(dst, int64(v), 10), true
	case int8:
		return strconv.AppendInt(dst, int64(v), 10), true
	case uint:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint64:
		return strconv.AppendUint(dst, v, 10), true
	case uint32:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint16:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uint8:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case uintptr:
		return strconv.AppendUint(dst, uint64(v), 10), true
	case float64:
		return appendJSONFloat(dst, v, 64)
	case float32:
		return appendJSONFloat(dst, float64(v), 32)
	case time.Duration: // an int64 to encoding/json, not its String()
		return strconv.AppendInt(dst, int64(v), 10), true
	case error: // logrus.JSONFormatter prints v.Error() (logrus issue 137)
		return appendJSONString(dst, v.Error()), true
	}
	// Named types, Marshalers, Stringers (printed by their fields, not
	// String(), exactly as encoding/json does), slices, maps, structs.
	raw, err := json.Marshal(v)
	if err != nil {
		return dst, false
	}
	return append(dst, raw...), true
}

// appendJSONFloat is encoding/json's floatEncoder: 'f' notation except for
// very small or large magnitudes, and "e-07" shortened to "e-7".
func appendJSONFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// htmlSafe reports whether encoding/json copies the ASCII byte c as is with
// HTML escaping on (no control characters, quote, backslash, <, >, &).
func htmlSafe(c byte) bool {
	return c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// appendJSONString is encoding/json's string encoder with HTML escaping on,
// which logrus.JSONFormatter uses: \b \f \n \r \t short forms, other control
// bytes and <, >, & as \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped. (jsonb.AppendQuote escapes for request bodies and differs on all
// of these but the control bytes, so it cannot give logrus's bytes.)
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if htmlSafe(c) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
