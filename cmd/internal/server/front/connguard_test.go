package front

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/net/http2"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/internal/tlsfiles"
)

// served sends one keep-alive GET /healthz on c and reports whether it got
// its 200 (the connection was accepted and is being served).
func served(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: celflow\r\n\r\n")); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// server.max_connections 3: a fourth concurrent connection is refused at
// once (a reset, well under a second, no backlog wait) and counted; once
// one closes, a new connection is served again.
func TestMaxConnections(t *testing.T) {
	ev := &connEvents{}
	h := start(t, nil, func(o *Options) { o.MaxConnections = 3; o.Conns = ev })
	var open []net.Conn
	for i := range 3 {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := served(c); err != nil {
			t.Fatalf("connection %d under the cap: %v", i, err)
		}
		open = append(open, c)
	}

	start := time.Now()
	// The kernel completes the handshake; the reset may then reach the
	// client before its connect returns, or at its first read.
	c, err := net.Dial("tcp", h.addr)
	if err == nil {
		err = served(c)
		c.Close()
	}
	if d := time.Since(start); err == nil || d > time.Second {
		t.Fatalf("fourth connection: err %v after %v, want refused well under a second", err, d)
	}
	t.Logf("fourth connection refused in %v: %v", time.Since(start), err)
	if n := ev.refusedFor(RefusedMaxConnections); n != 1 {
		t.Fatalf("refusals counted: %d, want 1", n)
	}
	for _, c := range open[1:] { // the three are still served
		if err := served(c); err != nil {
			t.Fatalf("an accepted connection after the refusal: %v", err)
		}
	}

	// One closes: the server sees the close, and a new connection fits.
	open[0].Close()
	waitFor(t, "a new connection to be served after one closed", func() bool {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			return false
		}
		defer c.Close()
		return served(c) == nil
	})
}

// HTTP/2 streams per connection: what admission can hold, between
// minStreams and net/http's 250; the server advertises it.
func TestMaxConcurrentStreams(t *testing.T) {
	classes := func(n ...int) []int { return append([]int{0}, n...) }
	all := func(n int) []int {
		c := make([]int, AdmissionClasses-1)
		for i := range c {
			c[i] = n
		}
		return classes(c...)
	}
	for _, tc := range []struct {
		name string
		l    admission.Limits
		want uint32
	}{
		{"no bound", admission.Limits{}, 250},
		{"in-flight and queue", admission.Limits{MaxInFlight: 20, MaxQueue: 30}, 50},
		{"huge bound: net/http's default", admission.Limits{MaxInFlight: 10000}, 250},
		{"tiny bound: the floor", admission.Limits{MaxInFlight: 1}, minStreams},
		{"per route only, all bounded", admission.Limits{Class: all(10)}, uint32(10 * (AdmissionClasses - 1))},
		{"per route, one unbounded", admission.Limits{Class: classes(10)}, 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newTLSSetup(t, tlsfiles.ServerConfig{})
			h := start(t, nil, func(o *Options) { o.TLS = st.files.Config(); o.Admission.Limits = tc.l })
			c, err := tls.Dial("tcp", h.addr, &tls.Config{RootCAs: st.ca.Pool(), NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(c, c)
			if err := fr.WriteSettings(); err != nil {
				t.Fatal(err)
			}
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("first frame %T", f)
			}
			got, ok := sf.Value(http2.SettingMaxConcurrentStreams)
			if !ok || got != tc.want {
				t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (%v), want %d", got, ok, tc.want)
			}
		})
	}
}

// aggregated sums the counts of the aggregated lines of one refusal kind.
func aggregated(t *testing.T, logs *logBuf, kind string) (lines, count int) {
	for _, l := range logs.lines(t) {
		if l["refusal"] == kind {
			lines++
			count += int(l["count"].(float64))
		}
	}
	return lines, count
}

// N admission refusals: the counters read N, the log holds no line per
// refusal but a few aggregated lines whose counts add up to N.
func TestRefusalLogAggregated(t *testing.T) {
	const n, every = 300, 200 * time.Millisecond
	g := newGate()
	var refused atomic.Int64
	h := start(t, g.runner(), func(o *Options) {
		o.Admission = Admission{Limits: admission.Limits{MaxInFlight: 1}}
		o.Observe = func(ob *Observation) {
			if ob.Status == http.StatusTooManyRequests {
				refused.Add(1)
			}
		}
		o.refusalEvery = every
	})
	held := make(chan struct{})
	go func() {
		defer close(held)
		h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m"}`, nil)
	}()
	<-g.entered // the only slot is taken
	start := time.Now()
	for i := range n {
		resp, _ := h.do(t, http.MethodPost, "/v1/chat/completions", `{"model":"m"}`, nil)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	took := time.Since(start)
	g.release <- struct{}{}
	<-held
	waitFor(t, "the aggregated counts to add up", func() bool {
		_, c := aggregated(t, h.logs, "overloaded")
		return c == n
	})
	if got := refused.Load(); got != n {
		t.Fatalf("429s observed (metrics): %d, want %d", got, n)
	}
	lines, _ := aggregated(t, h.logs, "overloaded")
	// One line at the first refusal, then at most one per interval.
	if maxLines := 2 + int(took/every); lines > maxLines {
		t.Fatalf("%d aggregated lines for %d refusals in %v, want at most %d", lines, n, took, maxLines)
	}
	for _, l := range h.logs.lines(t) {
		if l["status"] == float64(429) {
			t.Fatalf("a refusal logged its own line at info: %v", l)
		}
	}
	t.Logf("%d refusals in %v: %d log lines", n, took, lines)
}

// N failed TLS handshakes: counted N times, logged in a few aggregated
// warnings, never one line each.
func TestTLSHandshakeFailuresAggregated(t *testing.T) {
	const n, every = 50, 200 * time.Millisecond
	st := newTLSSetup(t, tlsfiles.ServerConfig{})
	ev := &connEvents{}
	h := start(t, nil, func(o *Options) { o.TLS = st.files.Config(); o.Conns = ev; o.refusalEvery = every })
	start := time.Now()
	for range n {
		// No CA: the client rejects the certificate, the server's
		// handshake fails ("remote error: tls: bad certificate").
		if c, err := tls.Dial("tcp", h.addr, &tls.Config{}); err == nil {
			c.Close()
			t.Fatal("handshake without the CA succeeded")
		}
	}
	waitFor(t, "every failed handshake to be counted and logged", func() bool {
		_, c := aggregated(t, h.logs, refusalTLSHandshake)
		return ev.handshakes.Load() == n && c == n
	})
	took := time.Since(start)
	lines, _ := aggregated(t, h.logs, refusalTLSHandshake)
	if maxLines := 2 + int(took/every); lines > maxLines {
		t.Fatalf("%d lines for %d failed handshakes in %v, want at most %d", lines, n, took, maxLines)
	}
	if c := strings.Count(h.logs.String(), "TLS handshake error"); c > lines {
		t.Fatalf("%d lines mention a handshake error, %d aggregated lines", c, lines)
	}
	t.Logf("%d failed handshakes in %v: %d log lines", n, took, lines)
}

// The aggregator: the first refusal is logged at once, later ones summed
// per interval, nothing lost at close.
func TestRefusalLogClose(t *testing.T) {
	logs := &logBuf{}
	l, _ := NewLogger(logs, "json", logrus.InfoLevel)
	a := newRefusalLog(l, time.Hour)
	for range 5 {
		a.add("overloaded")
	}
	if lines, c := aggregated(t, logs, "overloaded"); lines != 1 || c != 1 {
		t.Fatalf("before close: %d lines, count %d; want the first refusal only", lines, c)
	}
	a.close()
	if lines, c := aggregated(t, logs, "overloaded"); lines != 2 || c != 5 {
		t.Fatalf("after close: %d lines, count %d; want 2 lines adding up to 5", lines, c)
	}
}
