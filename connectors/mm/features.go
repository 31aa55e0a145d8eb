package mm

import (
	"fmt"

	"github.com/celflow/celflow/internal/jsonb"
)

// nullJSON is the kwargs of a cache-hit item: JSON null, never "".
var nullJSON = []byte("null")

// featureRules tunes parseFeatures for its two callers.
type featureRules struct {
	// kwargsPerModality: when kwargs_data is present, every modality with
	// items must have its own array (render). Generate lets a modality omit
	// it (docs/protocol.md, render).
	kwargsPerModality bool
}

// parseFeatures reads a features value (raw at buf[fs:fe]) into items, one
// per hash, grouped by modality in order of the modality's first appearance
// (mm_hashes, then mm_placeholders, then kwargs_data). nTokens is len(T):
// every placeholder span must lie inside it. Errors are messages with the
// JSON path; callers give them a kind.
func parseFeatures(buf []byte, fs, fe, nTokens int, r featureRules) ([]MediaItem, error) {
	switch buf[fs] {
	case 'n':
		return nil, nil
	case '{':
	default:
		return nil, fmt.Errorf("features: must be an object or null, got %s", jsonb.KindOf(buf[fs:fe]))
	}
	var sec [3]int // value offsets of mm_hashes, mm_placeholders, kwargs_data; -1 absent/null
	sec = [3]int{-1, -1, -1}
	names := [3]string{"mm_hashes", "mm_placeholders", "kwargs_data"}
	var bad error
	_ = jsonb.EachMember(buf, fs, func(f jsonb.Field) bool {
		vs, ve := f.ValStart, f.ValEnd
		for i, n := range names {
			if !f.KeyIs(n) {
				continue
			}
			switch buf[vs] {
			case 'n':
				sec[i] = -1
			case '{':
				sec[i] = vs
			default:
				bad = fmt.Errorf("features.%s: must be an object, got %s", n, jsonb.KindOf(buf[vs:ve]))
				return false
			}
		}
		return true
	})
	if bad != nil {
		return nil, bad
	}
	var mods []string
	for _, s := range sec {
		if s < 0 {
			continue
		}
		_ = jsonb.EachMember(buf, s, func(f jsonb.Field) bool {
			name, _ := jsonb.Unquote(f.RawKey)
			m := string(name)
			for _, have := range mods {
				if have == m {
					return true
				}
			}
			mods = append(mods, m)
			return true
		})
	}
	var items []MediaItem
	for _, m := range mods {
		hashes, err := hashList(buf, sec[0], m)
		if err != nil {
			return nil, err
		}
		spans, err := spanList(buf, sec[1], m, nTokens)
		if err != nil {
			return nil, err
		}
		if len(spans) != len(hashes) {
			if len(hashes) > 0 && len(spans) == 0 {
				return nil, fmt.Errorf("features.mm_placeholders.%s: required with mm_hashes.%s (%d entries)", m, m, len(hashes))
			}
			return nil, fmt.Errorf("features.mm_placeholders.%s: has %d entries, mm_hashes.%s has %d", m, len(spans), m, len(hashes))
		}
		kw, state, err := kwargsList(buf, sec[2], m)
		if err != nil {
			return nil, err
		}
		if state == kwAbsent && sec[2] >= 0 && r.kwargsPerModality && len(hashes) > 0 {
			return nil, fmt.Errorf("features.kwargs_data.%s: missing, mm_hashes.%s has %d entries", m, m, len(hashes))
		}
		present := state == kwArray
		if present && len(kw) != len(hashes) {
			return nil, fmt.Errorf("features.kwargs_data.%s: has %d entries, mm_hashes.%s has %d", m, len(kw), m, len(hashes))
		}
		for k, h := range hashes {
			it := MediaItem{
				Index: len(items), Modality: m, Part: k,
				Hash: h, Offset: spans[k][0], Length: spans[k][1],
				Kwargs: nullJSON, HasFeatures: true,
			}
			if present {
				it.Kwargs = kw[k]
			}
			items = append(items, it)
		}
	}
	return items, nil
}

// modArray finds section[m] and requires an array (null counts as empty).
func modArray(buf []byte, sec int, sname, m string) (start int, ok bool, err error) {
	if sec < 0 {
		return 0, false, nil
	}
	vs, ve, found := jsonb.Lookup(buf, sec, m)
	if !found || buf[vs] == 'n' {
		return 0, false, nil
	}
	if buf[vs] != '[' {
		return 0, false, fmt.Errorf("features.%s.%s: must be an array, got %s", sname, m, jsonb.KindOf(buf[vs:ve]))
	}
	return vs, true, nil
}

func hashList(buf []byte, sec int, m string) ([]string, error) {
	start, ok, err := modArray(buf, sec, "mm_hashes", m)
	if !ok {
		return nil, err
	}
	var out []string
	var bad error
	_ = jsonb.EachElement(buf, start, func(vs, ve int) bool {
		s, ok := jsonb.Unquote(buf[vs:ve])
		if !ok {
			bad = fmt.Errorf("features.mm_hashes.%s[%d]: must be a string, got %s", m, len(out), jsonb.KindOf(buf[vs:ve]))
			return false
		}
		out = append(out, string(s))
		return true
	})
	return out, bad
}

// spanList reads placeholders as {offset,length} pairs and checks each span
// lies inside T without integer overflow.
func spanList(buf []byte, sec int, m string, nTokens int) ([][2]int, error) {
	start, ok, err := modArray(buf, sec, "mm_placeholders", m)
	if !ok {
		return nil, err
	}
	var out [][2]int
	var bad error
	_ = jsonb.EachElement(buf, start, func(vs, ve int) bool {
		path := fmt.Sprintf("features.mm_placeholders.%s[%d]", m, len(out))
		if buf[vs] != '{' {
			bad = fmt.Errorf("%s: must be an object with offset and length, got %s", path, jsonb.KindOf(buf[vs:ve]))
			return false
		}
		var v [2]int64
		for i, f := range [2]string{"offset", "length"} {
			fs, fe, found := jsonb.Lookup(buf, vs, f)
			if !found {
				bad = fmt.Errorf("%s.%s: required", path, f)
				return false
			}
			n, err := parseUint(buf[fs:fe])
			if err != nil {
				bad = fmt.Errorf("%s.%s: %v", path, f, err)
				return false
			}
			v[i] = n
		}
		off, length, t := v[0], v[1], int64(nTokens)
		if off >= t {
			bad = fmt.Errorf("%s: offset %d is outside the prompt of %d tokens", path, off, t)
			return false
		}
		if length > t-off {
			bad = fmt.Errorf("%s: span offset %d length %d ends past the prompt of %d tokens", path, off, length, t)
			return false
		}
		out = append(out, [2]int{int(off), int(length)})
		return true
	})
	return out, bad
}

// kwargsList states.
const (
	kwAbsent = iota // no kwargs_data.<m> key
	kwNull          // kwargs_data.<m> is null: every item of m is a cache hit
	kwArray
)

// kwargsList reads kwargs_data.<m>: each entry a string (kept raw, quotes
// included) or null (a cache hit).
func kwargsList(buf []byte, sec int, m string) ([][]byte, int, error) {
	if sec < 0 {
		return nil, kwAbsent, nil
	}
	vs, ve, found := jsonb.Lookup(buf, sec, m)
	switch {
	case !found:
		return nil, kwAbsent, nil
	case buf[vs] == 'n':
		return nil, kwNull, nil
	case buf[vs] != '[':
		return nil, kwAbsent, fmt.Errorf("features.kwargs_data.%s: must be an array, got %s", m, jsonb.KindOf(buf[vs:ve]))
	}
	var out [][]byte
	var bad error
	_ = jsonb.EachElement(buf, vs, func(es, ee int) bool {
		switch buf[es] {
		case '"':
			out = append(out, buf[es:ee:ee])
		case 'n':
			out = append(out, nullJSON)
		default:
			bad = fmt.Errorf("features.kwargs_data.%s[%d]: must be a string or null, got %s", m, len(out), jsonb.KindOf(buf[es:ee]))
			return false
		}
		return true
	})
	return out, kwArray, bad
}
