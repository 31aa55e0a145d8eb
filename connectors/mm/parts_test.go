package mm

import (
	"strings"
	"testing"

	"github.com/celflow/celflow/internal/jsonb"
)

func TestScanParts(t *testing.T) {
	type want struct {
		typ, mod string
		part     int
		url      string
	}
	cases := []struct {
		name string
		body string
		want []want
	}{
		{"no messages", `{"prompt":"x"}`, nil},
		{"text only", `{"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"x"}]}]}`, nil},
		// ACCEPTANCE 68: malformed shapes are skipped silently. A bare
		// string image_url is no longer one of them: vLLM reads it as media
		// (TestScanPartsFollowsVLLM), so it is fetched like an object url.
		{"malformed shapes", `{"messages":[1,"x",null,{"content":{"a":1}},{"content":[5,{"type":"image_url","image_url":7},` +
			`{"type":"image_url","image_url":{"url":5}},{"type":"image_url"},{"type":7},{"type":"input_audio","input_audio":{"format":"wav"}}]}],"messages2":[]}`, nil},
		{"messages not array", `{"messages":{"content":[]}}`, nil},
		{"order and modalities", `{"model":"m","messages":[{"role":"user","content":[` +
			`{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"http://h/1.png"}},` +
			`{"type":"video_url","video_url":{"url":"data:video/mp4;base64,AAAA"}},` +
			`{"type":"image_url","image_url":{"detail":"low","url":"data:image/png;base64,iVBO"}}]},` +
			`{"role":"user","content":[{"type":"audio_url","audio_url":{"url":"https://h/a.wav"}},` +
			`{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}}]}]}`,
			[]want{
				{"image_url", "image", 0, `"http://h/1.png"`},
				{"video_url", "video", 0, `"data:video/mp4;base64,AAAA"`},
				{"image_url", "image", 1, `"data:image/png;base64,iVBO"`},
				{"audio_url", "audio", 0, `"https://h/a.wav"`},
				{"input_audio", "audio", 1, `"UklG"`},
			}},
		{"escapes and whitespace", "{ \"messages\" : [ { \"content\" : [ { \"type\" : \"image\\u005furl\" , \"image_url\" : { \"url\" : \"http:\\/\\/h\\/x \\\" y\" } } ] } ] }",
			[]want{{"image_url", "image", 0, `"http:\/\/h\/x \" y"`}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			obj, err := jsonb.Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []*jsonb.Object{obj, nil} {
				parts, err := ScanParts(body, o)
				if err != nil {
					t.Fatal(err)
				}
				if len(parts) != len(c.want) {
					t.Fatalf("got %d parts, want %d: %+v", len(parts), len(c.want), parts)
				}
				for i, p := range parts {
					w := c.want[i]
					if p.Type != w.typ || p.Modality != w.mod || p.Part != w.part || p.Index != i {
						t.Errorf("part %d = %+v, want %+v", i, p, w)
					}
					if got := string(body[p.ValStart:p.ValEnd]); got != w.url {
						t.Errorf("part %d value %s, want %s", i, got, w.url)
					}
					po := string(body[p.PartStart:p.PartEnd])
					if !strings.HasPrefix(po, "{") || !strings.HasSuffix(po, "}") || !strings.Contains(po, w.url) {
						t.Errorf("part %d object %q", i, po)
					}
					if inner := string(body[p.ObjStart:p.ObjEnd]); !strings.HasPrefix(inner, "{") || !strings.Contains(inner, w.url) {
						t.Errorf("part %d inner %q", i, inner)
					}
				}
			}
		})
	}
}

func TestScanPartsInputAudioFormat(t *testing.T) {
	body := []byte(`{"messages":[{"content":[{"type":"input_audio","input_audio":{"data":"AA==","format":"mp3"}},{"type":"input_audio","input_audio":{"data":"AA==","format":7}}]}]}`)
	parts, err := ScanParts(body, nil)
	if err != nil || len(parts) != 2 {
		t.Fatalf("parts %v err %v", parts, err)
	}
	if parts[0].Format != "mp3" || parts[1].Format != "" || !parts[0].Inline(body) {
		t.Fatalf("formats %q %q", parts[0].Format, parts[1].Format)
	}
}

func TestScanPartsBadJSON(t *testing.T) {
	for _, b := range []string{`{"messages":[{"content":[{"type":"image_url"`, `{"messages":["abc`} {
		if _, err := ScanParts([]byte(b), nil); err == nil {
			t.Errorf("%s: no error", b)
		}
	}
}

func BenchmarkScanParts(b *testing.B) {
	img := strings.Repeat("QUJD", 1<<18) // 1 MiB of base64
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[` +
		`{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}},` +
		`{"type":"image_url","image_url":{"url":"https://img.example/cat.png"}}]}],"max_tokens":64}`)
	obj, err := jsonb.Parse(body)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		parts, err := ScanParts(body, obj)
		if err != nil || len(parts) != 2 {
			b.Fatal(len(parts), err)
		}
	}
}

func TestPartAtAndItems(t *testing.T) {
	body := []byte(`{"messages":[{"content":[{"type":"image_url","image_url":{"url":"u0"},"uuid":"c"},{"type":"audio_url","audio_url":{"url":"u1"}}]}]}`)
	parts, _ := ScanParts(body, nil)
	items := MediaItems(parts)
	if len(items) != 2 || items[1].Modality != "audio" || items[1].Index != 1 || items[1].PartStart != parts[1].PartStart {
		t.Fatalf("items %+v", items)
	}
	p, ok := PartAt(body, items[0].PartStart, items[0].PartEnd)
	if !ok || p.Type != "image_url" || string(body[p.ObjStart:p.ObjEnd]) != `{"url":"u0"}` {
		t.Fatalf("PartAt %+v %v", p, ok)
	}
	if _, ok := PartAt(body, 0, 5); ok {
		t.Error("PartAt on a non-part")
	}
	if MediaItems(nil) != nil {
		t.Error("items from nothing")
	}
}

func TestTopLevel(t *testing.T) {
	body := []byte(` {"model":"b","messages":[{"model":"inner"}],"n":1.0} `)
	if v, ok := TopLevel(body, "model"); !ok || string(v) != `"b"` {
		t.Errorf("model %s", v)
	}
	if v, ok := TopLevel(body, "n"); !ok || string(v) != `1.0` {
		t.Errorf("n %s", v)
	}
	if _, ok := TopLevel(body, "missing"); ok {
		t.Error("missing key found")
	}
	if _, ok := TopLevel([]byte(`[1]`), "model"); ok {
		t.Error("array has members")
	}
}
