package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Issue 12: retries are counted by node and a bounded reason; ejections
// and re-admissions by pool.
func TestFailureCounters(t *testing.T) {
	m := New()
	rep := &engine.Report{Workflow: "pd", Outcomes: []engine.Outcome{
		{Node: "prefill", Type: "prefill", Status: engine.StatusSucceeded, Attempt: 3, Retries: []engine.AttemptFailure{
			{Attempt: 1, Reason: engine.RetryUnavailable}, {Attempt: 2, Reason: "free text from somewhere"}}},
		{Node: "decode", Type: "decode", Status: engine.StatusSucceeded, Attempt: 1},
	}}
	m.ObserveReport("chat", 200, rep, nil)
	if v := testutil.ToFloat64(m.failures.retries.WithLabelValues("prefill", "unavailable")); v != 1 {
		t.Errorf("unavailable %v", v)
	}
	if v := testutil.ToFloat64(m.failures.retries.WithLabelValues("prefill", "other")); v != 1 {
		t.Errorf("other %v", v)
	}
	if n := testutil.CollectAndCount(m.failures.retries); n != 2 {
		t.Errorf("%d retry series", n)
	}
	h := m.HealthHook()
	h(upstream.HealthEvent{Role: upstream.RolePrefill, Ejected: true})
	h(upstream.HealthEvent{Role: upstream.RolePrefill})
	h(upstream.HealthEvent{Role: upstream.RoleDecode, Ejected: true})
	if a, b, c := testutil.ToFloat64(m.failures.ejections.WithLabelValues("prefill")),
		testutil.ToFloat64(m.failures.readmissions.WithLabelValues("prefill")),
		testutil.ToFloat64(m.failures.ejections.WithLabelValues("decode")); a != 1 || b != 1 || c != 1 {
		t.Errorf("ejections %v readmissions %v decode ejections %v", a, b, c)
	}
	// No client watched: no endpoint gauges, and no error.
	if n := testutil.CollectAndCount(healthCollector{m.failures}); n != 0 {
		t.Errorf("%d endpoint series without a client", n)
	}
}
