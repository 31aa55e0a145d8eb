package sim

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestWordIDStable(t *testing.T) {
	words := strings.Fields("hello world the quick brown fox celflow 42 日本")
	for _, w := range words {
		id := WordID(w)
		if id != WordID(w) {
			t.Errorf("%q: unstable id", w)
		}
		if id < wordMin || id >= wordMax+10 || (id >= ImageToken && id < ImageToken+10) {
			t.Errorf("%q: id %d out of range or in the placeholder band", w, id)
		}
	}
	if WordID("hello") == WordID("world") {
		t.Error("distinct words collide")
	}
	got := Tokenize([]int{BOS}, "  hello   world ")
	if len(got) != 3 || got[0] != BOS || got[1] != WordID("hello") || got[2] != WordID("world") {
		t.Errorf("Tokenize: %v", got)
	}
}

func TestPlaceholderLen(t *testing.T) {
	for _, tc := range []struct{ size, want int }{
		{0, 4}, {1023, 4}, {1024, 5}, {12082, 15}, {10 << 20, MaxPlaceholder},
	} {
		if got := PlaceholderLen(tc.size); got != tc.want {
			t.Errorf("PlaceholderLen(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

func dataURI(b []byte) string { return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b) }

func TestRenderChat(t *testing.T) {
	small := []byte("tiny png")
	big := make([]byte, 3000)
	msgs := `[{"role":"system","content":"be brief"},
	  {"role":"user","content":[{"type":"text","text":"compare"},
	    {"type":"image_url","image_url":{"url":"` + dataURI(small) + `"}},
	    {"type":"image_url","image_url":{"url":"` + dataURI(big) + `"},"uuid":"client-hash"},
	    {"type":"input_audio","input_audio":{"data":"` + base64.StdEncoding.EncodeToString([]byte("wav")) + `","format":"wav"}}]}]`
	p, parts, err := renderChat(json.RawMessage(msgs))
	if err != nil {
		t.Fatal(err)
	}
	// BOS, be, brief, compare, 4x image, 6x image, 4x audio
	want := []int{BOS, WordID("be"), WordID("brief"), WordID("compare")}
	if len(p.Tokens) != 4+4+6+4 || !equalInts(p.Tokens[:4], want) {
		t.Fatalf("tokens %v", p.Tokens)
	}
	if len(parts) != 3 || len(p.Items) != 3 {
		t.Fatalf("parts %d items %d", len(parts), len(p.Items))
	}
	it := p.Items
	if it[0].Hash != MediaHash(small) || !hex64.MatchString(it[0].Hash) || it[0].Offset != 4 || it[0].Length != 4 {
		t.Errorf("item 0: %+v", it[0])
	}
	if it[1].Hash != "client-hash" || it[1].Offset != 8 || it[1].Length != 6 || p.Tokens[8] != ImageToken {
		t.Errorf("item 1 (uuid is the hash): %+v", it[1])
	}
	if it[2].Modality != "audio" || it[2].Offset != 14 || p.Tokens[14] != AudioToken {
		t.Errorf("item 2: %+v", it[2])
	}
	// Determinism: same input, same tokens and key.
	p2, _, _ := renderChat(json.RawMessage(msgs))
	if p.Key() != p2.Key() || !hex64.MatchString(p.Key()) {
		t.Error("render is not deterministic")
	}
	for _, bad := range []string{`[]`, `{}`, `[{"role":"user","content":42}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]`,
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}]}]`} {
		if _, _, err := renderChat(json.RawMessage(bad)); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestKwargsBlobIsMsgpack(t *testing.T) {
	b := kwargsBlob("h", 200)
	// fixmap(2), fixstr "pixel_values", bin8(32), fixstr "image_grid_thw", [1, 2, uint16 400]
	if b[0] != 0x82 || string(b[2:14]) != "pixel_values" || b[14] != 0xc4 || b[15] != 32 {
		t.Fatalf("header % x", b[:16])
	}
	tail := b[16+32:]
	if tail[0] != 0xae || string(tail[1:15]) != "image_grid_thw" || tail[15] != 0x93 || tail[16] != 1 || tail[17] != 2 ||
		tail[18] != 0xcd || int(tail[19])<<8|int(tail[20]) != 400 || len(tail) != 21 {
		t.Fatalf("tail % x", tail)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
