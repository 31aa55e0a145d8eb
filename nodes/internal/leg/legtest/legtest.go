// Package legtest has the test fixtures of the worker node types: a fake
// worker (an httptest server on 127.0.0.1 that records every call and
// answers by script), runs and execs built by hand, and upstream clients.
package legtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Call is one request a Worker received.
type Call struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Worker is a fake worker. Handle answers each call; the default answers
// 200 with {"ok":true}.
type Worker struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []Call
	Handle func(w http.ResponseWriter, r *http.Request, c Call)
}

// NewWorker starts a worker closed at the end of the test.
func NewWorker(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, c Call)) *Worker {
	wk := &Worker{Handle: handle}
	wk.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c := Call{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: b}
		wk.mu.Lock()
		wk.calls = append(wk.calls, c)
		wk.mu.Unlock()
		if wk.Handle == nil {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
			return
		}
		wk.Handle(w, r, c)
	}))
	t.Cleanup(wk.Close)
	return wk
}

// Calls returns a copy of the calls so far.
func (w *Worker) Calls() []Call {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Call(nil), w.calls...)
}

// JSON answers status with a JSON body.
func JSON(status int, body string) func(http.ResponseWriter, *http.Request, Call) {
	return func(w http.ResponseWriter, _ *http.Request, _ Call) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// Gateway is a gateway-mode client in front of base.
func Gateway(t testing.TB, base string) *upstream.Client {
	c, err := upstream.New(upstream.Config{Mode: "gateway", Gateway: base})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Direct is a direct-mode client over pools.
func Direct(t testing.TB, cfg upstream.Config) *upstream.Client {
	cfg.Mode = "direct"
	c, err := upstream.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Run builds a run of a request on route with body; the reply goes to the
// returned recorder. The context ends with the test.
func Run(t testing.TB, route engine.Route, body string, h http.Header) (*engine.Run, *httptest.ResponseRecorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return RunCtx(ctx, route, body, h)
}

// RunCtx is Run with a caller's context.
func RunCtx(ctx context.Context, route engine.Route, body string, h http.Header) (*engine.Run, *httptest.ResponseRecorder) {
	if h == nil {
		h = http.Header{}
	}
	req := &engine.Request{ID: "req-1", Route: route, Header: h, Body: []byte(body), Stream: false}
	rec := httptest.NewRecorder()
	return engine.NewRun(ctx, req, rec), rec
}

// Exec is the exec of node id in run (attempt 1, not a fan-out).
func Exec(run *engine.Run, id string) *engine.Exec {
	return &engine.Exec{Run: run, NodeID: id, Attempt: 1, Index: -1}
}
