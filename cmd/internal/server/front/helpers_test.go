package front

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// fakeRunner is an engine.Runner driven by a function; it records the runs.
type fakeRunner struct {
	mu    sync.Mutex
	runs  []*engine.Run
	serve func(r *engine.Run) *engine.Report
}

func (f *fakeRunner) Serve(r *engine.Run) *engine.Report {
	f.mu.Lock()
	f.runs = append(f.runs, r)
	f.mu.Unlock()
	if f.serve != nil {
		return f.serve(r)
	}
	return answerJSON(r, `{"ok":true}`)
}

func (f *fakeRunner) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

func (f *fakeRunner) last() *engine.Run {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.runs) == 0 {
		return nil
	}
	return f.runs[len(f.runs)-1]
}

var _ engine.Runner = (*fakeRunner)(nil)

// answerJSON is what a responding node does: claim the writer, reply.
func answerJSON(r *engine.Run, body string) *engine.Report {
	w, ok := r.Answer()
	if !ok {
		return &engine.Report{Workflow: "fake", Err: engine.Errorf(engine.KindInternal, "answered twice")}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", r.Req.ID)
	_, _ = io.WriteString(w, body)
	return &engine.Report{Workflow: "fake", Answered: true, Outcomes: []engine.Outcome{
		{Node: "decode", Type: "decode", Status: engine.StatusSucceeded, HTTPStatus: 200, Duration: time.Millisecond},
	}}
}

// logBuf is a goroutine-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines decodes the JSON log lines.
func (l *logBuf) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", ln)
		}
		out = append(out, m)
	}
	return out
}

// harness is a running Server on 127.0.0.1.
type harness struct {
	srv    *Server
	url    string
	addr   string
	logs   *logBuf
	stop   context.CancelFunc
	exit   chan int
	runner *fakeRunner
}

func newOpts(t *testing.T, runner *fakeRunner, level logrus.Level) (Options, *logBuf) {
	t.Helper()
	logs := &logBuf{}
	l, err := NewLogger(logs, "json", level)
	if err != nil {
		t.Fatal(err)
	}
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		runners[rt] = runner
	}
	return Options{Runners: runners, Log: l, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second}, logs
}

// start runs a server; tweak adjusts the options before New.
func start(t *testing.T, runner *fakeRunner, tweak func(*Options)) *harness {
	t.Helper()
	if runner == nil {
		runner = &fakeRunner{}
	}
	opts, logs := newOpts(t, runner, logrus.InfoLevel)
	if tweak != nil {
		tweak(&opts)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener = ln
	s := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{srv: s, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), logs: logs,
		stop: cancel, exit: make(chan int, 1), runner: runner}
	go func() { h.exit <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.exit:
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	return h
}

// shutdown stops the server as SIGTERM would and returns the exit code.
func (h *harness) shutdown(t *testing.T) int {
	t.Helper()
	h.stop()
	select {
	case c := <-h.exit:
		h.exit <- c // for Cleanup
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop")
	}
	return -1
}

// do sends one request with a fresh connection-pooling client.
func (h *harness) do(t *testing.T, method, path, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

var testClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

// errorReply checks the exact PROTOCOL 12 shape and returns type and code.
// ACCEPTANCE 192.
func errorReply(t *testing.T, resp *http.Response, body []byte) (msg, typ, code string) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || len(top) != 1 || top["error"] == nil {
		t.Fatalf("error body %s is not {\"error\":{...}}", body)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(top["error"], &inner); err != nil || len(inner) != 4 {
		t.Fatalf("error object %s does not have exactly 4 members", top["error"])
	}
	if string(inner["param"]) != "null" {
		t.Errorf("param = %s, want null", inner["param"])
	}
	for _, k := range []string{"message", "type", "code"} {
		var s string
		if err := json.Unmarshal(inner[k], &s); err != nil {
			t.Fatalf("%s is not a string: %s", k, inner[k])
		}
		switch k {
		case "message":
			msg = s
		case "type":
			typ = s
		case "code":
			code = s
		}
	}
	return msg, typ, code
}
