package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/engine"
)

// The admission counters, the wait histogram and the in-flight view reach
// /metrics under the route's path.
func TestAdmissionSeries(t *testing.T) {
	m := New()
	chat, gen := int(engine.RouteChat), int(engine.RouteGenerate)
	c := admission.New(4, admission.Limits{MaxInFlight: 2, Class: []int{0, 0, 0, 1}, MaxQueue: 1,
		QueueTimeout: time.Millisecond}, m.AdmissionObserver())
	m.WatchAdmission(c)
	m.WatchAdmission(c) // a second call registers nothing
	c.TryAcquire(chat)
	c.TryAcquire(gen)
	if err := c.Acquire(context.Background(), gen, 0); err != admission.ErrQueueTimeout {
		t.Fatalf("Acquire: %v", err)
	}
	c.Close()
	_ = c.Acquire(context.Background(), chat, 0)

	fams := scrape(t, m)
	chatL, genL := RouteLabel(engine.RouteChat), RouteLabel(engine.RouteGenerate)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"celflow_admission_admitted_total", map[string]string{"route": chatL}, 1},
		{"celflow_admission_admitted_total", map[string]string{"route": genL}, 1},
		{"celflow_admission_rejected_total", map[string]string{"route": genL, "reason": "queue_timeout"}, 1},
		{"celflow_admission_rejected_total", map[string]string{"route": chatL, "reason": "shutting_down"}, 1},
		{"celflow_admission_rejected_total", map[string]string{"route": chatL, "reason": "queue_full"}, 0},
		{"celflow_admission_in_flight", map[string]string{"route": genL}, 1},
		{"celflow_admission_queue_depth", map[string]string{"route": genL}, 0},
		{"celflow_admission_limit", map[string]string{"route": genL}, 1},
		{"celflow_admission_limit", map[string]string{"route": chatL}, 0},
		{"celflow_admission_max_in_flight", nil, 2},
	} {
		if got := value(find(t, fams, tc.name, tc.labels)); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	h := find(t, fams, "celflow_admission_wait_seconds", map[string]string{"route": genL, "result": "rejected"})
	if h.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("wait histogram count %d, want 1", h.GetHistogram().GetSampleCount())
	}
}
