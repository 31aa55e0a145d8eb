package metrics

import (
	"testing"

	"github.com/celflow/celflow/cmd/internal/server/front"
)

// The front's connection events reach /metrics; both refusal reasons are
// served from the start (zeros, not gaps).
func TestConnSeries(t *testing.T) {
	m := New()
	fams := scrape(t, m)
	for _, r := range []string{front.RefusedMaxConnections, front.RefusedResets} {
		if got := value(find(t, fams, "celflow_connections_refused_total", map[string]string{"reason": r})); got != 0 {
			t.Fatalf("%s before any refusal: %v", r, got)
		}
	}
	o := m.ConnObserver()
	o.ConnRefused(front.RefusedMaxConnections)
	o.ConnRefused(front.RefusedMaxConnections)
	o.ConnRefused(front.RefusedResets)
	o.EarlyReset()
	o.TLSHandshakeFailed()
	o.TLSHandshakeFailed()
	o.TLSHandshakeFailed()
	fams = scrape(t, m)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"celflow_connections_refused_total", map[string]string{"reason": front.RefusedMaxConnections}, 2},
		{"celflow_connections_refused_total", map[string]string{"reason": front.RefusedResets}, 1},
		{"celflow_client_early_resets_total", nil, 1},
		{"celflow_tls_handshake_failures_total", nil, 3},
	} {
		if got := value(find(t, fams, tc.name, tc.labels)); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}
