package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// worker plays the misbehaving upstreams of issue 10: headers, then the
// body as script says. Every wait also ends when the client goes away.
func worker(t *testing.T, status int, script func(w http.ResponseWriter, r *http.Request, flush func())) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		flush := func() { w.(http.Flusher).Flush() }
		flush()
		script(w, r, flush)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// stall sends nothing more until the client leaves.
func stall(_ http.ResponseWriter, r *http.Request, _ func()) { <-r.Context().Done() }

// trickle sends one byte every d until the client leaves (or n bytes, then
// a valid end when n > 0).
func trickle(d time.Duration, n int) func(http.ResponseWriter, *http.Request, func()) {
	return func(w http.ResponseWriter, r *http.Request, flush func()) {
		t := time.NewTicker(d)
		defer t.Stop()
		for i := 0; n == 0 || i < n; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
			io.WriteString(w, " ")
			flush()
		}
		io.WriteString(w, `{}`)
	}
}

// Issue 10: a reply body that stalls after its headers, or trickles, ends
// with a *TimeoutError naming the bound, not when the client gives up.
func TestBodyDeadlines(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		relay       bool
		idle, total time.Duration
		script      func(http.ResponseWriter, *http.Request, func())
		phase       string // "" success
	}{
		{"stall after headers, idle bound", 200, false, 30 * time.Millisecond, 0, stall, PhaseIdle},
		{"stall after headers, body bound", 200, false, 0, 40 * time.Millisecond, stall, PhaseBody},
		{"trickle beats idle, not the body bound", 200, false, time.Second, 60 * time.Millisecond, trickle(5*time.Millisecond, 0), PhaseBody},
		{"slow but steady within both bounds", 200, false, time.Second, 10 * time.Second, trickle(2*time.Millisecond, 10), ""},
		{"a relay leg's non-2xx body is read, so bounded", 412, true, 30 * time.Millisecond, 0, stall, PhaseIdle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := worker(t, tt.status, tt.script)
			c := gatewayClient(t, base)
			resp, err := c.Send(context.Background(), base, &Leg{Role: RolePrefill, Path: "/v1/chat/completions",
				Body: strings.NewReader("{}"), Length: 2, TTFB: 10 * time.Second, Relay: tt.relay, Idle: tt.idle, BodyTimeout: tt.total})
			if err != nil {
				t.Fatal(err)
			}
			_, err = ReadBody(resp, 1<<20)
			var te *TimeoutError
			switch {
			case tt.phase == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tt.phase != "" && (!errors.As(err, &te) || te.Phase != tt.phase):
				t.Fatalf("err = %v, want a %s TimeoutError", err, tt.phase)
			case te != nil && te.After != max(tt.idle*boolInt(tt.phase == PhaseIdle), tt.total*boolInt(tt.phase == PhaseBody)):
				t.Errorf("After = %v", te.After)
			}
		})
	}
}

func boolInt(b bool) time.Duration {
	if b {
		return 1
	}
	return 0
}

// A relayed 2xx keeps only stream_idle_timeout (Relay's own): the bounds
// of a parsed leg are not armed on it. The caller leaving wins over a
// bound: a cancelled read reports the cancellation.
func TestBodyDeadlinesScope(t *testing.T) {
	base := worker(t, 200, stall)
	c := gatewayClient(t, base)
	leg := func() *Leg {
		return &Leg{Role: RoleDecode, Path: "/v1/chat/completions", Body: strings.NewReader("{}"), Length: 2,
			Relay: true, Idle: time.Millisecond, BodyTimeout: time.Millisecond}
	}
	resp, err := c.Send(context.Background(), base, leg())
	if err != nil {
		t.Fatal(err)
	}
	if _, watched := resp.Body.(*watchedBody); watched {
		t.Error("a relayed 2xx body carries parsed-leg bounds")
	}
	resp.Body.Close()

	ctx, cancel := context.WithCancel(context.Background())
	l := leg()
	l.Relay, l.Idle, l.BodyTimeout = false, time.Hour, 0
	resp, err = c.Send(ctx, base, l)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := ReadBody(resp, 1<<20); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
