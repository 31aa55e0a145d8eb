package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/celflow/celflow/connectors/upstream"
)

// Issue 19: a drain is counted in celflow_endpoint_drains_total, never as
// an ejection or a re-admission, and celflow_endpoints_draining shows the
// draining endpoints of the watched client.
func TestDrainMetrics(t *testing.T) {
	m := New()
	h := m.HealthHook()
	h(upstream.HealthEvent{Role: upstream.RoleDecode, Draining: true, For: 30 * time.Second})
	if d, e, r := testutil.ToFloat64(m.failures.drains.WithLabelValues("decode")),
		testutil.ToFloat64(m.failures.ejections.WithLabelValues("decode")),
		testutil.ToFloat64(m.failures.readmissions.WithLabelValues("decode")); d != 1 || e != 0 || r != 0 {
		t.Fatalf("drains %v ejections %v readmissions %v", d, e, r)
	}

	w := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Retry-After", "30")
		rw.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer w.Close()
	up, err := upstream.New(upstream.Config{Mode: "direct", Pools: map[upstream.Role][]upstream.Endpoint{
		upstream.RoleDecode: {{URL: w.URL}, {URL: "http://127.0.0.1:1"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.WatchUpstream(up)
	tg, _ := up.Pick(upstream.RoleDecode, "http://127.0.0.1:1")
	resp, err := up.Send(t.Context(), tg.Base, &upstream.Leg{Role: upstream.RoleDecode, Path: "/v1/completions", Body: strings.NewReader("{}")})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d, ok := upstream.DrainSignal(resp, time.Now())
	if !ok {
		t.Fatal("no drain signal")
	}
	tg.Drain(d)
	want := `
# HELP celflow_endpoints_draining Direct-mode endpoints that said they are draining (a 503 with Retry-After or Connection: close) and take no new legs, by pool.
# TYPE celflow_endpoints_draining gauge
celflow_endpoints_draining{pool="decode"} 1
# HELP celflow_endpoints_healthy Direct-mode endpoints currently in rotation (neither ejected nor draining), by pool.
# TYPE celflow_endpoints_healthy gauge
celflow_endpoints_healthy{pool="decode"} 1
`
	if err := testutil.CollectAndCompare(healthCollector{m.failures}, strings.NewReader(want), "celflow_endpoints_draining", "celflow_endpoints_healthy"); err != nil {
		t.Fatal(err)
	}
}
