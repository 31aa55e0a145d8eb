package upstream

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// captureLog sends logrus's standard logger to a buffer (JSON lines) for
// the test. Tests using it must not run in parallel.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	std := logrus.StandardLogger()
	out, f, lvl := std.Out, std.Formatter, std.GetLevel()
	std.SetOutput(&buf)
	std.SetFormatter(&logrus.JSONFormatter{})
	std.SetLevel(logrus.InfoLevel)
	t.Cleanup(func() { std.SetOutput(out); std.SetFormatter(f); std.SetLevel(lvl) })
	return &buf
}

func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// Issue 12: an ejection and the re-admission after EjectFor are each
// logged once (pool, endpoint) and handed to the health hook, and Health
// counts the healthy endpoints per pool throughout.
func TestHealthEventsAndCounts(t *testing.T) {
	logs := captureLog(t)
	c, clk := newDirect(t, Config{FailureThreshold: 2, EjectFor: 10 * time.Second}, 2, RolePrefill, RoleDecode)
	var mu sync.Mutex
	var evs []HealthEvent
	c.SetHealthHook(func(ev HealthEvent) { mu.Lock(); evs = append(evs, ev); mu.Unlock() })

	fail := func() {
		tg := mustPick(t, c, RolePrefill, "http://prefill-1:8000/")
		tg.Done(true)
	}
	fail()
	fail() // threshold: prefill-0 ejected
	fail() // prefill-0 is out: the pick falls back to prefill-1... excluded, so prefill-1 fails once
	if h := c.Health(); len(h) != 2 || h[0] != (PoolHealth{RolePrefill, 2, 1, 0}) || h[1] != (PoolHealth{RoleDecode, 2, 2, 0}) {
		t.Fatalf("health %+v", h)
	}
	if len(evs) != 1 || !evs[0].Ejected || evs[0].Role != RolePrefill || evs[0].Endpoint != "http://prefill-0:8000/" ||
		evs[0].Failures != 2 || evs[0].For != 10*time.Second {
		t.Fatalf("events %+v", evs)
	}
	clk.t = clk.t.Add(10 * time.Second) // the ejection expires
	if h := c.Health(); h[0].Healthy != 2 {
		t.Fatalf("health after expiry %+v", h)
	}
	mustPick(t, c, RolePrefill).Done(false)
	if len(evs) != 2 || evs[1].Ejected || evs[1].Endpoint != "http://prefill-0:8000/" {
		t.Fatalf("re-admission events %+v", evs)
	}
	var ej, re int
	for _, l := range logLines(t, logs) {
		if l["pool"] != "prefill" || l["endpoint"] != "http://prefill-0:8000/" {
			continue
		}
		switch l["msg"] {
		case "upstream endpoint ejected after consecutive failures":
			ej++
			if l["level"] != "warning" || l["consecutive_failures"] != 2.0 || l["eject_for"] != "10s" {
				t.Errorf("ejection line %v", l)
			}
		case "upstream endpoint re-admitted: its ejection expired":
			re++
		}
	}
	if ej != 1 || re != 1 {
		t.Fatalf("%d ejection and %d re-admission lines:\n%s", ej, re, logs)
	}
}

// The never-last rule refuses an ejection without an event.
func TestHealthNeverLastNoEvent(t *testing.T) {
	captureLog(t)
	c, _ := newDirect(t, Config{FailureThreshold: 1}, 1, RoleDecode)
	n := 0
	c.SetHealthHook(func(HealthEvent) { n++ })
	for range 3 {
		mustPick(t, c, RoleDecode).Done(true)
	}
	if h := c.Health(); n != 0 || h[0].Healthy != 1 {
		t.Fatalf("%d events, health %+v", n, h)
	}
}

func TestHealthGateway(t *testing.T) {
	c, err := New(Config{Mode: modeGateway, Gateway: "http://gw:1"})
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Health(); len(h) != 0 {
		t.Fatalf("%+v", h)
	}
}
