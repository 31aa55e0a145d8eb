package upstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Issue 10: reading an over-cap reply must cost about the cap, not a
// multiple of it (bytes.Buffer doubling took ~3× the cap). The upstream
// serves a body over the cap as Content-Length, chunked, and gzip that the
// transport decodes; the test counts the bytes allocated per reply over a
// bounded number of replies (the server's writes are of a prebuilt slice,
// so nearly every byte counted is the reader's).
func TestReadBodyOverCapMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	const (
		limit   = 4 << 20
		replies = 6
		slack   = 512 << 10 // transport, gzip reader, headers: per reply
	)
	big := bytes.Repeat([]byte(`{"x":"`+strings.Repeat("a", 1000)+`"},`), (limit+limit/2)/1007) // ~1.5× the cap
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(big)
	zw.Close()
	cases := []struct {
		name string
		max  uint64 // bytes allocated per reply
		h    http.HandlerFunc
	}{
		{"content-length", slack, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
		}},
		{"chunked", limit + slack, func(w http.ResponseWriter, r *http.Request) {
			for b := big; len(b) > 0; { // flushed pieces: no Content-Length
				n := min(len(b), 256<<10)
				w.Write(b[:n])
				w.(http.Flusher).Flush()
				b = b[n:]
			}
		}},
		{"gzip", limit + slack, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(gz.Len()))
			w.Write(gz.Bytes())
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			c := gatewayClient(t, srv.URL)
			read := func() {
				resp, err := c.Send(context.Background(), srv.URL, &Leg{Role: RolePrefill, Path: "/v1/chat/completions",
					Body: strings.NewReader("{}"), Length: 2, TTFB: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ReadBody(resp, limit); !errors.Is(err, ErrBodyTooLarge) {
					t.Fatalf("err = %v, want ErrBodyTooLarge", err)
				}
			}
			read() // warm the connection pool and the transport
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range replies {
				read()
			}
			runtime.ReadMemStats(&after)
			per := (after.TotalAlloc - before.TotalAlloc) / replies
			t.Logf("%s: %d bytes allocated per over-cap reply (cap %d, %.2f× the cap)", tc.name, per, limit, float64(per)/limit)
			if per > tc.max {
				t.Errorf("%d bytes per reply, want ≤ %d", per, tc.max)
			}
		})
	}
}

// BenchmarkReadBody: bytes per read (-benchmem) of a reply within the cap,
// declared (one exact allocation) or of unknown length (chunks, joined once).
func BenchmarkReadBody(b *testing.B) {
	for _, size := range []int{2 << 10, 1 << 20} {
		body := bytes.Repeat([]byte("x"), size)
		str := string(body)
		for _, declared := range []bool{true, false} {
			name := strconv.Itoa(size>>10) + "KiB-unknown-length"
			if declared {
				name = strconv.Itoa(size>>10) + "KiB-content-length"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(size))
				for b.Loop() {
					var resp *http.Response
					if declared {
						resp = fakeResp(body, nil)
					} else {
						resp = unknownLen(str)
					}
					if _, err := ReadBody(resp, 16<<20); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
