package front

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

// findLog returns the log lines whose msg contains s.
func findLog(t *testing.T, l *logBuf, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range l.lines(t) {
		if msg, _ := m["msg"].(string); strings.Contains(msg, s) {
			out = append(out, m)
		}
	}
	return out
}

// ACCEPTANCE 200: a panic is a 500 internal_error and the next request is served.
func TestPanicThenServes(t *testing.T) {
	var mu sync.Mutex
	first := true
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		mu.Lock()
		p := first
		first = false
		mu.Unlock()
		if p {
			panic("node exploded")
		}
		return answerJSON(run, `{"ok":1}`)
	}}
	h := start(t, r, nil)
	resp, body := h.do(t, "POST", "/v1/chat/completions", `{}`, nil)
	if resp.StatusCode != 500 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, typ, code := errorReply(t, resp, body); typ != "server_error" || code != "internal_error" {
		t.Fatalf("%s %s", typ, code)
	}
	resp, body = h.do(t, "POST", "/v1/chat/completions", `{}`, nil)
	if resp.StatusCode != 200 || string(body) != `{"ok":1}` {
		t.Fatalf("after panic: %d %s", resp.StatusCode, body)
	}
	if len(findLog(t, h.logs, "panic")) != 1 {
		t.Fatalf("panic not logged once: %s", h.logs.String())
	}
}

// ACCEPTANCE 179: a failure after the reply started ends it abnormally
// (no terminating chunk) and logs a partial-response line.
func TestPartialResponse(t *testing.T) {
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		w, _ := run.Answer()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		http.NewResponseController(w).Flush()
		return &engine.Report{Workflow: "pd", Answered: true,
			Err: &engine.Error{Kind: engine.KindBadGateway, Node: "decode", Item: -1, Msg: "upstream reply broke off"}}
	}}
	var obs []Observation
	var mu sync.Mutex
	inflight, starts := 0, 0
	h := start(t, r, func(o *Options) {
		o.Observe = func(ob *Observation) { mu.Lock(); obs = append(obs, *ob); mu.Unlock() }
		o.InFlight = func() func() {
			mu.Lock()
			inflight++
			starts++
			mu.Unlock()
			return func() { mu.Lock(); inflight--; mu.Unlock() }
		}
	})
	resp, err := testClient.Post(h.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != "data: {\"n\":1}\n\n" {
		t.Fatalf("status %d body %q", resp.StatusCode, got)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read error %v, want an abnormal end", err)
	}
	h.shutdown(t)
	lines := findLog(t, h.logs, "partial response")
	if len(lines) != 1 || lines[0]["level"] != "warning" || lines[0]["code"] != "bad_gateway" {
		t.Fatalf("partial-response line: %v\n%s", lines, h.logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(obs) != 1 || !obs[0].Partial || obs[0].Status != 200 || obs[0].Report == nil || obs[0].Run == nil ||
		obs[0].Route != engine.RouteChat || !obs[0].Stream || obs[0].FirstByte <= 0 {
		t.Fatalf("observations %+v", obs)
	}
	if inflight != 0 || starts != 1 {
		t.Fatalf("in-flight %d after %d starts", inflight, starts)
	}
}

// A run that ends with no answer and no error is an internal error; one
// that failed before writing gets its error written.
func TestUnansweredRuns(t *testing.T) {
	tests := []struct {
		name   string
		rep    *engine.Report
		status int
		code   string
	}{
		{"nothing answered", &engine.Report{}, 500, "internal_error"},
		{"nil report", nil, 500, "internal_error"},
		{"claimed then failed", &engine.Report{Answered: true, Err: engine.Errorf(engine.KindUpstreamTimeout, "no answer")}, 504, "upstream_timeout"},
		{"deadline", &engine.Report{Err: engine.Errorf(engine.KindDeadline, "request deadline exceeded")}, 504, "deadline_exceeded"},
		{"unreachable gateway", &engine.Report{Err: engine.Errorf(engine.KindBadGateway, "connection refused")}, 502, "bad_gateway"}, // ACCEPTANCE 199 shape
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeRunner{serve: func(*engine.Run) *engine.Report { return tt.rep }}
			opts, _ := newOpts(t, r, logrus.InfoLevel)
			rec := httptest.NewRecorder()
			New(opts).Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{}`)))
			if rec.Code != tt.status {
				t.Fatalf("status %d", rec.Code)
			}
			if _, _, code := errorReply(t, rec.Result(), rec.Body.Bytes()); code != tt.code {
				t.Fatalf("code %q", code)
			}
		})
	}
}

// A cancelled run (the client left) writes nothing.
func TestCancelledWritesNothing(t *testing.T) {
	r := &fakeRunner{serve: func(*engine.Run) *engine.Report {
		return &engine.Report{Err: engine.AsError(context.Canceled)}
	}}
	opts, logs := newOpts(t, r, logrus.InfoLevel)
	rec := httptest.NewRecorder()
	New(opts).Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{}`)))
	if rec.Body.Len() != 0 || rec.Header().Get("Content-Type") != "" {
		t.Fatalf("wrote %q", rec.Body.String())
	}
	lines := findLog(t, logs, "cancelled")
	if len(lines) != 1 || lines[0]["status"] != float64(499) || lines[0]["level"] != "info" {
		t.Fatalf("log %s", logs.String())
	}
}

// ACCEPTANCE 182: a client disconnect cancels Run.Ctx promptly, and the
// request is logged at info level without a stack trace.
func TestClientDisconnectCancelsRun(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		close(started)
		select {
		case <-run.Ctx.Done():
			close(cancelled)
			return &engine.Report{Workflow: "pd", Err: engine.AsError(run.Ctx.Err())}
		case <-time.After(5 * time.Second):
			return answerJSON(run, `{}`)
		}
	}}
	h := start(t, r, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.url+"/v1/chat/completions", strings.NewReader(`{}`))
	done := make(chan error, 1)
	go func() {
		resp, err := testClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-started
	cancel()
	select {
	case <-cancelled:
	case <-time.After(time.Second):
		t.Fatal("the run's context was not cancelled within 1s of the disconnect")
	}
	<-done
	h.shutdown(t)
	for _, m := range h.logs.lines(t) {
		if m["level"] == "error" || m["stack"] != nil {
			t.Fatalf("error-level or stack line: %v", m)
		}
	}
	if lines := findLog(t, h.logs, "cancelled by the client"); len(lines) != 1 || lines[0]["level"] != "info" {
		t.Fatalf("cancel line: %s", h.logs.String())
	}
}

// One summary line per request: route, status, duration, workflow, nodes.
func TestSummaryLine(t *testing.T) {
	h := start(t, nil, nil)
	h.do(t, "POST", "/v1/completions", `{}`, map[string]string{"X-Request-Id": "sum-1"})
	h.do(t, "GET", "/healthz", ``, nil) // probes are debug level: no line
	h.shutdown(t)
	var got []map[string]any
	for _, m := range h.logs.lines(t) {
		if m["msg"] == "request" {
			got = append(got, m)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d summary lines: %s", len(got), h.logs.String())
	}
	m := got[0]
	if m["request_id"] != "sum-1" || m["route"] != "completions" || m["status"] != float64(200) ||
		m["workflow"] != "fake" || m["nodes"] != "decode=succeeded:1ms/200" || m["duration_ms"] == nil {
		t.Fatalf("summary %v", m)
	}
}

// ACCEPTANCE 18 through the front: debug logs go through internal/redact.
func TestDebugLogRedacted(t *testing.T) {
	r := &fakeRunner{}
	opts, logs := newOpts(t, r, logrus.DebugLevel)
	s := New(opts)
	body := `{"messages":[{"content":[{"image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUFB", 30) + `"}}]}],"api_key":"short"}`
	req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-very-secret")
	req.Header.Set("x-api-key", "key-secret")
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	out := logs.String()
	if strings.Contains(out, "sk-very-secret") || strings.Contains(out, "key-secret") || strings.Contains(out, "QUFBQUFB") {
		t.Fatalf("secret or bulk logged: %s", out)
	}
	lines := findLog(t, logs, "request received")
	if len(lines) != 1 {
		t.Fatalf("no debug line: %s", out)
	}
	hdr := lines[0]["headers"].(map[string]any)
	if a := hdr["Authorization"].([]any); a[0] != "[REDACTED]" {
		t.Fatalf("Authorization %v", a)
	}
	if b := lines[0]["body"].(string); !strings.Contains(b, `"url":"[base64]"`) {
		t.Fatalf("body %s", b)
	}
}

// ACCEPTANCE 18: no debug line is built at info level.
func TestNoDebugLineAtInfo(t *testing.T) {
	opts, logs := newOpts(t, &fakeRunner{}, logrus.InfoLevel)
	New(opts).Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{}`)))
	if strings.Contains(logs.String(), "request received") {
		t.Fatal("debug line at info level")
	}
}

// NewLogger: formats and the terminal rule.
func TestNewLogger(t *testing.T) {
	var b strings.Builder
	l, err := NewLogger(&b, "", logrus.InfoLevel) // not a terminal: JSON
	if err != nil {
		t.Fatal(err)
	}
	l.Info("x")
	if !strings.HasPrefix(b.String(), "{") {
		t.Fatalf("default format: %q", b.String())
	}
	b.Reset()
	l, _ = NewLogger(&b, "text", logrus.InfoLevel)
	l.Info("x")
	if !strings.Contains(b.String(), "msg=x") {
		t.Fatalf("text format: %q", b.String())
	}
	if _, err := NewLogger(&b, "xml", logrus.InfoLevel); err == nil {
		t.Fatal("xml accepted")
	}
}

// ACCEPTANCE 171: a node that survives the end of the run (the concurrent
// SGLang prefill) keeps its context after the reply is complete and the
// handler has returned; only a client disconnect or the shutdown cut
// cancels it (TestClientDisconnectCancelsRun).
func TestRunContextOutlivesTheHandler(t *testing.T) {
	ctxs := make(chan context.Context, 1)
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		ctxs <- run.Ctx
		return answerJSON(run, `{"ok":true}`)
	}}
	h := start(t, r, nil)
	resp, _ := h.do(t, "POST", "/v1/chat/completions", `{}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ctx := <-ctxs
	// The handler has returned (the reply was read in full); give net/http
	// time to cancel the request context, then check the run's is intact.
	time.Sleep(50 * time.Millisecond)
	if err := ctx.Err(); err != nil {
		t.Fatalf("run context cancelled after a complete reply: %v", err)
	}
	h.shutdown(t)
}
