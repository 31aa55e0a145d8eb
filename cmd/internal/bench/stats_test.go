package bench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	for _, tc := range []struct {
		name   string
		sample []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one element is every percentile", []time.Duration{7}, 99, 7},
		{"median of 1..100 is the 50th", hundred, 50, 50 * time.Millisecond},
		{"p99 of 1..100 is the 99th, not the max", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"p90", hundred, 90, 90 * time.Millisecond},
		{"median of three is the middle", []time.Duration{1, 2, 3}, 50, 2},
		{"p99 of three is the max", []time.Duration{1, 2, 3}, 99, 3},
		{"p50 of two is the lower (nearest rank)", []time.Duration{10, 20}, 50, 10},
		{"tiny q is the min", hundred, 0.001, time.Millisecond},
	} {
		if got := Percentile(tc.sample, tc.q); got != tc.want {
			t.Errorf("%s: P%v = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
}

func TestSummarise(t *testing.T) {
	xs := []time.Duration{5, 1, 4, 2, 3} // unsorted on purpose
	d := Summarise(xs)
	want := Dist{N: 5, Mean: 3, P50: 3, P90: 5, P99: 5, Max: 5}
	if d != want {
		t.Fatalf("got %+v, want %+v", d, want)
	}
	if xs[0] != 1 || xs[4] != 5 {
		t.Errorf("sample not sorted in place: %v", xs)
	}
	if (Summarise(nil) != Dist{}) {
		t.Error("empty sample: want the zero Dist")
	}
}
