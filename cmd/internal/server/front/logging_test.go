package front

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
)

func TestNodeSummary(t *testing.T) {
	tests := []struct {
		name string
		in   []engine.Outcome
		want string
	}{
		{"none", nil, ""},
		{"one with status", []engine.Outcome{{Node: "decode", Status: engine.StatusSucceeded, Duration: 1500 * time.Microsecond, HTTPStatus: 200}},
			"decode=succeeded:1.5ms/200"},
		{"rounded to the microsecond, no status", []engine.Outcome{
			{Node: "fetch", Status: engine.StatusSucceeded, Duration: 2*time.Millisecond + 400},
			{Node: "try_decode", Status: engine.StatusFailed, Duration: 1600, HTTPStatus: 412},
			{Node: "encode", Status: engine.StatusSkipped},
			{Node: "d", Status: engine.StatusSucceeded, Duration: 61 * time.Second, HTTPStatus: 200}},
			"fetch=succeeded:2ms try_decode=failed:2µs/412 encode=skipped:0s d=succeeded:1m1s/200"},
		// issue 12: a retried node shows its attempts.
		{"retried", []engine.Outcome{
			{Node: "prefill", Status: engine.StatusSucceeded, Duration: 41 * time.Millisecond, HTTPStatus: 200, Attempt: 2},
			{Node: "decode", Status: engine.StatusFailed, Duration: time.Millisecond, Attempt: 3}},
			"prefill=succeeded:41ms/200:attempts=2 decode=failed:1ms:attempts=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second call reuses the pooled buffer
				if got := nodeSummary(tt.in); got != tt.want {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
			}
			// the result string is the only allocation once the pool is warm
			if n := testing.AllocsPerRun(20, func() { nodeSummary(tt.in) }); n > 1 && !raceEnabled {
				t.Fatalf("%v allocs", n)
			}
		})
	}
}

// ConfigureLogger installs celflow's JSON formatter (RFC3339Nano) wherever
// it picks JSON, and logrus's text formatter otherwise.
func TestConfigureLoggerFormatter(t *testing.T) {
	for _, tt := range []struct {
		format string
		json   bool
	}{{"json", true}, {"", true}, {"text", false}} {
		l := logrus.New()
		if err := ConfigureLogger(l, &bytes.Buffer{}, tt.format, logrus.InfoLevel); err != nil {
			t.Fatal(err)
		}
		f, ok := l.Formatter.(*JSONFormatter)
		if ok != tt.json || ok && f.TimestampFormat != time.RFC3339Nano {
			t.Fatalf("format %q: formatter %#v", tt.format, l.Formatter)
		}
	}
}

// The summary line's fields, names and levels (docs/operations.md "Logs");
// ACCEPTANCE 6 (only the rejected id's length is logged) and 179 (the
// partial-response line) at the unit level.
func TestLogRequestLine(t *testing.T) {
	tests := []struct {
		name  string
		x     exchange
		level string
		msg   string
		want  map[string]any // expected fields besides request_id, method, path, duration_ms
		none  []string       // fields that must be absent
	}{
		{"success", exchange{id: "r1", rejected: -1, status: 200, wroteHeader: true, bytes: 1432, route: engine.RouteChat,
			report: &engine.Report{Workflow: "epd", Outcomes: []engine.Outcome{{Node: "decode", Status: engine.StatusSucceeded, Duration: time.Millisecond, HTTPStatus: 200}}}},
			"info", "request", map[string]any{"status": 200.0, "bytes": 1432.0, "route": "chat", "workflow": "epd", "nodes": "decode=succeeded:1ms/200"},
			[]string{"error", "code", "partial", "rejected_request_id_len"}},
		{"probe at debug", exchange{id: "r2", rejected: -1, probe: true},
			"debug", "request", map[string]any{"status": 200.0, "bytes": 0.0}, []string{"route", "workflow", "nodes"}},
		{"rejected id, upstream failure", exchange{id: "r3", rejected: 300, err: engine.Errorf(engine.KindBadGateway, "refused")},
			"warning", "request", map[string]any{"status": 502.0, "rejected_request_id_len": 300.0, "error": "refused", "code": "bad_gateway"}, nil},
		{"cancelled", exchange{id: "r4", rejected: -1, err: engine.Errorf(engine.KindCancelled, "gone")},
			"info", "request cancelled by the client", map[string]any{"status": 499.0, "code": engine.Errorf(engine.KindCancelled, "").Code()}, []string{"partial"}},
		{"internal", exchange{id: "r5", rejected: -1, err: engine.Errorf(engine.KindInternal, "bug")},
			"error", "request", map[string]any{"status": 500.0, "code": "internal_error"}, nil},
		{"partial", exchange{id: "r6", rejected: -1, status: 200, wroteHeader: true, abort: true, err: engine.Errorf(engine.KindInvalidRequest, "late")},
			"warning", "partial response: the reply was ended abnormally", map[string]any{"status": 200.0, "partial": true}, nil},
		{"partial internal stays error", exchange{id: "r7", rejected: -1, status: 200, wroteHeader: true, abort: true, err: engine.Errorf(engine.KindInternal, "bug")},
			"error", "partial response: the reply was ended abnormally", map[string]any{"partial": true, "code": "internal_error"}, nil},
		{"partial cancelled", exchange{id: "r8", rejected: -1, status: 200, wroteHeader: true, abort: true, err: engine.Errorf(engine.KindCancelled, "gone")},
			"info", "partial response: the reply was ended abnormally", map[string]any{"partial": true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			l, err := NewLogger(&out, "json", logrus.DebugLevel)
			if err != nil {
				t.Fatal(err)
			}
			s := &Server{log: l}
			x := tt.x
			x.start = time.Now().Add(-3 * time.Millisecond)
			s.logRequest(&x, httptest.NewRequest("POST", "/v1/chat/completions", nil))
			if strings.Count(out.String(), "\n") != 1 {
				t.Fatalf("want one line: %q", out.String())
			}
			var m map[string]any
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			if m["level"] != tt.level || m["msg"] != tt.msg || m["request_id"] != x.id ||
				m["method"] != "POST" || m["path"] != "/v1/chat/completions" {
				t.Fatalf("line %v", m)
			}
			if d, _ := m["duration_ms"].(float64); d < 3 {
				t.Fatalf("duration_ms %v", m["duration_ms"])
			}
			if _, err := time.Parse(time.RFC3339Nano, m["time"].(string)); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if m[k] != v {
					t.Fatalf("%s = %#v, want %#v (line %v)", k, m[k], v, m)
				}
			}
			for _, k := range tt.none {
				if _, ok := m[k]; ok {
					t.Fatalf("unexpected %s in %v", k, m)
				}
			}
		})
	}
}
