package jsonb

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// The fuzz targets hold jsonb to encoding/json, the independent reading:
// the same documents are valid, the same ones repeat a name, the index and
// the walk find the members encoding/json decodes, and an edit leaves a
// valid document in which only the named member changed. Seeds live in
// testdata/fuzz/<target>/ (plain `go test` replays them); `make fuzz` runs
// each target for a while.

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `{"a":{"b":[1,{"c":1,"\u0063":2}]}}`, `[{"x":1,"x":1}]`,
		`{"\u0000":1}`, "{\"\xff\":1,\"\\ufffd\":2}", `{"a":1`, `{"a":[1,2,03]}`, ` {"s":"\"\\"} `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		valid := Valid(doc)
		deep := false
		if !valid {
			var se *SyntaxError
			_, err := Parse(doc)
			deep = errors.As(err, &se) && se.Msg == "nesting too deep"
		}
		if valid != json.Valid(doc) && !deep {
			t.Fatalf("Valid = %v, encoding/json says %v", valid, !valid)
		}
		o, err := Parse(doc)
		var dup *DuplicateKeyError
		switch {
		case err == nil:
		case errors.As(err, &dup):
			if !valid || referenceDuplicate(doc) == nil {
				t.Fatalf("duplicate %q reported, encoding/json sees none", dup.Path)
			}
			if doc[dup.Offset] != '"' || dup.Path == "" {
				t.Fatalf("duplicate at %d, path %q", dup.Offset, dup.Path)
			}
			return
		case errors.Is(err, ErrNotObject):
			if !valid || doc[SkipWS(doc, 0)] == '{' {
				t.Fatal("ErrNotObject for an object")
			}
			if referenceDuplicate(doc) != nil {
				t.Fatal("a duplicate went unreported")
			}
			return
		default:
			if valid {
				t.Fatalf("valid document rejected: %v", err)
			}
			return
		}
		if deep {
			return
		}
		if referenceDuplicate(doc) != nil {
			t.Fatal("a duplicate went unreported")
		}
		var all any
		if json.Unmarshal(doc, &all) == nil {
			forEachName(all, func(name string) {
				if !o.MayHaveKey(name) {
					t.Fatalf("MayHaveKey(%q) = false for a name the document holds", name)
				}
			})
		}
		var ref map[string]json.RawMessage
		if err := json.Unmarshal(doc, &ref); err != nil {
			t.Fatalf("encoding/json cannot read an accepted object: %v", err)
		}
		if len(ref) != len(o.Members) {
			t.Fatalf("%d members, encoding/json has %d", len(o.Members), len(ref))
		}
		i := 0
		err = EachMember(doc, o.Start, func(fl Field) bool {
			m := o.Members[i]
			if fl.KeyStart != m.KeyStart || fl.ValStart != m.ValStart || fl.ValEnd != m.ValEnd || !fl.KeyIs(m.Key) {
				t.Fatalf("walk and index disagree on member %d", i)
			}
			i++
			return true
		})
		if err != nil || i != len(o.Members) {
			t.Fatalf("walk: %v after %d members", err, i)
		}
		for _, m := range o.Members {
			want, ok := ref[m.Key]
			got, _ := o.Get(m.Key)
			if !ok || !sameJSON(got, want) {
				t.Fatalf("member %q = %s, encoding/json reads %s", m.Key, got, want)
			}
			if vs, ve, ok := Lookup(doc, o.Start, m.Key); !ok || vs != m.ValStart || ve != m.ValEnd {
				t.Fatalf("Lookup(%q) disagrees with the index", m.Key)
			}
		}
	})
}

// editValues are the values FuzzEdit writes (raw JSON, always valid).
var editValues = [][]byte{[]byte(`1`), []byte(`"x"`), []byte(`{"k":[1,2]}`), []byte(`null`), []byte(`12345678901234567890`)}

// FuzzEdit applies one edit chosen by op to member key of a fuzzed object:
// set, delete, set-if-present, or set inside the nested object at key.
func FuzzEdit(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":{"c":2}}`), "b", uint8(3))
	f.Add([]byte(`{"\u0000":null}`), "\x00", uint8(3)) // the NUL-key panic
	f.Add([]byte(`{"a":1}`), "\x00", uint8(0))
	f.Add([]byte(`{}`), "\xff", uint8(0))
	f.Fuzz(func(t *testing.T, doc []byte, key string, op uint8) {
		o, err := Parse(doc)
		if err != nil {
			return
		}
		val := editValues[int(op>>2)%len(editValues)]
		e := NewEditor(doc)
		oe := e.In(o)
		nested := false
		switch op & 3 {
		case 0:
			oe.Set(key, val)
		case 1:
			oe.Delete(key)
		case 2:
			oe.SetIfPresent(key, val)
		case 3:
			child, ok := oe.Object(key)
			if !ok {
				return
			}
			child.Set("k", val)
			nested = true
		}
		out := e.Body().Bytes()
		if _, err := Parse(out); err != nil {
			t.Fatalf("edit %d of %q produced %s: %v", op&3, key, out, err)
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(doc, &before) != nil || json.Unmarshal(out, &after) != nil {
			t.Fatal("encoding/json cannot read the documents")
		}
		name := normName(key)
		for k, v := range before {
			if k == name {
				continue
			}
			if w, ok := after[k]; !ok || !sameJSON(v, w) {
				t.Fatalf("member %q changed: %s -> %s", k, v, w)
			}
		}
		_, had := before[name]
		got, has := after[name]
		switch {
		case op&3 == 1:
			if has {
				t.Fatal("deleted member still there")
			}
		case op&3 == 2 && !had:
			if has {
				t.Fatal("SetIfPresent added a member")
			}
		case nested:
			var inner map[string]json.RawMessage
			if json.Unmarshal(got, &inner) != nil || !sameJSON(inner["k"], val) {
				t.Fatalf("nested set: %s", got)
			}
		default:
			if !has || !sameJSON(got, val) {
				t.Fatalf("member %q = %s, want %s", name, got, val)
			}
		}
		if len(after) != len(before)+map[bool]int{true: 1}[!had && has]-map[bool]int{true: 1}[had && !has] {
			t.Fatalf("member count %d -> %d", len(before), len(after))
		}
	})
}

func sameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return false
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// forEachName calls f with every member name of every object in v.
func forEachName(v any, f func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			f(k)
			forEachName(e, f)
		}
	case []any:
		for _, e := range x {
			forEachName(e, f)
		}
	}
}
