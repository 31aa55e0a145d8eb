package front

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/engine"
)

// waitFor polls cond every 10 ms for at most 2 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// streamRunner answers SSE: one event, then waits for release or for the
// run's context, then a last event. cancelled is closed if the context ended
// first.
type streamRunner struct {
	started, release, cancelled chan struct{}
}

func newStreamRunner() *streamRunner {
	return &streamRunner{started: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
}

func (s *streamRunner) serve(run *engine.Run) *engine.Report {
	if !strings.Contains(string(run.Req.Body), "stream") {
		return answerJSON(run, `{}`)
	}
	w, _ := run.Answer()
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: 1\n\n")
	http.NewResponseController(w).Flush()
	close(s.started)
	select {
	case <-s.release:
	case <-run.Ctx.Done():
		close(s.cancelled)
		return &engine.Report{Answered: true, Err: engine.AsError(run.Ctx.Err())}
	case <-time.After(10 * time.Second):
	}
	_, _ = io.WriteString(w, "data: 2\n\n")
	return &engine.Report{Answered: true}
}

// stream starts a streaming request and returns a channel with its full
// body and read error once it ends.
type streamResult struct {
	body string
	err  error
}

func startStream(t *testing.T, h *harness, sr *streamRunner) <-chan streamResult {
	t.Helper()
	out := make(chan streamResult, 1)
	go func() {
		resp, err := testClient.Post(h.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		if err != nil {
			out <- streamResult{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- streamResult{string(b), err}
	}()
	select {
	case <-sr.started:
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not start")
	}
	return out
}

// ACCEPTANCE 184: readyz 503 at once, healthz 200, requests still served
// during drain_delay; exit 0.
func TestShutdownDrainDelay(t *testing.T) {
	h := start(t, nil, func(o *Options) { o.DrainDelay = 500 * time.Millisecond })
	if resp, _ := h.do(t, "GET", "/readyz", "", nil); resp.StatusCode != 200 {
		t.Fatalf("readyz before shutdown: %d", resp.StatusCode)
	}
	h.stop()
	waitFor(t, "readyz 503", func() bool {
		resp, _ := h.do(t, "GET", "/readyz", "", nil)
		return resp.StatusCode == 503
	})
	if resp, _ := h.do(t, "GET", "/healthz", "", nil); resp.StatusCode != 200 {
		t.Fatalf("healthz while draining: %d", resp.StatusCode)
	}
	if resp, b := h.do(t, "POST", "/v1/chat/completions", `{}`, nil); resp.StatusCode != 200 {
		t.Fatalf("request during drain_delay: %d %s", resp.StatusCode, b)
	}
	select {
	case code := <-h.exit:
		h.exit <- code
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit")
	}
}

// ACCEPTANCE 185 and 186: after drain_delay new connections are refused, a
// request on a kept-alive connection gets 503 shutting_down with
// Connection: close, and the in-flight stream completes: exit 0.
func TestShutdownRefusesAndDrains(t *testing.T) {
	sr := newStreamRunner()
	h := start(t, &fakeRunner{serve: sr.serve}, func(o *Options) { o.ShutdownTimeout = 5 * time.Second })

	kept, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	_ = kept.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(kept)
	_, _ = io.WriteString(kept, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("keep-alive warm-up: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	stream := startStream(t, h, sr)
	h.stop()
	waitFor(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", h.addr)
		if err == nil {
			c.Close()
			return false
		}
		return true
	})

	_, _ = io.WriteString(kept, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: late-1\r\nContent-Length: 2\r\n\r\n{}")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !resp.Close || resp.Header.Get("X-Request-Id") != "late-1" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("late request: %d close=%v %v", resp.StatusCode, resp.Close, resp.Header)
	}
	if _, typ, code := errorReply(t, resp, body); code != "shutting_down" || typ != "server_error" {
		t.Fatalf("%s %s", typ, code)
	}

	close(sr.release)
	res := <-stream
	if res.err != nil || res.body != "data: 1\n\ndata: 2\n\n" {
		t.Fatalf("stream: %q %v", res.body, res.err)
	}
	select {
	case code := <-h.exit:
		h.exit <- code
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit")
	}
}

// ACCEPTANCE 187: a stream still running when shutdown_timeout expires is
// cut: its context is cancelled, the client sees an abnormal end, the
// number cut is logged, and the exit code is 1.
func TestShutdownCutsAfterBudget(t *testing.T) {
	sr := newStreamRunner()
	h := start(t, &fakeRunner{serve: sr.serve}, func(o *Options) { o.ShutdownTimeout = 200 * time.Millisecond })
	stream := startStream(t, h, sr)
	code := h.shutdown(t)
	select {
	case <-sr.cancelled:
	default:
		t.Fatal("the in-flight run's context was not cancelled")
	}
	res := <-stream
	if res.body != "data: 1\n\n" || !errors.Is(res.err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut stream: %q %v", res.body, res.err)
	}
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := findLog(t, h.logs, "budget exhausted")
	if len(lines) != 1 || lines[0]["cut"] != float64(1) {
		t.Fatalf("cut line: %s", h.logs.String())
	}
	// Issue 17 item 6: the cut is the server's doing, not the client's.
	lines = findLog(t, h.logs, "partial response")
	if len(lines) != 1 || lines[0]["code"] != "shutdown_cut" || lines[0]["level"] != "warning" {
		t.Fatalf("the cut stream's summary line: %v", lines)
	}
}

// Issue 17 item 6: a request cut by the shutdown budget before anything
// was written gets 503 shutdown_cut (it used to be logged as the client's
// client_closed_request, and its client got an empty 200).
func TestShutdownCutBeforeReply(t *testing.T) {
	entered := make(chan struct{})
	r := &fakeRunner{serve: func(run *engine.Run) *engine.Report {
		close(entered)
		<-run.Ctx.Done()
		e := engine.AsError(run.Ctx.Err())
		e.Node = "decode"
		return &engine.Report{Workflow: "fake", Err: e, Outcomes: []engine.Outcome{
			{Node: "decode", Type: "decode", Status: engine.StatusCancelled, Err: e}}}
	}}
	obs := &observations{}
	h := start(t, r, func(o *Options) { o.ShutdownTimeout = 200 * time.Millisecond; o.Observe = obs.observe })
	got := h.send(t, "")
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never started")
	}
	if code := h.shutdown(t); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	rep := <-got
	if rep.resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("cut request: %d %s, want 503", rep.resp.StatusCode, rep.body)
	}
	if _, typ, code := errorReply(t, rep.resp, rep.body); typ != "server_error" || code != "shutdown_cut" {
		t.Fatalf("cut request: %s %s", typ, code)
	}
	lines := findLog(t, h.logs, "request")
	var found bool
	for _, l := range lines {
		if l["code"] == "shutdown_cut" && l["status"] == float64(503) && l["level"] == "warning" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no shutdown_cut summary line: %s", h.logs.String())
	}
	// The node the cut cancelled is counted as cut (node outcome reason).
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.obs) != 1 || obs.obs[0].Status != 503 || obs.obs[0].Report == nil ||
		obs.obs[0].Report.Outcomes[0].Err.Code() != "shutdown_cut" || obs.obs[0].Report.Outcomes[0].Err.Node != "decode" {
		t.Fatalf("observation: %+v", obs.obs)
	}
}
