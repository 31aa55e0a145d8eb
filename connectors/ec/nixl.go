package ec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// nixl: vLLM's NIXL EC connector. Every non-empty reply is appended in item
// order; Prepare collapses identical duplicates, drops null descriptors and
// rejects conflicts.
type nixl struct{}

func (nixl) Name() string { return NIXL }

func (nixl) Merge(replies []Params) json.RawMessage {
	var out []byte
	for _, r := range replies {
		if len(r) == 0 {
			continue
		}
		// A reply's own keys come in a map: sort them so the record is
		// deterministic (item order is what matters across replies).
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if out == nil {
				out = append(out, '{')
			} else {
				out = append(out, ',')
			}
			kb, _ := json.Marshal(k)
			out = append(out, kb...)
			out = append(out, ':')
			v := bytes.TrimSpace(r[k])
			if len(v) == 0 {
				v = []byte("null")
			}
			out = append(out, v...)
		}
	}
	if out == nil {
		return nil
	}
	return append(out, '}')
}

func (nixl) Prepare(recorded json.RawMessage) (Params, error) {
	ms, err := members(recorded)
	if err != nil {
		return nil, err
	}
	var out Params
	seen := make(map[string]json.RawMessage, len(ms))
	for _, m := range ms {
		if prev, dup := seen[m.key]; dup {
			if !jsonEqual(prev, m.val) {
				return nil, fmt.Errorf("%w: hash %q has two different descriptors", ErrConflict, m.key)
			}
			continue
		}
		seen[m.key] = m.val
		if string(m.val) == "null" { // recorded, but nothing to hand over
			continue
		}
		if out == nil {
			out = make(Params, len(ms))
		}
		out[m.key] = append(json.RawMessage(nil), m.val...) // defensive copy
	}
	return out, nil
}

type member struct {
	key string
	val json.RawMessage
}

// members lists a recorded object's members in order, duplicates kept.
func members(raw json.RawMessage) ([]member, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("ec_transfer_params record is not an object")
	}
	var ms []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("ec_transfer_params record: %v", err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("ec_transfer_params record: %v", err)
		}
		ms = append(ms, member{k, v})
	}
	return ms, nil
}

// jsonEqual compares two JSON values: object key order is ignored, numbers
// compare by exact value (1.0 equals 1, 12345678901234567890 keeps every digit).
func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, errA := decodeNumbers(a)
	vb, errB := decodeNumbers(b)
	return errA == nil && errB == nil && equalValues(va, vb)
}

func decodeNumbers(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func equalValues(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equalValues(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalValues(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		if !smallExp(x) || !smallExp(y) {
			return false // not worth an unbounded big.Rat
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	default: // string, bool, nil
		return a == b
	}
}

// smallExp reports whether a number's exponent is small enough to compare
// exactly without a huge allocation.
func smallExp(n json.Number) bool {
	s := string(n)
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return len(s) <= 400
	}
	e, err := strconv.Atoi(s[i+1:])
	return err == nil && e >= -400 && e <= 400 && i <= 400
}
