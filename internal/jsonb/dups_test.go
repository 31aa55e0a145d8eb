package jsonb

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Duplicate member names anywhere in the document are refused with the
// JSON path of the second occurrence; names compare as decoded text.
func TestParseDuplicates(t *testing.T) {
	many := func(n int, dup bool) string {
		var sb strings.Builder
		sb.WriteString(`{`)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"k` + strconv.Itoa(i) + `":1`)
		}
		if dup {
			sb.WriteString(`,"k3":2`)
		}
		sb.WriteString(`}`)
		return sb.String()
	}
	for _, c := range []struct {
		name, in, path string // path "" = accepted
	}{
		{"top level", `{"max_tokens":1,"model":"m","max_tokens":300}`, "max_tokens"},
		{"escaped spelling", `{"a":1,"\u0061":2}`, "a"},
		{"escaped both", `{"\u0061b":1,"a\u0062":2}`, "ab"},
		{"solidus escape", `{"a/b":1,"a\/b":2}`, `["a/b"]`},
		{"nested", `{"sampling_params":{"max_tokens":1,"min_tokens":3,"max_tokens":300}}`, "sampling_params.max_tokens"},
		{"in array", `{"messages":[{"role":"user"},{"role":"user","content":"a","content":"b"}]}`, "messages[1].content"},
		{"deep", `{"a":[[{"b":{"c":1,"c":2}}]]}`, "a[0][0].b.c"},
		{"stream", `{"stream":false,"stream":true}`, "stream"},
		{"transfer params", `{"kv_transfer_params":{"remote_host":"a"},"x":1,"kv_transfer_params":{"remote_host":"evil"}}`, "kv_transfer_params"},
		{"odd name bracketed", `{"x y":1,"x y":2}`, `["x y"]`},
		{"empty name", `{"":1,"":2}`, `[""]`},
		{"NUL name", `{"\u0000":1,"\u0000":2}`, `["\u0000"]`},
		{"invalid UTF-8 equals U+FFFD", "{\"\xff\":1,\"\\ufffd\":2}", `["�"]`},
		{"lone surrogate equals U+FFFD", `{"\ud800":1,"\ufffd":2}`, `["�"]`},
		{"first of two reported", `{"o":{"a":1,"a":2},"b":1,"b":2}`, "o.a"},
		{"many keys, map path", many(40, true), "k3"},
		{"many keys, no dup", many(40, false), ""},
		{"same name in sibling objects", `{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}]}`, ""},
		{"same name at two levels", `{"x":{"x":{"x":1}}}`, ""},
		{"case differs", `{"a":1,"A":2}`, ""},
		{"prefix", `{"ab":1,"a":2,"abc":3}`, ""},
		{"escapes differ in text", `{"a\n":1,"a\t":2,"a":3}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.in))
			var dup *DuplicateKeyError
			switch {
			case c.path == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.path == "":
			case !errors.As(err, &dup):
				t.Fatalf("err = %v, want a duplicate", err)
			case dup.Path != c.path:
				t.Fatalf("path = %s, want %s", dup.Path, c.path)
			}
			if err := referenceDuplicate([]byte(c.in)); (err != nil) != (c.path != "") {
				t.Errorf("the encoding/json reference disagrees: %v", err)
			}
		})
	}
}

// A syntax error wins over a duplicate seen before it; ObjectAt checks too.
func TestDuplicateVersusSyntax(t *testing.T) {
	_, err := Parse([]byte(`{"a":1,"a":2,}`))
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a syntax error", err)
	}
	in := []byte(`[{"a":{"b":1,"b":2}}]`)
	_, err = ObjectAt(in, 1)
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.Path != "a.b" || dup.Offset != 13 {
		t.Fatalf("ObjectAt: %v", err)
	}
	if !Valid(in) {
		t.Fatal("Valid is syntax only, like encoding/json")
	}
}

func TestDuplicatePathCut(t *testing.T) {
	k := strings.Repeat("é", 100)
	_, err := Parse([]byte(`{"` + k + `":1,"` + k + `":2}`))
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) {
		t.Fatal(err)
	}
	if want := `["` + strings.Repeat("é", 32) + `…"]`; dup.Path != want {
		t.Fatalf("path = %s", dup.Path)
	}
}

// Duplicate detection must not allocate for ordinary bodies: the scanner's
// key stack holds the names of the objects being scanned.
func TestParseAllocs(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"hi"}]}],` +
		`"sampling_params":{"a":1,"b":2},"max_tokens":64,"stream":true}`)
	// The Object, its Members and one string per top-level key.
	if n := testing.AllocsPerRun(100, func() { _, _ = Parse(body) }); n > 2+5 {
		t.Fatalf("Parse allocates %v times", n)
	}
}

func BenchmarkParseSmall(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}],` +
		`"max_tokens":64,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkObjectKeys sizes linearMax: an object of n short keys.
func BenchmarkObjectKeys(b *testing.B) {
	for _, n := range []int{4, 16, 24, 64, 1000} {
		var sb strings.Builder
		sb.WriteString(`[{`)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"key_` + strconv.Itoa(i) + `":1`)
		}
		sb.WriteString(`}]`)
		body := []byte(`{"a":` + sb.String() + `}`)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The hashed set takes over when the stack is full (deep objects of many
// keys) or unusable (a buffer over 4 GiB: limit 0); both find the same
// duplicates as the stack.
func TestDuplicatesPastTheStack(t *testing.T) {
	obj := func(prefix, inner string, dup bool) string {
		var sb strings.Builder
		sb.WriteString(`{`)
		for i := range linearMax {
			sb.WriteString(`"` + prefix + strconv.Itoa(i) + `":1,`)
		}
		if dup {
			sb.WriteString(`"` + prefix + `3":1,`)
		}
		sb.WriteString(`"in":` + inner + `}`)
		return sb.String()
	}
	deep := obj("a", obj("b", obj("c", obj("d", `{}`, true), false), false), false)
	docs := []string{deep, obj("a", obj("b", `{"x":1,"y":2,"x":3}`, false), false), `{"a":1,"b":{"a":1},"\u0062":2}`, `{"a":1,"b":2}`}
	for _, doc := range docs {
		want := referenceDuplicate([]byte(doc)) != nil
		for _, limit := range []int{stackKeys, 0} {
			s := scanner{b: []byte(doc), dups: true, dupAt: -1}
			s.keys.limit = limit
			if _, err := s.object(0, nil); err != nil {
				t.Fatal(err)
			}
			if got := s.dupAt >= 0; got != want {
				t.Errorf("limit %d: duplicate %v, want %v in %.80s…", limit, got, want, doc)
			}
		}
	}
	_, err := Parse([]byte(deep))
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.Path != "in.in.in.d3" {
		t.Fatalf("deep: %v", err)
	}
}
