package bench

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/engine"
	_ "github.com/celflow/celflow/nodes/all"
)

// inProcess builds celflow's serving stack the way cmd/celflow/serve.go
// does (config → upstream → workflow → front, metrics and the per-request
// log line included, logs discarded) for f, with every pool pointing at
// worker. It returns the front's root handler, for profiling the request
// path with `go test -bench Serve -cpuprofile`.
func inProcess(tb testing.TB, f flow, worker string) http.Handler {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "serve.yaml")
	if err := os.WriteFile(path, []byte(serveConfig(f, "127.0.0.1:0", worker)), 0o644); err != nil {
		tb.Fatal(err)
	}
	cfg, ds := config.LoadFile(path, func(string) string { return "" })
	if cfg == nil {
		tb.Fatalf("config: %s", ds)
	}
	up, ds := cfg.NewUpstream()
	if up == nil {
		tb.Fatalf("upstream: %s", ds)
	}
	m := metrics.New()
	up.OnLeg = m.UpstreamHook()
	wf, ds := engine.LoadDoc(cfg.Workflow.Inline, engine.LoadOptions{Upstream: up, WriteTimeout: cfg.Server.WriteTimeout})
	if wf == nil {
		tb.Fatalf("workflow: %s", ds)
	}
	log := logrus.New()
	if err := front.ConfigureLogger(log, io.Discard, "json", logrus.InfoLevel); err != nil {
		tb.Fatal(err)
	}
	srv := front.New(front.Options{
		Runners:  map[engine.Route]engine.Runner{engine.RouteChat: wf},
		Metrics:  m.Handler(),
		InFlight: m.InFlight,
		Log:      log,
		Observe: func(o *front.Observation) {
			if o.Report != nil {
				m.ObserveReport("/v1/chat/completions", o.Status, o.Report, o.Run)
			}
		},
	})
	return srv.Handler()
}

// The served stack answers each workflow with the worker's reply, on both
// bodies: what the load benchmark measures is a working path.
func TestInProcessPaths(t *testing.T) {
	w := httptest.NewServer(&Worker{Chunks: 3})
	defer w.Close()
	for _, f := range flows {
		h := inProcess(t, f, w.URL)
		for _, b := range bodies() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(b.data)))
			if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), decodeReply) {
				t.Errorf("%s/%s: %d %.200s", f.key, b.key, rec.Code, rec.Body.String())
			}
		}
		if f.key != "epd" {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(imageBody())))
			if rec.Code != http.StatusOK {
				t.Errorf("%s/image: %d %.300s", f.key, rec.Code, rec.Body.String())
			}
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(chatBody("x", true)))
		req.Header.Set("Accept", "text/event-stream")
		h.ServeHTTP(rec, req)
		if n := bytes.Count(rec.Body.Bytes(), []byte("\n\n")); rec.Code != http.StatusOK || n != 4 {
			t.Errorf("%s/stream: %d, %d events: %.300s", f.key, rec.Code, n, rec.Body.String())
		}
	}
}

// BenchmarkServe is one client request through celflow's front and engine,
// called in process (no client socket), with its legs over loopback to an
// in-process worker. Profile it:
//
//	go test ./cmd/internal/bench -run '^$' -bench 'Serve/pd/200KB' -cpuprofile cpu.out
func BenchmarkServe(b *testing.B) {
	w := httptest.NewServer(&Worker{})
	defer w.Close()
	img := body{"image1MB", "1 MiB image", imageBody()}
	for _, f := range flows {
		h := inProcess(b, f, w.URL)
		cases := bodies()
		if f.key != "epd" { // E/P/D with media needs a worker that renders features
			cases = append(cases, img)
		}
		for _, bd := range cases {
			b.Run(f.key+"/"+bd.key, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(bd.data)))
				for b.Loop() {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(bd.data)))
					if rec.Code != http.StatusOK {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
		}
	}
}
