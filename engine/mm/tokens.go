package mm

import (
	"fmt"
	"math"
	"strconv"

	"github.com/celflow/celflow/engine"
)

// ParseTokenIDs parses a JSON array of token ids strictly: every element is
// a plain non-negative integer literal that fits int64. Fractions (1.0),
// exponents (1e19), negatives, strings, bools and null are rejected, and so
// is an empty array. The caller keeps raw itself as Tokens.JSON: ids that
// came from the client or from render are never re-encoded.
func ParseTokenIDs(raw []byte) ([]int64, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("must be a non-empty array of non-negative integers, got %s", kindOf(raw))
	}
	ids := make([]int64, 0, estimateCount(raw))
	var bad error
	err := eachElem(raw, 0, func(vs, ve int) bool {
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

// estimateCount guesses the element count from the commas, to size the slice once.
func estimateCount(raw []byte) int {
	n := 1
	for _, c := range raw {
		if c == ',' {
			n++
		}
	}
	return n
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
	k := kindOf(raw)
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
func TokenJSON(t engine.Tokens) []byte {
	if t.JSON != nil {
		return t.JSON
	}
	return AppendTokenIDs(make([]byte, 0, 6*len(t.IDs)+2), t.IDs)
}
