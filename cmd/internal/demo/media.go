package demo

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// Sample image size: big enough for the simulator's render to give it a
// placeholder run of several tokens, small enough to stay a few KiB.
const (
	SampleWidth  = 64
	SampleHeight = 48
)

// SamplePNG is a w×h gradient PNG, built in code so that the demo binary
// needs no file. The same (w, h) always gives the same bytes, hence the
// same mm_hash at the simulator.
func SamplePNG(w, h int) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			// A deterministic texture on the blue channel keeps the file a
			// few KiB (a pure gradient compresses to almost nothing), so the
			// image weighs a few placeholder tokens at the simulator.
			tex := uint8((x*131 + y*71) ^ (x * y * 37))
			img.Set(x, y, color.NRGBA{R: uint8(x * 255 / max(w-1, 1)), G: uint8(y * 255 / max(h-1, 1)), B: tex, A: 255})
		}
	}
	var b bytes.Buffer
	// Encoding an in-memory NRGBA image into a buffer cannot fail.
	_ = (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img)
	return b.Bytes()
}

// MediaServer serves sample images over HTTP, as a stand-in for a
// third-party image host:
//
//	GET /sample.png        the SampleWidth×SampleHeight gradient
//	GET /gradient/WxH.png  a W×H gradient (1..1024 each), distinct per size
type MediaServer struct {
	sample []byte
	hits   atomic.Int64
}

var _ http.Handler = (*MediaServer)(nil)

// NewMediaServer builds the media handler.
func NewMediaServer() *MediaServer {
	return &MediaServer{sample: SamplePNG(SampleWidth, SampleHeight)}
}

// Hits is the number of images served so far.
func (m *MediaServer) Hits() int64 { return m.hits.Load() }

func (m *MediaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var img []byte
	switch {
	case r.URL.Path == "/sample.png":
		img = m.sample
	case strings.HasPrefix(r.URL.Path, "/gradient/") && strings.HasSuffix(r.URL.Path, ".png"):
		wh := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/gradient/"), ".png")
		iw, ih, ok := parseSize(wh)
		if !ok {
			http.Error(w, fmt.Sprintf("want /gradient/WxH.png with 1 <= W, H <= 1024, got %q", r.URL.Path), http.StatusNotFound)
			return
		}
		img = SamplePNG(iw, ih)
	default:
		http.NotFound(w, r)
		return
	}
	m.hits.Add(1)
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(img)))
	_, _ = w.Write(img)
}

func parseSize(s string) (w, h int, ok bool) {
	a, b, found := strings.Cut(s, "x")
	if !found {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(a)
	h, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || w < 1 || h < 1 || w > 1024 || h > 1024 {
		return 0, 0, false
	}
	return w, h, true
}
