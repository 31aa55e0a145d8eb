package admission

import (
	"context"
	"runtime"
	"testing"
)

// The per-request cost when a bound is set and not reached (and when none
// is set: counting only): one lock, no allocation.
func BenchmarkFastPath(b *testing.B) {
	for _, tc := range []struct {
		name string
		lim  Limits
	}{
		{"unbounded", Limits{}},
		{"bounded", Limits{MaxInFlight: 1 << 20, Class: []int{0, 1 << 20}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := New(2, tc.lim, nil)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !c.TryAcquire(1) {
						b.Fatal("refused")
					}
					c.Release(1)
				}
			})
		})
	}
}

// A full round through the queue: one slot, a waiter handed the slot by
// each release.
func BenchmarkQueueHandOff(b *testing.B) {
	c := New(2, Limits{MaxInFlight: 1, MaxQueue: 1, QueueTimeout: 1 << 62}, nil)
	c.TryAcquire(1)
	b.ReportAllocs()
	for b.Loop() {
		done := make(chan error)
		go func() { done <- c.Acquire(context.Background(), 1, 0) }()
		for c.Queued() == 0 {
			runtime.Gosched()
		}
		c.Release(1)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
