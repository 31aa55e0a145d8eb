package mm

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/celflow/celflow/internal/jsonb"
)

// Fuzz targets for mm's parsers: token ids (against encoding/json), render
// replies, generate bodies and the media-part scan. None may panic; what
// they accept must be self-consistent (spans inside T, ranges inside the
// body, T.JSON aliasing the input). Seeds: testdata/fuzz/<target>/.

func FuzzParseTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[]`, `[0]`, `[9223372036854775807]`, `[9223372036854775808]`, `[1.0]`, `[1e2]`, `[-1]`,
		`[ 1 , 2 ]`, `["1"]`, `[1,]`, `[[1]]`, `[00012]`, `[1,"a,b,c,d"]`, `[` + "\x00" + `]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Callers pass a member's value range, which starts at the value.
		raw = raw[jsonb.SkipWS(raw, 0):]
		ids, err := ParseTokenIDs(raw)
		if !json.Valid(raw) {
			return // the front or leg.ReadJSON validated every input first
		}
		want, ok := referenceTokenIDs(raw)
		if ok != (err == nil) {
			t.Fatalf("ParseTokenIDs(%q) = %v, %v; encoding/json reference ok=%v", raw, ids, err, ok)
		}
		if ok && !equalIDs(ids, want) {
			t.Fatalf("ids %v, reference %v", ids, want)
		}
	})
}

// referenceTokenIDs: a non-empty array of plain non-negative integer
// literals (no fraction, exponent or sign) that fit int64.
func referenceTokenIDs(raw []byte) ([]int64, bool) {
	var nums []json.RawMessage
	if json.Unmarshal(raw, &nums) != nil || len(nums) == 0 {
		return nil, false
	}
	out := make([]int64, len(nums))
	for i, n := range nums {
		for _, c := range []byte(n) {
			if c < '0' || c > '9' {
				return nil, false
			}
		}
		v, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil || v > math.MaxInt64 {
			return nil, false
		}
		out[i] = int64(v)
	}
	return out, true
}

func equalIDs(a, b []int64) bool {
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

// checkItems holds what every accepted features block promises.
func checkItems(t *testing.T, tok Tokens, items []MediaItem) {
	t.Helper()
	for _, it := range items {
		if it.HasFeatures && (it.Offset < 0 || it.Length < 0 || it.Offset >= len(tok.IDs) || it.Length > len(tok.IDs)-it.Offset) {
			t.Fatalf("item %+v: span outside %d tokens", it, len(tok.IDs))
		}
		if it.HasFeatures && len(it.Kwargs) == 0 {
			t.Fatalf("item %+v: no kwargs (want a string or null)", it)
		}
	}
}

func aliases(part, whole []byte) bool {
	if len(part) == 0 {
		return true
	}
	for i := 0; i+len(part) <= len(whole); i++ {
		if &whole[i] == &part[0] {
			return true
		}
	}
	return false
}

func FuzzParseRenderChat(f *testing.F) {
	f.Add([]byte(`{"token_ids":[1,9,9,2],"features":{"mm_hashes":{"image":["h"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":["KW"]}}}`), uint8(1))
	f.Add([]byte(`{"token_ids":[1],"features":null}`), uint8(0))
	f.Add([]byte(`{"token_ids":[1,2],"token_ids":[3]}`), uint8(0))
	f.Fuzz(func(t *testing.T, resp []byte, n uint8) {
		var media []MediaItem
		for i := range int(n % 4) {
			media = append(media, MediaItem{Index: i, Modality: []string{Image, Video, Audio}[i%3], Part: i / 3})
		}
		tok, items, err := ParseRenderChat(resp, media)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != BadReply {
				t.Fatalf("error %v is not a BadReply", err)
			}
			return
		}
		if len(items) != len(media) || !aliases(tok.JSON, resp) || !tok.Known || !tok.FromRender {
			t.Fatalf("items %d of %d, tokens %+v", len(items), len(media), tok)
		}
		checkItems(t, tok, items)
	})
}

func FuzzParseGenerate(f *testing.F) {
	f.Add([]byte(`{"token_ids":[1,9,9,8],"features":{"mm_hashes":{"image":["a"]},"mm_placeholders":{"image":[{"offset":1,"length":2}]},"kwargs_data":{"image":[null]}}}`))
	f.Add([]byte(`{"token_ids":[1],"sampling_params":{"extra_args":[]}}`))
	f.Add([]byte(`{"token_ids":[1],"sampling_params":{"max_tokens":1,"max_tokens":300}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, perr := jsonb.Parse(body)
		tok, items, err := ParseGenerate(body, nil)
		if perr != nil {
			if err == nil {
				t.Fatal("a body jsonb.Parse refuses was accepted")
			}
			return
		}
		tok2, items2, err2 := ParseGenerate(body, obj)
		if (err == nil) != (err2 == nil) || len(items) != len(items2) || len(tok.IDs) != len(tok2.IDs) {
			t.Fatalf("with and without the index: %v / %v", err, err2)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != BadRequest {
				t.Fatalf("error %v is not a BadRequest", err)
			}
			return
		}
		if !aliases(tok.JSON, body) {
			t.Fatal("T.JSON does not alias the body")
		}
		checkItems(t, tok, items)
	})
}

func FuzzScanParts(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}}]}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"type":"image\u005furl","image_url":{"url":"a\"b"}}]}]}`))
	f.Add([]byte(`{"messages":[1,{"content":{"a":1}},{"content":[{"type":7}]}]}`))
	// Shapes vLLM reads beyond the typed object url (testdata/vllm_shapes.json).
	f.Add([]byte(`{"messages":[{"content":[{"type":"input_image","image_url":"http://h/a.png"},{"image_url":{"url":"http://h/b"}},{"video_url":"v"},{"type":null,"audio_url":"a"}]}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"type":"image_url","image_url":"http://h/a","uuid":"u"},{"input_audio":{"data":"AA==","format":"wav"}}]}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"image_embeds":"AAAA"}]}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"type":"text","uuid":"u","image_url":"http://h/a"}]}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"image_url":"a","video_url":{"url":"b"}},{"type":7,"image_url":"x"},{"image_url":null,"uuid":"u"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, err := jsonb.Parse(body)
		if err != nil {
			_, _ = ScanParts(body, nil) // must not panic on anything
			return
		}
		a, errA := ScanParts(body, obj)
		b, errB := ScanParts(body, nil)
		if errA != nil || errB != nil {
			// A refused media shape, the same with or without the index,
			// and always the client's 400 with the part's path.
			var me *Error
			if errA == nil || errB == nil || errA.Error() != errB.Error() || !errors.As(errA, &me) ||
				me.Kind != BadRequest || !strings.HasPrefix(me.Param, "messages[") {
				t.Fatalf("with index %v, without %v", errA, errB)
			}
			return
		}
		if len(a) != len(b) {
			t.Fatalf("with index %d parts, without %d", len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("part %d: %+v vs %+v", i, a[i], b[i])
			}
			p := a[i]
			if p.ValStart < 0 || p.ValEnd > len(body) || body[p.ValStart] != '"' || body[p.ValEnd-1] != '"' ||
				p.PartStart > p.ObjStart || p.ObjEnd > p.PartEnd {
				t.Fatalf("part %d ranges %+v", i, p)
			}
			if q, ok := PartAt(body, p.PartStart, p.PartEnd); !ok || q.ValStart != p.ValStart || q.Type != p.Type {
				t.Fatalf("PartAt disagrees with ScanParts on part %d", i)
			}
		}
	})
}
