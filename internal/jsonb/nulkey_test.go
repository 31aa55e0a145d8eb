package jsonb

import "testing"

// Issue 10: fuzzing the editor against encoding/json found a panic on a key
// that starts with a NUL byte: the editor marked "null replaced by a created
// object" with a key "\x00<index>", so a caller's own key "\x00…" was taken
// for the marker (nil child rendered, or an index out of range). Members are
// now tracked by index, and every name is an ordinary name. Seeds:
// testdata/fuzz/FuzzEdit/nul-*.
func TestEditNULKeys(t *testing.T) {
	cases := []struct {
		name, in, want string
		f              func(oe *ObjectEditor)
	}{
		{"set NUL key", `{"a":1}`, `{"a":1,"\u0000":1}`, func(oe *ObjectEditor) { oe.Set("\x00", []byte("1")) }},
		{"set NUL key on empty", `{}`, `{"\u0000":1}`, func(oe *ObjectEditor) { oe.Set("\x00", []byte("1")) }},
		{"set NUL+index key", `{"a":null,"b":1}`, `{"a":null,"b":1,"\u00000":2}`, func(oe *ObjectEditor) { oe.Set("\x000", []byte("2")) }},
		{"replace existing NUL key", `{"\u0000":1}`, `{"\u0000":2}`, func(oe *ObjectEditor) { oe.Set("\x00", []byte("2")) }},
		{"object on NUL key holding null", `{"\u0000":null}`, `{"\u0000":{"k":1}}`, func(oe *ObjectEditor) {
			c, _ := oe.Object("\x00")
			c.Set("k", []byte("1"))
		}},
		{"object on null next to a NUL key", `{"a":null}`, `{"a":{"k":1},"\u00000":3}`, func(oe *ObjectEditor) {
			c, _ := oe.Object("a")
			c.Set("k", []byte("1"))
			oe.Set("\x000", []byte("3"))
		}},
		{"object twice is one editor", `{"a":null}`, `{"a":{"k":1,"j":2}}`, func(oe *ObjectEditor) {
			c, _ := oe.Object("a")
			c.Set("k", []byte("1"))
			c2, _ := oe.Object("a")
			c2.Set("j", []byte("2"))
		}},
		{"created object then set replaces it", `{}`, `{"a":5}`, func(oe *ObjectEditor) {
			c, _ := oe.Object("a")
			c.Set("k", []byte("1"))
			oe.Set("a", []byte("5"))
		}},
		{"invalid UTF-8 name matches its U+FFFD reading", "{\"\xff\":1}", "{\"\xff\":2}", func(oe *ObjectEditor) { oe.Set("\xff", []byte("2")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := edited(t, c.in, c.f); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

// The walk API reads strings as the scanner does.
func TestSkipString(t *testing.T) {
	cases := map[string]int{
		`"abc"x`:    5,
		`"a\"b"x`:   6,
		`"a\\"x`:    5,
		`"a\\\"b"x`: 8,
		`"\\\\"x`:   6,
	}
	for in, want := range cases {
		got, err := skipString([]byte(in), 0)
		if err != nil || got != want {
			t.Errorf("skipString(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := skipString([]byte(`"abc\"`), 0); err == nil {
		t.Error("unterminated string accepted")
	}
}

func TestWalk(t *testing.T) {
	in := []byte(` {"a" : [1, {"b":"x\"y"}, "z"], "\u0063":null, "d":{}} `)
	var keys []string
	err := EachMember(in, 1, func(f Field) bool {
		keys = append(keys, string(f.RawKey)+"="+string(in[f.ValStart:f.ValEnd]))
		return true
	})
	if err != nil || len(keys) != 3 || keys[0] != `"a"=[1, {"b":"x\"y"}, "z"]` || keys[1] != `"\u0063"=null` || keys[2] != `"d"={}` {
		t.Fatalf("%q %v", keys, err)
	}
	if vs, ve, ok := Lookup(in, 1, "c"); !ok || string(in[vs:ve]) != "null" {
		t.Fatal("Lookup of an escaped name")
	}
	v, _ := TopLevel(in, "a")
	var els []string
	_ = EachElement(v, 0, func(s, e int) bool { els = append(els, string(v[s:e])); return true })
	if len(els) != 3 || els[1] != `{"b":"x\"y"}` {
		t.Fatalf("%q", els)
	}
	for _, bad := range []string{`{"a":1`, `{"a" 1}`, `{"a":}`, `[1 2]`, `{"a":"x`, ``} {
		if EachMember([]byte(bad), 0, func(Field) bool { return true }) == nil && EachElement([]byte(bad), 0, func(int, int) bool { return true }) == nil {
			t.Errorf("%s walked without error", bad)
		}
	}
	if s, ok := Unquote([]byte(`"a\u0062"`)); !ok || string(s) != "ab" {
		t.Error("Unquote")
	}
}
