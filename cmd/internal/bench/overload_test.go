package bench

import (
	"strings"
	"testing"
	"time"
)

func TestSaturation(t *testing.T) {
	for _, tc := range []struct {
		sweep []SweepPoint
		want  int
	}{
		{[]SweepPoint{{1, 48}, {2, 90}, {4, 172}, {8, 380}, {16, 380}, {32, 379}}, 8},
		{[]SweepPoint{{1, 48}, {2, 90}, {4, 172}, {8, 350}, {16, 378}}, 8}, // 350 ≥ 0.9 × 378
		{[]SweepPoint{{1, 100}, {2, 100}}, 1},
		{nil, 1},
	} {
		if got := saturation(tc.sweep); got != tc.want {
			t.Errorf("saturation(%v) = %d, want %d", tc.sweep, got, tc.want)
		}
	}
}

// The cell's targets: met only when every request is accounted for.
func TestOverloadChecks(t *testing.T) {
	r := &OverloadResult{Unloaded: Dist{P99: 21 * time.Millisecond}, Sent: 10, Admitted: 6, Rejected: 4,
		AdmittedLat: Dist{P99: 30 * time.Millisecond}, RejectedLat: Dist{P99: time.Millisecond}}
	for _, c := range overloadChecks(r) {
		if c.Verdict != met {
			t.Errorf("%s: %s (%s)", c.Target, c.Verdict, c.Measured)
		}
	}
	r.Other, r.Sent = 1, 11
	r.AdmittedLat.P99 = 50 * time.Millisecond
	var failed []string
	for _, c := range overloadChecks(r) {
		if c.Verdict != met {
			failed = append(failed, c.Target)
		}
	}
	if len(failed) != 2 || !strings.Contains(failed[0], "p99") || !strings.Contains(failed[1], "lost") {
		t.Errorf("failed checks %v", failed)
	}
	var b strings.Builder
	renderOverload(&b, r)
	if !strings.Contains(b.String(), "## Overload (admission control)") || !strings.Contains(b.String(), "| 11 | 6 | 4 | 1 |") {
		t.Errorf("section:\n%s", b.String())
	}
}
