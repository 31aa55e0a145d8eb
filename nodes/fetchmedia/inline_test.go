package fetchmedia

import (
	"context"
	"encoding/base64"
	"runtime"
	"strings"
	"testing"

	"github.com/celflow/celflow/engine"
)

// ACCEPTANCE 61, 63: inline data URIs are validated and kept unchanged.
func TestInlineDataURI(t *testing.T) {
	payload := base64.StdEncoding.EncodeToString(pngBytes(t, 3))
	n := mustNode(t, `{}`, nil)
	cases := []struct{ uri, typ string }{
		{"data:image/png;base64," + payload, "image/png"},
		{"data:image/jpeg;base64," + payload, "image/jpeg"},
		{"data: Image/PNG ;base64," + payload, "image/png"},
		{"DATA:image/png;name=x.png;base64," + payload, "image/png"},
		{"data:image/png;base64,", "image/png"},
	}
	for _, c := range cases {
		body := chat(imagePart(c.uri))
		res, st := run(t, n, body)
		if res.Err != nil {
			t.Fatalf("%.40s: %v", c.uri, res.Err)
		}
		if string(st.Body) != body {
			t.Errorf("%.40s: body changed", c.uri)
		}
		it := st.Media[0]
		raw, _ := base64.StdEncoding.DecodeString(c.uri[strings.IndexByte(c.uri, ',')+1:])
		if it.Type != c.typ || it.Size != len(raw) || it.Remote {
			t.Errorf("%.40s: item %+v", c.uri, it)
		}
	}
}

// ACCEPTANCE 64, 65
func TestInlineDataURIRejected(t *testing.T) {
	n := mustNode(t, `{"image":{"max_download_size":1}}`, nil)
	big := base64.StdEncoding.EncodeToString(make([]byte, 1<<20+1))
	cases := map[string]string{
		"data:;base64,AAAA":                 "empty media type",
		"data:image/png;base64AAAA":         "no comma",
		"data:image/png,AAAA":               "not base64",
		"data:image/png;utf8,AAAA":          "not base64",
		"data:image/pngbase64,AAAA":         "not base64",
		"data:text/html;base64,PGgxPg==":    "text/html",
		"data:image/png;base64,AAA":         "base64",
		"data:image/png;base64,AA=A":        "base64",
		"data:image/png;base64,AA==AAAA":    "base64",
		"data:image/png;base64,AAAA\\nAAAA": "base64",
		"data:image/png;base64,AA!A":        "base64",
		"data:image/png;base64,AAB=":        "base64", // non-zero pad bits
		"data:image/png;base64," + big:      "over the 1 MiB limit",
	}
	for uri, msg := range cases {
		res, st := run(t, n, chat(imagePart(uri)))
		e := wantErr(t, res, engine.KindInvalidMedia, msg)
		if !strings.Contains(e.Msg, "data URI") || e.HTTPStatus() != 400 || st.Media != nil {
			t.Errorf("%.40s: %q", uri, e.Msg)
		}
	}
}

// ACCEPTANCE 71
func TestInputAudio(t *testing.T) {
	n := mustNode(t, `{}`, nil)
	wav := base64.StdEncoding.EncodeToString([]byte("RIFF....WAVEfmt "))
	part := func(data, format string) string {
		return `{"type":"input_audio","input_audio":{"data":"` + data + `","format":"` + format + `"}}`
	}
	res, st := run(t, n, chat(part(wav, "wav"), part(wav, "MP3")))
	if res.Err != nil || len(st.Media) != 2 {
		t.Fatalf("err %v", res.Err)
	}
	if st.Media[0].Modality != "audio" || st.Media[0].Type != "audio/wav" || st.Media[1].Type != "audio/mpeg" || st.Media[0].Remote {
		t.Errorf("items %+v", st.Media)
	}
	res, _ = run(t, n, chat(part(wav, "exe")))
	wantErr(t, res, engine.KindInvalidMedia, `format "exe"`)
	res, _ = run(t, n, chat(part("not base64!", "wav")))
	wantErr(t, res, engine.KindInvalidMedia, "base64")
	res, _ = run(t, mustNode(t, `{"input_audio_formats":["flac"]}`, nil), chat(part(wav, "wav")))
	wantErr(t, res, engine.KindInvalidMedia, "not allowed")
	res, _ = run(t, mustNode(t, `{"audio":{"max_download_size":1}}`, nil), chat(part(base64.StdEncoding.EncodeToString(make([]byte, 1<<20+3)), "wav")))
	wantErr(t, res, engine.KindInvalidMedia, "limit")
}

func TestCheckBase64(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4095, 4096, 4097, 10000} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i * 7)
		}
		enc := base64.StdEncoding.EncodeToString(data)
		got, err := checkBase64([]byte(enc), 1<<20)
		if err != nil || got != int64(n) {
			t.Errorf("%d bytes: got %d, %v", n, got, err)
		}
		if n > 0 {
			if _, err := checkBase64([]byte(enc), int64(n-1)); err == nil {
				t.Errorf("%d bytes over a %d limit accepted", n, n-1)
			}
		}
	}
	// Padding at a chunk boundary followed by more data is not standard base64.
	bad := strings.Repeat("A", chunk-4) + "AA==" + "AAAA"
	if _, err := checkBase64([]byte(bad), 1<<20); err == nil {
		t.Error("padding inside the payload accepted")
	}
}

func inlineBody(tb testing.TB) string {
	img := make([]byte, 3<<18) // 768 KiB decoded, ~1 MiB of base64
	for i := range img {
		img[i] = byte(i)
	}
	copy(img, pngBytes(tb, 2))
	return chat(imagePart("data:image/png;base64," + base64.StdEncoding.EncodeToString(img)))
}

// PERFORMANCE (issue 7): checking a 1 MB inline image allocates far less
// than the body; the bound asserted is 3× the body (bytes, not time).
func TestInlineAllocBound(t *testing.T) {
	n := mustNode(t, `{}`, nil)
	body := []byte(inlineBody(t))
	runBytes(context.Background(), n, body) // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 5
	for range runs {
		if res, _ := runBytes(context.Background(), n, body); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	if per > 3*uint64(len(body)) {
		t.Fatalf("%d bytes allocated per request for a %d-byte body", per, len(body))
	}
}

func BenchmarkFetchMediaInline1MB(b *testing.B) {
	n := mustNode(b, `{}`, nil)
	body := []byte(inlineBody(b))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if res, _ := runBytes(context.Background(), n, body); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}
