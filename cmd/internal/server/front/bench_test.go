package front

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// discardWriter is a ResponseWriter that keeps nothing (no recorder cost).
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// benchFront measures the front's own cost per request (id, body intake,
// parse, routing, summary line) around a runner that answers at once.
func benchFront(b *testing.B, body []byte, level logrus.Level) {
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		w, _ := run.Answer()
		_, _ = w.Write([]byte(`{}`))
		return &engine.Report{Workflow: "bench", Answered: true}
	}}
	l := logrus.New() // configured as serve configures it: JSON lines
	if err := ConfigureLogger(l, io.Discard, "json", level); err != nil {
		b.Fatal(err)
	}
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		runners[rt] = r
	}
	h := New(Options{Runners: runners, Log: l}).Handler()
	req := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	req.Header.Set("X-Request-Id", "bench-1")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r.runs = r.runs[:0]
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		h.ServeHTTP(&discardWriter{h: http.Header{}}, req)
	}
}

var smallChat = []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hello there"}]}`)

func BenchmarkFrontSmallChat(b *testing.B) { benchFront(b, smallChat, logrus.InfoLevel) }

func BenchmarkFrontSmallChatQuiet(b *testing.B) { benchFront(b, smallChat, logrus.WarnLevel) }

func BenchmarkFront200KBPrompt(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 40000) + `"}]}`)
	benchFront(b, body, logrus.InfoLevel)
}
