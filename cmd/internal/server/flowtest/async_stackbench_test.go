package flowtest_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/celflow/celflow/connectors/async"
)

// Benchmarks against a real redis-server and the real front (go test
// -bench . ./nodes/asyncbroker/). Figures go to docs/async.md.

var benchSeq atomic.Int64

// BenchmarkSubmit: enqueue requests through the HTTP front (one client, one
// at a time): submits per second.
func BenchmarkSubmit(b *testing.B) {
	s := newStack(b, stackOpts{noDispatch: true, builtin: async.BuiltinConfig{TenantBacklog: -1, QueueBacklog: -1}})
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		id := "sub-" + strconv.FormatInt(benchSeq.Add(1), 10)
		if r := s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "enqueue", "x-request-id", id); r.status != 202 {
			b.Fatalf("%d %s", r.status, r.body)
		}
		n++
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "submits/s")
}

// BenchmarkDispatchOverhead: what the builtin back end adds per request
// around the workflow run: claim (XREADGROUP + claim script) and finish
// (fenced script), one request at a time.
func BenchmarkDispatchOverhead(b *testing.B) {
	s := newStack(b, stackOpts{noDispatch: true, builtin: async.BuiltinConfig{TenantBacklog: -1, QueueBacklog: -1}})
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		id := "d-" + strconv.FormatInt(benchSeq.Add(1), 10)
		if _, err := s.b.Submit(ctx, &async.Job{Tenant: "t", ID: id, Queue: "default", Path: "/v1/chat/completions",
			Body: []byte(chatBody), Created: time.Now(), Deadline: time.Now().Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ds, _, err := s.b.Claim(ctx, "bench", 1, 0)
		if err != nil || len(ds) != 1 {
			b.Fatalf("claim %v %v", ds, err)
		}
		if ok, err := s.b.Finish(ctx, ds[0], async.Result{Status: 200, Body: []byte(`{}`)}); !ok || err != nil {
			b.Fatalf("finish %v %v", ok, err)
		}
	}
}

// BenchmarkOnlineLatency: a steady online load (one request at a time,
// worker answering at once) with the dispatcher running, without and with
// a backlog of 2,000 queued requests; p50/p99 of the online requests.
func BenchmarkOnlineLatency(b *testing.B) {
	for _, backlog := range []int{0, 2000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			s := newStack(b, stackOpts{noDispatch: true, budget: 2, builtin: async.BuiltinConfig{TenantBacklog: -1, QueueBacklog: -1}})
			ctx := context.Background()
			for i := 0; i < backlog; i++ {
				id := "bl-" + strconv.FormatInt(benchSeq.Add(1), 10)
				if _, err := s.b.Submit(ctx, &async.Job{Tenant: "t", ID: id, Queue: "default", Lane: "async",
					Path: "/v1/chat/completions", Body: []byte(chatBody), Created: time.Now(), Deadline: time.Now().Add(time.Hour)}); err != nil {
					b.Fatal(err)
				}
			}
			s.startDispatcher(2)
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if r := s.do("POST", "/v1/chat/completions", chatBody); r.status != 200 {
					b.Fatalf("%d %s", r.status, r.body)
				}
				lat = append(lat, time.Since(t0))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
			s.stopDispatcher()
		})
	}
}
