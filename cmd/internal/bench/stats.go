package bench

import (
	"slices"
	"time"
)

// Dist summarises a sample of durations. Percentiles use the nearest-rank
// method on the sorted sample: P(q) is the smallest value with at least q%
// of the sample at or below it, so P(100) is the maximum and a one-element
// sample has every percentile equal to that element.
type Dist struct {
	N    int
	Mean time.Duration
	P50  time.Duration
	P90  time.Duration
	P99  time.Duration
	Max  time.Duration
}

// Summarise sorts xs in place and returns its distribution (zero for an
// empty sample).
func Summarise(xs []time.Duration) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	slices.Sort(xs)
	var sum time.Duration
	for _, x := range xs {
		sum += x
	}
	return Dist{
		N:    len(xs),
		Mean: sum / time.Duration(len(xs)),
		P50:  Percentile(xs, 50),
		P90:  Percentile(xs, 90),
		P99:  Percentile(xs, 99),
		Max:  xs[len(xs)-1],
	}
}

// Percentile returns the nearest-rank q-th percentile (0 < q ≤ 100) of an
// ascending sample; 0 for an empty one.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// rank = ceil(q/100 · n), computed in integers to avoid float rounding
	// turning 99% of 100 into rank 100.
	rank := int((q*float64(n) + 99.999999) / 100)
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}
