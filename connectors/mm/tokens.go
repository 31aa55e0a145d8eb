package mm

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/celflow/celflow/internal/jsonb"
)

// ParseTokenIDs parses a JSON array of token ids strictly: every element is
// a plain non-negative integer literal that fits int64. Fractions (1.0),
// exponents (1e19), negatives, strings, bools and null are rejected, and so
// is an empty array. The caller keeps raw itself as Tokens.JSON: ids that
// came from the client or from render are never re-encoded.
//
// A render reply for a 200 KB prompt holds ~50k ids, so the common case is
// one loop that reads the digits straight into a slice sized once. Anything
// it does not expect (another type, a fraction, an overflow, malformed
// separators) hands the whole array to parseTokenIDsSlow, which finds the
// offending element and words the error; the fast loop never decides a
// rejection itself, so both paths accept and reject exactly the same input.
func ParseTokenIDs(raw []byte) ([]int64, error) {
	if ids, ok := parseTokenIDsFast(raw); ok {
		return ids, nil
	}
	return parseTokenIDsSlow(raw)
}

// parseTokenIDsFast accepts `[` ws digits ws (`,` ws digits ws)* `]` where
// every number fits int64; ok is false for anything else (including []).
func parseTokenIDsFast(raw []byte) (ids []int64, ok bool) {
	if len(raw) < 3 || raw[0] != '[' {
		return nil, false
	}
	// One id per comma, and no more than fit (a digit and a comma each):
	// commas inside a hostile string element cannot size the slice beyond
	// what a valid array of that length could need.
	ids = make([]int64, 0, min(bytes.Count(raw, comma)+1, (len(raw)-1)/2))
	i := jsonb.SkipWS(raw, 1)
	for {
		var v uint64
		n := 0
		for i+n < len(raw) {
			d := raw[i+n] - '0'
			if d > 9 {
				break
			}
			v = v*10 + uint64(d)
			n++
		}
		// 18 digits always fit int64; longer numbers (and none) go the slow
		// way, which accepts up to MaxInt64 exactly.
		if n == 0 || n > 18 {
			return nil, false
		}
		ids = append(ids, int64(v))
		i += n
		if i < len(raw) && raw[i] != ',' && raw[i] != ']' {
			i = jsonb.SkipWS(raw, i)
		}
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = jsonb.SkipWS(raw, i+1)
		case ']':
			return ids, true
		default:
			return nil, false
		}
	}
}

var comma = []byte{','}

// parseTokenIDsSlow reads element by element to name what is wrong.
func parseTokenIDsSlow(raw []byte) ([]int64, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("must be a non-empty array of non-negative integers, got %s", jsonb.KindOf(raw))
	}
	var ids []int64
	var bad error
	err := jsonb.EachElement(raw, 0, func(vs, ve int) bool {
		v, err := parseUint(raw[vs:ve])
		if err != nil {
			bad = fmt.Errorf("[%d]: %v", len(ids), err)
			return false
		}
		ids = append(ids, v)
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if err != nil {
		return nil, fmt.Errorf("must be an array: %v", err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("must be a non-empty array of non-negative integers, got []")
	}
	return ids, nil
}

// parseUint reads a non-negative JSON integer literal that fits int64.
func parseUint(raw []byte) (int64, error) {
	if len(raw) == 0 {
		return 0, fmt.Errorf("must be a non-negative integer")
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("must be a non-negative integer, got %s", describe(raw))
		}
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || v > math.MaxInt64 {
		return 0, fmt.Errorf("integer %s is out of range", cut(raw))
	}
	return int64(v), nil
}

// describe renders a rejected value for a message: short values verbatim,
// long ones by type, so no client payload ends up in a reply whole.
func describe(raw []byte) string {
	k := jsonb.KindOf(raw)
	if k == "number" || k == "bool" || k == "null" {
		return cut(raw)
	}
	return k
}

func cut(raw []byte) string {
	if len(raw) > 24 {
		return string(raw[:24]) + "…"
	}
	return string(raw)
}

// AppendTokenIDs appends ids as a JSON array.
func AppendTokenIDs(dst []byte, ids []int64) []byte {
	dst = append(dst, '[')
	for i, v := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, v, 10)
	}
	return append(dst, ']')
}

// TokenJSON returns T as a JSON array: the stored bytes when present (the
// client's or render's own spelling), else encoded from the ids.
func TokenJSON(t Tokens) []byte {
	if t.JSON != nil {
		return t.JSON
	}
	return AppendTokenIDs(make([]byte, 0, 6*len(t.IDs)+2), t.IDs)
}
