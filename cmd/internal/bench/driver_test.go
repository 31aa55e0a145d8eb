package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The closed loop keeps Conc requests in flight, records only the measured
// window, counts non-2xx as errors, and calls OnWindow open then close.
func TestLoadRun(t *testing.T) {
	var hits, inflight, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) != `{"x":1}` || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-T") != "v" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if hits.Add(1)%5 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()

	var edges []bool
	l := Load{URL: srv.URL, Body: []byte(`{"x":1}`), Header: http.Header{"X-T": {"v"}}, Conc: 4,
		Warmup: 50 * time.Millisecond, Duration: 200 * time.Millisecond, OnWindow: func(s bool) { edges = append(edges, s) }}
	res, err := l.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(edges) != 2 || !edges[0] || edges[1] {
		t.Errorf("OnWindow calls: %v, want [true false]", edges)
	}
	if res.OK == 0 || res.Errors == 0 {
		t.Fatalf("ok %d errors %d: want both (every 5th reply is a 503)", res.OK, res.Errors)
	}
	// Every 5th reply is a 503: about a quarter as many errors as successes.
	if r := float64(res.Errors) / float64(res.OK); r < 0.1 || r > 0.5 {
		t.Errorf("errors/ok = %.2f, want about 0.25", r)
	}
	if res.FirstError != "HTTP 503" {
		t.Errorf("first error %q", res.FirstError)
	}
	// The window holds fewer requests than were sent (warm-up excluded).
	if int64(res.OK+res.Errors) >= hits.Load() {
		t.Errorf("recorded %d of %d sent: warm-up not excluded", res.OK+res.Errors, hits.Load())
	}
	if res.Latency.N != res.OK || res.Latency.P50 < time.Millisecond || res.Latency.P99 < res.Latency.P50 {
		t.Errorf("latency %+v for %d ok", res.Latency, res.OK)
	}
	if p := peak.Load(); p < 2 || p > 4 {
		t.Errorf("peak concurrency %d, want 2..4", p)
	}
	if got, want := res.RPS(), float64(res.OK)/0.2; got != want {
		t.Errorf("RPS %v, want %v", got, want)
	}
}

// MaxRequests bounds what is sent, warm-up included, however long the window.
func TestLoadMaxRequests(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	l := Load{URL: srv.URL, Conc: 3, Duration: 10 * time.Second, MaxRequests: 25}
	start := time.Now()
	res, err := l.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 25 || res.OK != 25 {
		t.Errorf("sent %d, recorded %d; want 25", hits.Load(), res.OK)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the bound did not end the run early")
	}
}

func TestLoadCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Load{URL: srv.URL, Conc: 2, Duration: 10 * time.Second}.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("got %v, want the context's error", err)
	}
}

func TestLoadUsage(t *testing.T) {
	if _, err := (Load{URL: "http://x", Duration: time.Second}).Run(context.Background()); err == nil {
		t.Error("concurrency 0 accepted")
	}
}
