package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func BenchmarkPick(b *testing.B) {
	for _, picker := range []string{pickRoundRobin, pickLeastInFlight} {
		b.Run(picker, func(b *testing.B) {
			c, _ := newDirect(b, Config{Picker: picker}, 8, RolePrefill)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tg, err := c.Pick(RolePrefill)
					if err != nil {
						b.Fatal(err)
					}
					tg.Done(false)
				}
			})
		})
	}
}

// sseBody yields one event per Read, as a stream arriving chunk by chunk.
type sseBody struct {
	ev   []byte
	left int
}

func (s *sseBody) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	s.left--
	return copy(p, s.ev), nil
}
func (s *sseBody) Close() error { return nil }

// flushWriter is a ResponseWriter that discards and counts flushes.
type flushWriter struct {
	h       http.Header
	flushes int
}

func (w *flushWriter) Header() http.Header         { return w.h }
func (w *flushWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *flushWriter) WriteHeader(int)             {}
func (w *flushWriter) Flush()                      { w.flushes++ }

func BenchmarkRelaySSE(b *testing.B) {
	const events = 64
	ev := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token"}}]}` + "\n\n")
	upHeader := http.Header{"Content-Type": {"text/event-stream"}, "Date": {"x"}, "Server": {"uvicorn"}}
	for _, idle := range []time.Duration{0, time.Minute} {
		name := "no-idle"
		if idle > 0 {
			name = "idle-timer"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			w := &flushWriter{h: http.Header{}}
			for b.Loop() {
				clear(w.h)
				resp := &http.Response{StatusCode: 200, Header: upHeader, Body: &sseBody{ev: ev, left: events}, ContentLength: -1}
				if _, err := RelayWith(w, resp, RelayOptions{ReqID: "r", Idle: idle}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

func BenchmarkForwardHeaders(b *testing.B) {
	src := http.Header{
		"Accept": {"*/*"}, "Authorization": {"Bearer x"}, "User-Agent": {"openai-python"},
		"Content-Type": {"application/json"}, "Content-Length": {"123"}, "Accept-Encoding": {"gzip"},
		"X-Request-Id": {"id"}, "Traceparent": {"00-a-b-01"}, "Connection": {"keep-alive"},
	}
	b.ReportAllocs()
	for b.Loop() {
		dst := make(http.Header, len(src)+5)
		ForwardHeaders(dst, src, false)
	}
}

// A 200 KB prompt is about 50k tokens.
func BenchmarkPredictHit(b *testing.B) {
	c, _ := newDirect(b, Config{}, 4, RoleDecode)
	prompt := seqTokens(1, 50000)
	tg := mustPick(b, c, RoleDecode)
	c.RecordPrefix(tg, prompt)
	tg.Done(false)
	b.Run("hit-50k", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t, hit := c.PredictHit(prompt)
			if !hit {
				b.Fatal("miss")
			}
			t.Done(false)
		}
	})
	b.Run("record-50k", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.RecordPrefix(tg, prompt)
		}
	})
}

// One leg over loopback: the client's own overhead on top of a hop.
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	c := gatewayClient(b, srv.URL)
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`
	hdr := http.Header{"Authorization": {"Bearer x"}, "Content-Type": {"application/json"}}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Send(context.Background(), srv.URL, &Leg{
			Role: RolePrefill, Path: "/v1/chat/completions", Body: strings.NewReader(body),
			Length: int64(len(body)), Header: hdr, ReqID: "r", TTFB: time.Minute,
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ReadBody(resp, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
