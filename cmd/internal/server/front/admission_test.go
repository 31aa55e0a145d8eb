package front

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/celenv"
)

// gate is a runner whose runs block until released, one token each; entered
// receives each run's x-tier header as it starts.
type gate struct {
	entered chan string
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan string, 16), release: make(chan struct{}, 16)} }

func (g *gate) runner() *fakeRunner {
	return &fakeRunner{serve: func(r *engine.Run) *engine.Report {
		g.entered <- r.Req.Header.Get("X-Tier")
		select {
		case <-g.release:
		case <-r.Ctx.Done():
		}
		return answerJSON(r, `{"ok":true}`)
	}}
}

func withAdmission(a Admission) func(*Options) {
	return func(o *Options) { o.Admission = a }
}

type reply struct {
	resp *http.Response
	body []byte
}

// send posts a chat request in the background.
func (h *harness) send(t *testing.T, tier string) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[]}`,
			map[string]string{"X-Tier": tier})
		out <- reply{resp, body}
	}()
	return out
}

// checkRefusal asserts an admission refusal: status, Retry-After, the
// OpenAI shape, and the request id in the header and the message.
func checkRefusal(t *testing.T, r reply, status int, typ, code, retry string) {
	t.Helper()
	if r.resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", r.resp.StatusCode, status, r.body)
	}
	if got := r.resp.Header.Get("Retry-After"); got != retry {
		t.Errorf("Retry-After %q, want %q", got, retry)
	}
	msg, ty, c := errorReply(t, r.resp, r.body)
	id := r.resp.Header.Get("X-Request-Id")
	if ty != typ || c != code || id == "" || !strings.HasSuffix(msg, "(request_id: "+id+")") {
		t.Errorf("type %q code %q id %q message %q; want %s %s", ty, c, id, msg, typ, code)
	}
}

// Issue 12: 429 with Retry-After at the bound, and admitted again after.
func TestAdmission429AtBoundThenAdmits(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), withAdmission(Admission{
		Limits:     admission.Limits{MaxInFlight: 1},
		RetryAfter: 1500 * time.Millisecond,
	}))
	first := h.send(t, "")
	<-g.entered
	if n := h.srv.Admission().InFlight(); n != 1 {
		t.Fatalf("in flight %d", n)
	}
	resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m"}`, nil)
	checkRefusal(t, reply{resp, body}, 429, "rate_limit_error", "overloaded", "2")
	if h.runner.calls() != 1 {
		t.Fatalf("runner called %d times; a refused request must not run", h.runner.calls())
	}
	// Other routes share the server bound; probes are never admitted.
	if resp, _ := h.do(t, http.MethodGet, PathHealthz, "", nil); resp.StatusCode != 200 {
		t.Fatalf("healthz %d at the bound", resp.StatusCode)
	}
	g.release <- struct{}{}
	if r := <-first; r.resp.StatusCode != 200 {
		t.Fatalf("first request %d", r.resp.StatusCode)
	}
	waitFor(t, "the slot to free", func() bool { return h.srv.Admission().InFlight() == 0 })
	g.release <- struct{}{}
	if resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{}`, nil); resp.StatusCode != 200 {
		t.Fatalf("after the bound: %d %s", resp.StatusCode, body)
	}
}

func TestAdmissionQueueTimeout(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), withAdmission(Admission{
		Limits: admission.Limits{Class: []int{0, 1}, MaxQueue: 4, QueueTimeout: 30 * time.Millisecond},
	}))
	first := h.send(t, "")
	<-g.entered
	resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{}`, nil)
	checkRefusal(t, reply{resp, body}, 429, "rate_limit_error", "queue_timeout", "1")
	// The chat bound does not hold back completions.
	other := make(chan int, 1)
	go func() {
		resp, _ := h.do(t, http.MethodPost, "/v1/completions", `{}`, nil)
		other <- resp.StatusCode
	}()
	<-g.entered
	g.release <- struct{}{}
	g.release <- struct{}{}
	if code := <-other; code != 200 {
		t.Fatalf("completions at the chat bound: %d", code)
	}
	<-first
}

// Issue 12: priority order under a full queue, by a CEL expression over a
// header; FIFO within a tier.
func TestAdmissionPriorityOrder(t *testing.T) {
	prio, iss := celenv.CompilePriority(`request.headers["x-tier"] == "gold" ? 10 : (request.headers["x-tier"] == "silver" ? 5 : 0)`)
	if iss != nil {
		t.Fatal(iss)
	}
	g := newGate()
	h := start(t, g.runner(), withAdmission(Admission{
		Limits:   admission.Limits{MaxInFlight: 1, MaxQueue: 5, QueueTimeout: time.Minute},
		Priority: prio,
	}))
	first := h.send(t, "first")
	<-g.entered
	var replies []<-chan reply
	for i, tier := range []string{"bronze", "silver", "gold", "bronze2", "gold2"} {
		// "bronze2"/"gold2" are not gold/silver: tier 0, after bronze.
		if tier == "gold2" {
			tier = "gold"
		}
		replies = append(replies, h.send(t, tier))
		waitFor(t, "the request to queue", func() bool { return h.srv.Admission().Queued() == i+1 })
	}
	// A sixth request finds the queue full; tier 0 cannot displace anyone.
	resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{}`, nil)
	checkRefusal(t, reply{resp, body}, 429, "rate_limit_error", "overloaded", "1")
	var order []string
	for range 6 {
		g.release <- struct{}{}
		if len(order) < 5 {
			order = append(order, <-g.entered)
		}
	}
	want := "gold gold silver bronze bronze2"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("admission order %q, want %q", got, want)
	}
	<-first
	for _, r := range replies {
		if rr := <-r; rr.resp.StatusCode != 200 {
			t.Fatalf("queued request %d", rr.resp.StatusCode)
		}
	}
}

// Issue 12: a request waiting for admission when the listener closes gets
// 503 shutting_down with Retry-After; the admitted one finishes.
func TestAdmissionDrainingRefusesWaiters(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), withAdmission(Admission{
		Limits: admission.Limits{MaxInFlight: 1, MaxQueue: 2, QueueTimeout: time.Minute},
	}))
	first := h.send(t, "")
	<-g.entered
	waiting := h.send(t, "")
	waitFor(t, "the request to queue", func() bool { return h.srv.Admission().Queued() == 1 })
	h.stop()
	r := <-waiting
	checkRefusal(t, r, 503, "server_error", "shutting_down", "1")
	g.release <- struct{}{}
	if r := <-first; r.resp.StatusCode != 200 {
		t.Fatalf("admitted request %d during the drain", r.resp.StatusCode)
	}
	if code := h.shutdown(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// With no bound, admission only counts: every request runs at once.
func TestAdmissionOffCountsOnly(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), nil)
	var rs []<-chan reply
	for range 5 {
		rs = append(rs, h.send(t, ""))
		<-g.entered
	}
	if n, lim := h.srv.Admission().InFlight(), h.srv.Admission().Limit(); n != 5 || lim != 0 {
		t.Fatalf("in flight %d limit %d", n, lim)
	}
	for range rs {
		g.release <- struct{}{}
	}
	for _, r := range rs {
		if rr := <-r; rr.resp.StatusCode != 200 {
			t.Fatalf("status %d", rr.resp.StatusCode)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1",
		1001 * time.Millisecond: "2", 30 * time.Second: "30"} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

// A client that leaves while waiting (no body pending, so net/http notices
// at once) frees its place in the queue; nothing is written.
func TestAdmissionWaiterLeaves(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), withAdmission(Admission{
		Limits: admission.Limits{MaxInFlight: 1, MaxQueue: 1, QueueTimeout: time.Minute},
	}))
	first := h.send(t, "")
	<-g.entered
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/chat/completions", http.NoBody)
	gone := make(chan error, 1)
	go func() {
		resp, err := testClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	waitFor(t, "the request to queue", func() bool { return h.srv.Admission().Queued() == 1 })
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled request got a reply")
	}
	waitFor(t, "the place to free", func() bool { return h.srv.Admission().Queued() == 0 })
	g.release <- struct{}{}
	<-first
	waitFor(t, "the summary line of the 499", func() bool { return strings.Contains(h.logs.String(), `"status":499`) })
}

// A refused request with a body over net/http's own discard (256 KiB) gets
// its 429 reliably (Connection: close, no reset while it is still sending);
// a small one keeps its connection.
func TestAdmissionRefusalBodySizes(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), withAdmission(Admission{Limits: admission.Limits{MaxInFlight: 1}}))
	first := h.send(t, "")
	<-g.entered
	for _, tc := range []struct {
		name  string
		size  int
		close bool
	}{
		{"small body keeps the connection", 100, false},
		{"4 MiB body closes reliably", 4 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"pad":"` + strings.Repeat("x", tc.size) + `"}`
			resp, b := h.do(t, http.MethodPost, "/v1/chat/completions", body, nil)
			checkRefusal(t, reply{resp, b}, 429, "rate_limit_error", "overloaded", "1")
			if resp.Close != tc.close {
				t.Errorf("Connection: close = %v, want %v", resp.Close, tc.close)
			}
		})
	}
	g.release <- struct{}{}
	<-first
}

// Background work (the async dispatcher's requests) takes spare capacity
// only: at the bound it is refused at once, never queued ahead of online
// requests, which still wait.
func TestAdmissionBackgroundNeverQueues(t *testing.T) {
	g := newGate()
	h := start(t, g.runner(), func(o *Options) {
		o.Admission = Admission{Limits: admission.Limits{MaxInFlight: 1, MaxQueue: 4, QueueTimeout: time.Minute}}
		o.Background = func(r *http.Request) bool { return r.Header.Get("X-Test-Background") == "1" }
	})
	first := h.send(t, "")
	<-g.entered
	resp, body := h.do(t, http.MethodPost, "/v1/chat/completions", `{}`, map[string]string{"X-Test-Background": "1"})
	checkRefusal(t, reply{resp, body}, 429, "rate_limit_error", "overloaded", "1")
	if n := h.srv.Admission().Queued(); n != 0 {
		t.Fatalf("background request queued (%d waiting)", n)
	}
	online := h.send(t, "")
	waitFor(t, "the online request to queue", func() bool { return h.srv.Admission().Queued() == 1 })
	g.release <- struct{}{}
	g.release <- struct{}{}
	for _, c := range []<-chan reply{first, online} {
		if r := <-c; r.resp.StatusCode != 200 {
			t.Fatalf("status %d", r.resp.StatusCode)
		}
	}
}
