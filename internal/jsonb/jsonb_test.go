package jsonb

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
)

func TestParseRejects(t *testing.T) {
	// ACCEPTANCE 11: invalid JSON, empty, null, an array, a string or a number.
	for _, in := range []string{``, `   `, `{`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `null`, `[1,2]`, `"str"`, `42`,
		`{"a":1} x`, `{"a":"\x01"}`, `{"a":01}`, `{"a":1.}`, `{"a":"\q"}`, `{"a":tru}`, `{'a':1}`} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

func TestParseIndexes(t *testing.T) {
	in := []byte(` {"model":"m", "seed":12345678901234567890,"x\u0041":[1,{"b":2}],"t":1.0e3 } `)
	o, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"model": `"m"`, "seed": `12345678901234567890`, "xA": `[1,{"b":2}]`, "t": `1.0e3`}
	if len(o.Members) != len(want) {
		t.Fatalf("members = %d", len(o.Members))
	}
	for k, v := range want {
		got, ok := o.Get(k)
		if !ok || string(got) != v {
			t.Errorf("Get(%q) = %q, %v; want %q", k, got, ok, v)
		}
	}
	if !json.Valid(in) {
		t.Fatal("fixture invalid")
	}
}

func edited(t *testing.T, in string, f func(oe *ObjectEditor)) string {
	t.Helper()
	o, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEditor(o.Buf)
	f(e.In(o))
	b := e.Body()
	out := b.Bytes()
	if b.Len() != len(out) {
		t.Fatalf("Len %d != %d", b.Len(), len(out))
	}
	r, _ := io.ReadAll(b.Reader())
	if !bytes.Equal(r, out) {
		t.Fatalf("Reader %q != Bytes %q", r, out)
	}
	var sink bytes.Buffer
	if _, err := b.WriteTo(&sink); err != nil || !bytes.Equal(sink.Bytes(), out) {
		t.Fatalf("WriteTo %q != %q", sink.Bytes(), out)
	}
	if !json.Valid(out) {
		t.Fatalf("edit produced invalid JSON: %s", out)
	}
	return string(out)
}

func TestEdits(t *testing.T) {
	cases := []struct {
		name, in, want string
		f              func(oe *ObjectEditor)
	}{
		{"replace keeps position and spelling elsewhere", `{"seed":12345678901234567890,"max_tokens":200,"temperature":1.0}`,
			`{"seed":12345678901234567890,"max_tokens":1,"temperature":1.0}`,
			func(oe *ObjectEditor) { oe.Set("max_tokens", []byte("1")) }},
		{"add goes at the end", `{"a":1}`, `{"a":1,"stream":false}`,
			func(oe *ObjectEditor) { oe.Set("stream", []byte("false")) }},
		{"add to empty", `{}`, `{"b":2}`, func(oe *ObjectEditor) { oe.Set("b", []byte("2")) }},
		{"delete first", `{"a":1,"b":2,"c":3}`, `{"b":2,"c":3}`, func(oe *ObjectEditor) { oe.Delete("a") }},
		{"delete middle", `{"a":1, "b":2, "c":3}`, `{"a":1, "c":3}`, func(oe *ObjectEditor) { oe.Delete("b") }},
		{"delete last", `{"a":1,"b":2,"c":3}`, `{"a":1,"b":2}`, func(oe *ObjectEditor) { oe.Delete("c") }},
		{"delete last two", `{"a":1,"b":2,"c":3}`, `{"a":1}`, func(oe *ObjectEditor) { oe.Delete("b"); oe.Delete("c") }},
		{"delete all", `{"a":1,"b":2}`, `{}`, func(oe *ObjectEditor) { oe.Delete("a"); oe.Delete("b") }},
		{"delete all then add", `{"a":1,"b":2}`, `{"z":0}`, func(oe *ObjectEditor) {
			oe.Delete("a")
			oe.Delete("b")
			oe.Set("z", []byte("0"))
		}},
		{"delete last then add", `{"a":1,"b":2}`, `{"a":1,"z":0}`, func(oe *ObjectEditor) {
			oe.Delete("b")
			oe.Set("z", []byte("0"))
		}},
		{"delete absent is a no-op", `{"a":1}`, `{"a":1}`, func(oe *ObjectEditor) { oe.Delete("x") }},
		{"set if present", `{"n":3}`, `{"n":1}`, func(oe *ObjectEditor) {
			oe.SetIfPresent("n", []byte("1"))
			oe.SetIfPresent("max_completion_tokens", []byte("1"))
		}},
		{"nested existing", `{"sampling_params":{"temperature":0.2,"max_tokens":50,"min_tokens":3},"x":1}`,
			`{"sampling_params":{"temperature":0.2,"max_tokens":1,"extra_args":{"kv_transfer_params":{"a":1}}},"x":1}`,
			func(oe *ObjectEditor) {
				sp, ok := oe.Object("sampling_params")
				if !ok {
					t.Fatal("not ok")
				}
				sp.Set("max_tokens", []byte("1"))
				sp.Delete("min_tokens")
				ea, _ := sp.Object("extra_args")
				ea.Set("kv_transfer_params", []byte(`{"a":1}`))
			}},
		{"nested absent is created", `{"token_ids":[1]}`, `{"token_ids":[1],"sampling_params":{"max_tokens":1}}`,
			func(oe *ObjectEditor) {
				sp, _ := oe.Object("sampling_params")
				sp.Set("max_tokens", []byte("1"))
			}},
		{"nested null is replaced", `{"sampling_params":null,"z":1}`, `{"sampling_params":{"max_tokens":1},"z":1}`,
			func(oe *ObjectEditor) {
				sp, _ := oe.Object("sampling_params")
				sp.Set("max_tokens", []byte("1"))
			}},
		{"nested existing extra_args kept", `{"sampling_params":{"extra_args":{"k":"v"}}}`,
			`{"sampling_params":{"extra_args":{"k":"v","kv_transfer_params":{}}}}`,
			func(oe *ObjectEditor) {
				sp, _ := oe.Object("sampling_params")
				ea, _ := sp.Object("extra_args")
				ea.Set("kv_transfer_params", []byte(`{}`))
			}},
		{"key with escapes quoted", `{}`, `{"a\"b":1}`, func(oe *ObjectEditor) { oe.Set(`a"b`, []byte("1")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := edited(t, c.in, c.f); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestObjectOnScalarFails(t *testing.T) {
	o, _ := Parse([]byte(`{"sampling_params":[1]}`))
	if _, ok := NewEditor(o.Buf).In(o).Object("sampling_params"); ok {
		t.Fatal("array accepted as object")
	}
}

func TestSpliceDeep(t *testing.T) {
	in := []byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`)
	o, _ := Parse(in)
	msgs, _ := o.Get("messages")
	start := bytes.Index(in, msgs)
	els, err := Elements(in, start)
	if err != nil || len(els) != 1 {
		t.Fatal(err, els)
	}
	m, _ := ObjectAt(in, els[0][0])
	content, _ := m.Get("content")
	parts, _ := Elements(in, bytes.Index(in, content))
	part, _ := ObjectAt(in, parts[0][0])
	e := NewEditor(in)
	e.In(part).Set("uuid", Quote("h0"))
	got := string(e.Body().Bytes())
	want := `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"},"uuid":"h0"}]}]}`
	if got != want {
		t.Fatalf("got %s", got)
	}
}

func TestLargeBodyNotCopied(t *testing.T) {
	big := `{"messages":"` + strings.Repeat("A", 1<<20) + `","max_tokens":5}`
	o, err := Parse([]byte(big))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEditor(o.Buf)
	e.In(o).Set("max_tokens", []byte("1"))
	b := e.Body()
	// The 1 MiB string is referenced, not copied: the first segment aliases the input.
	if &b.segs[0][0] != &o.Buf[0] {
		t.Fatal("first segment is a copy")
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{"a": `"a"`, "\n\t\"\\": `"\n\t\"\\"`, "\x01": `"\u0001"`, "é": `"é"`} {
		if got := string(Quote(in)); got != want {
			t.Errorf("Quote(%q) = %s want %s", in, got, want)
		}
	}
}

func BenchmarkParse200KB(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 200<<10/12) + `"}],"max_tokens":64,"stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrefillCap(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":64,"min_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		o, _ := Parse(body)
		e := NewEditor(body)
		oe := e.In(o)
		oe.Set("max_tokens", []byte("1"))
		oe.Delete("min_tokens")
		oe.Set("stream", []byte("false"))
		oe.Delete("stream_options")
		oe.Set("kv_transfer_params", []byte(`{"do_remote_decode":true,"do_remote_prefill":false}`))
		_ = e.Body()
	}
}

// The 8-byte skip loop must see a control character, quote or backslash at
// any position of a word.
func TestStringScanEveryPosition(t *testing.T) {
	for pos := 0; pos < 17; pos++ {
		base := []byte(strings.Repeat("x", 17))
		bad := append([]byte(nil), base...)
		bad[pos] = '\n'
		if _, err := Parse([]byte(`{"a":"` + string(bad) + `"}`)); err == nil {
			t.Errorf("control char at %d accepted", pos)
		}
		esc := string(base[:pos]) + `\"` + string(base[pos:])
		o, err := Parse([]byte(`{"a":"` + esc + `","b":1}`))
		if err != nil {
			t.Fatalf("escape at %d: %v", pos, err)
		}
		if v, _ := o.Get("b"); string(v) != "1" {
			t.Errorf("escape at %d: b = %q", pos, v)
		}
	}
}

// Long strings take the vectorised path: a control byte or an escape
// anywhere in them must still be seen.
func TestLongStringScan(t *testing.T) {
	for _, n := range []int{65, 100, 257} {
		for pos := 0; pos < n; pos += 7 {
			base := []byte(strings.Repeat("y", n))
			bad := append([]byte(nil), base...)
			bad[pos] = 0x1f
			if _, err := Parse([]byte(`{"a":"` + string(bad) + `"}`)); err == nil {
				t.Errorf("n=%d: control byte at %d accepted", n, pos)
			}
			esc := string(base[:pos]) + `\"` + string(base[pos:])
			o, err := Parse([]byte(`{"a":"` + esc + `","b":2}`))
			if err != nil {
				t.Fatalf("n=%d: escape at %d: %v", n, pos, err)
			}
			if v, _ := o.Get("a"); len(v) != n+4 {
				t.Errorf("n=%d: escape at %d: value %d bytes", n, pos, len(v))
			}
		}
	}
}

func BenchmarkParseTokenArray50k(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"token_ids":[`)
	for i := 0; i < 50000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(100 + i*7919%49000))
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The plain-integer fast path of arrays hands every unusual element to the
// general scanner.
func TestArrayNumbers(t *testing.T) {
	good := []string{`[1,2,3]`, `[0,10,-5]`, `[1.5,2e3,7]`, `[ 1 , 2 ]`, `[12345678901234567890]`, `[1,"a",[2],{"b":3}]`}
	bad := []string{`[01]`, `[1,]`, `[1 2]`, `[1.]`, `[1e]`, `[-]`, `[1,2`, `[12a]`, `[1,,2]`}
	for _, in := range good {
		if !Valid([]byte(in)) {
			t.Errorf("%s rejected", in)
		}
	}
	for _, in := range bad {
		if Valid([]byte(in)) {
			t.Errorf("%s accepted", in)
		}
	}
	els, err := Elements([]byte(`[7,88,-9,1.5]`), 0)
	if err != nil || len(els) != 4 || els[1] != [2]int{3, 5} || els[3] != [2]int{9, 12} {
		t.Errorf("elements %v, %v", els, err)
	}
}

// MayHaveKey is never wrong about a name that is there, at any depth and
// however escaped, and rules out names that are not (for these, at least:
// a false positive is allowed by contract but would show here).
func TestMayHaveKey(t *testing.T) {
	o, err := Parse([]byte(`{"model":"m","messages":[{"content":[{"type":"image_url","uui\u0064":"x"}]}],"sampling_params":{"extra_args":{"kv_transfer_params":{}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"model", "messages", "content", "type", "uuid", "sampling_params", "extra_args", "kv_transfer_params"} {
		if !o.MayHaveKey(k) {
			t.Errorf("MayHaveKey(%q) = false for a present name", k)
		}
	}
	plain, _ := Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	for _, k := range []string{"uuid", "kv_transfer_params", "ec_transfer_params"} {
		if plain.MayHaveKey(k) {
			t.Errorf("MayHaveKey(%q) = true for an absent name (a collision in the 64-bit filter: pick other seeds or widen it)", k)
		}
	}
}
