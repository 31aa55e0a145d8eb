package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Issue 12, visible failures: a really failing prefill worker in a direct
// pool (503 on every leg) next to a healthy one. The first request's first
// attempt lands on the failing worker: the retry goes to the other, the
// failing one is ejected, and later re-admitted. Each of these appears in
// the logs (captured logrus JSON), the metrics (the registry as scraped)
// and the trace (an in-memory exporter); the summary line reads
// prefill=succeeded:…:attempts=2. Not parallel: it swaps the global logger
// and tracer provider.
func TestFailuresAreVisible(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prevTP)
	logs := &syncBuf{}
	std := logrus.StandardLogger()
	prevOut, prevFmt, prevLvl := std.Out, std.Formatter, std.GetLevel()
	if err := front.ConfigureLogger(std, logs, "json", logrus.InfoLevel); err != nil {
		t.Fatal(err)
	}
	defer func() { std.SetOutput(prevOut); std.SetFormatter(prevFmt); std.SetLevel(prevLvl) }()

	worker := func(status int, body string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(s.Close)
		return s
	}
	bad := worker(503, `{"object":"error","message":"overloaded","code":503}`)
	good := worker(200, `{"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e","remote_block_ids":[[1]],"remote_host":"10.0.0.1","remote_port":1}}`)
	dec := worker(200, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)

	up, err := upstream.New(upstream.Config{Mode: "direct", FailureThreshold: 1, EjectFor: time.Second, // long enough to observe on a loaded machine
		Pools: map[upstream.Role][]upstream.Endpoint{
			upstream.RolePrefill: {{URL: bad.URL}, {URL: good.URL}}, // round-robin starts with bad
			upstream.RoleDecode:  {{URL: dec.URL}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	up.OnLeg = m.UpstreamHook()
	up.SetHealthHook(m.HealthHook())
	m.WatchUpstream(up)
	wf, ds := engine.LoadFile("../../workflows/pd.yaml", engine.LoadOptions{Upstream: up})
	if wf == nil {
		t.Fatal(ds)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := front.New(front.Options{Listener: ln, Runners: map[engine.Route]engine.Runner{engine.RouteChat: wf},
		Metrics: m.Handler(), Observe: m.Observe, Log: std})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("X-Request-Id", "visible-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d\n%s", resp.StatusCode, logs)
	}

	// The summary line and the metrics are written after the reply's last
	// byte reached the client: wait for the line (bounded), not a sleep.
	for end := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), `"msg":"request"`) && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}

	// Logs: the retry, the ejection, and the summary with attempts.
	var retry, eject, summary map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		switch e["msg"] {
		case "node attempt failed: retrying":
			retry = e
		case "upstream endpoint ejected after consecutive failures":
			eject = e
		case "request":
			summary = e
		}
	}
	if retry == nil || retry["request_id"] != "visible-1" || retry["node"] != "prefill" || retry["attempt"] != 1.0 ||
		retry["reason"] != "unavailable" || retry["endpoint"] != bad.URL || retry["http.response.status_code"] != 503.0 {
		t.Errorf("retry line %v\n%s", retry, logs)
	}
	if eject == nil || eject["pool"] != "prefill" || eject["endpoint"] != bad.URL || eject["level"] != "warning" {
		t.Errorf("ejection line %v", eject)
	}
	if nodes, _ := summary["nodes"].(string); !strings.Contains(nodes, "prefill=succeeded:") || !strings.Contains(nodes, "/200:attempts=2 ") {
		t.Errorf("summary nodes %q", nodes)
	}

	// Metrics: Observe runs just after the summary line is written, so
	// wait for the retry to be counted (bounded), not a sleep.
	for end := time.Now().Add(5 * time.Second); metricValue(t, m, "celflow_retries_total", map[string]string{"node": "prefill", "reason": "unavailable"}) != 1 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if v := metricValue(t, m, "celflow_retries_total", map[string]string{"node": "prefill", "reason": "unavailable"}); v != 1 {
		t.Errorf("retries_total %v", v)
	}
	if v := metricValue(t, m, "celflow_endpoint_ejections_total", map[string]string{"pool": "prefill"}); v != 1 {
		t.Errorf("ejections_total %v", v)
	}
	if v := metricValue(t, m, "celflow_endpoints_healthy", map[string]string{"pool": "prefill"}); v != 1 {
		t.Errorf("healthy prefill endpoints %v, want 1 while one is ejected", v)
	}

	// Span: attempts, each failed attempt's reason, and a retry event.
	var span *tracetest.SpanStub
	for i, s := range exp.GetSpans() {
		if s.Name == "prefill" {
			span = &exp.GetSpans()[i]
		}
	}
	if span == nil {
		t.Fatal("no prefill span")
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes {
		attrs[kv.Key] = kv.Value
	}
	if attrs[engine.AttrAttempt].AsInt64() != 2 || strings.Join(attrs[engine.AttrAttemptFailures].AsStringSlice(), ",") != "unavailable" {
		t.Errorf("span attributes %v", span.Attributes)
	}
	if len(span.Events) != 1 || span.Events[0].Name != "retry" {
		t.Fatalf("span events %+v", span.Events)
	}
	ev := map[attribute.Key]string{}
	for _, kv := range span.Events[0].Attributes {
		ev[kv.Key] = kv.Value.Emit()
	}
	if ev["celflow.retry.reason"] != "unavailable" || ev["celflow.endpoint"] != bad.URL || ev[engine.AttrAttempt] != "1" {
		t.Errorf("retry event %v", ev)
	}

	// Re-admission once the ejection expires: a scrape notices it.
	deadline := time.Now().Add(15 * time.Second)
	for metricValue(t, m, "celflow_endpoint_readmissions_total", map[string]string{"pool": "prefill"}) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no re-admission\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := metricValue(t, m, "celflow_endpoints_healthy", map[string]string{"pool": "prefill"}); v != 2 {
		t.Errorf("healthy prefill endpoints %v after re-admission", v)
	}
	if !strings.Contains(logs.String(), `"msg":"upstream endpoint re-admitted: its ejection expired"`) {
		t.Errorf("no re-admission line\n%s", logs)
	}
}

// metricValue gathers the registry and returns the series' value (-1 when absent).
func metricValue(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return value(mt)
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}
