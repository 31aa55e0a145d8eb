package flowtest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async"
)

// usedMemory reads INFO memory's used_memory.
func usedMemory(t *testing.T, s *stack) int64 {
	t.Helper()
	info, err := s.rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory")
	return 0
}

// legsOf counts the worker legs per request id.
func legsOf(ws ...*worker) map[string]int {
	n := map[string]int{}
	for _, w := range ws {
		w.mu.Lock()
		for _, h := range w.legs {
			n[h.Get("X-Request-Id")]++
		}
		w.mu.Unlock()
	}
	return n
}

// A Redis at its memory limit (noeviction) refuses every claim, while the
// stream's delivery counter still counts each XREADGROUP/XAUTOCLAIM. Held
// full well past the old dead-letter horizon (max_deliveries × lease), then
// freed: every queued request runs exactly once, none is dead-lettered, and
// a replica started while Redis was full dispatches once it is not.
func TestRedisFullDeadLettersNothing(t *testing.T) {
	const lease = 200 * time.Millisecond
	cfg := async.BuiltinConfig{Lease: lease, MaxDeliveries: 3}
	a := newStack(t, stackOpts{noDispatch: true, builtin: cfg})
	ctx := context.Background()
	const n = 12
	for i := 0; i < n; i++ {
		if r := enqueue(a, fmt.Sprintf("full-%d", i), chatBody); r.status != 202 {
			t.Fatalf("enqueue %d: %d %s", i, r.status, r.body)
		}
	}
	// Fill Redis to a limit, then lower the limit to half the memory in
	// use: with noeviction every write that may grow memory is refused
	// from now on, with a margin that client buffers cannot cross.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	must(a.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(usedMemory(t, a)+4<<20, 10)).Err())
	filler := strings.Repeat("x", 64<<10)
	full := false
	for i := 0; i < 200 && !full; i++ {
		err := a.rdb.Set(ctx, fmt.Sprintf("filler:%d", i), filler, 0).Err()
		full = err != nil && strings.Contains(err.Error(), "OOM")
	}
	if !full {
		t.Fatal("Redis did not fill up")
	}
	must(a.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(usedMemory(t, a)/2, 10)).Err())
	if err := a.rdb.HSet(ctx, "probe", "f", "v").Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Redis accepts writes while full: %v", err)
	}

	// Replicas that die while Redis is full: each was delivered the entries
	// (Redis counts a delivery) and could not claim them. The next one takes
	// them over once they are idle for a lease; four such deliveries are
	// past max_deliveries.
	for i := 1; i <= cfg.MaxDeliveries+1; i++ {
		consumer := fmt.Sprintf("dies-%d", i)
		eventually(t, consumer+" was delivered nothing", func() bool {
			_, _, err := a.b.Claim(ctx, consumer, n, 0)
			return err != nil && a.b.Stashed(consumer) == n
		})
	}

	a.startDispatcher(8)
	// A replica started during the episode.
	b := newStack(t, stackOpts{shareWith: a, builtin: cfg, budget: 8})
	// Well past the old horizon: each entry is redelivered every lease, and
	// max_deliveries deliveries used to dead-letter it. (A hold, not a
	// synchronisation: a slower machine only holds it full longer.)
	time.Sleep(time.Duration(cfg.MaxDeliveries+3) * lease * 3)
	if legs := legsOf(a.w, b.w); len(legs) != 0 {
		t.Fatalf("requests ran while Redis refused their claims: %v", legs)
	}

	maxCount := int64(0)
	for _, l := range a.b.Config().Lanes {
		ps, _ := a.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: a.b.Stream("default", l), Group: "celflow", Start: "-", End: "+", Count: 100}).Result()
		for _, p := range ps {
			maxCount = max(maxCount, p.RetryCount)
		}
	}
	t.Logf("highest delivery count while full: %d", maxCount)
	if maxCount <= int64(cfg.MaxDeliveries) {
		t.Fatalf("highest delivery count %d: the test did not reach the old dead-letter horizon", maxCount)
	}
	must(a.rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("full-%d", i)
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := a.do("GET", "/v1/requests/"+id, "")
			if r.status == 200 {
				break
			}
			if r.status != 202 || time.Now().After(deadline) {
				t.Fatalf("%s after Redis was freed: %d %s", id, r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	legs := legsOf(a.w, b.w)
	for i := 0; i < n; i++ {
		if id := fmt.Sprintf("full-%d", i); legs[id] != 1 {
			t.Errorf("%s ran %d times, want 1", id, legs[id])
		}
	}
	if d := a.rdb.XLen(ctx, a.b.DeadLetters()).Val(); d != 0 {
		t.Errorf("%d dead letters", d)
	}

	// Only the replica started while full dispatches now.
	a.stopDispatcher()
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("after-%d", i)
		enqueue(a, id, chatBody)
		r := a.do("GET", "/v1/requests/"+id+"?wait=30", "")
		if r.status != 200 {
			t.Fatalf("%s on the replica started while full: %d %s", id, r.status, r.body)
		}
	}
	if legs := legsOf(b.w); legs["after-0"] != 1 {
		t.Fatalf("the replica started while full did not dispatch: %v", legs)
	}
}

// clientsOf is INFO clients' connected_clients.
func clientsOf(t *testing.T, s *stack) int {
	t.Helper()
	info, err := s.rdb.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "connected_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatal("no connected_clients")
	return 0
}

// A run that finishes while Redis is full keeps its claim (renewing, which
// Redis still accepts) and retries storing the result: the request is not
// run a second time after the lease.
func TestRedisFullFinishRetried(t *testing.T) {
	const lease = 200 * time.Millisecond
	s := newStack(t, stackOpts{builtin: async.BuiltinConfig{Lease: lease, MaxDeliveries: 3}})
	ctx := context.Background()
	hold := make(chan struct{})
	s.w.setHold(hold)
	enqueue(s, "fin1", chatBody)
	select {
	case <-s.w.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the request did not start")
	}
	if err := s.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	close(hold) // the run finishes while Redis refuses its result
	// Past several leases: without the retry the claim idles out and the
	// request is claimed again (and run again once Redis accepts it).
	time.Sleep(10 * lease)
	if err := s.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if r := s.do("GET", "/v1/requests/fin1?wait=30", ""); r.status != 200 {
		t.Fatalf("result: %d %s", r.status, r.body)
	}
	// A second run, had there been one, would have started by now: give a
	// redelivery the time it needs (two leases past the result) to show.
	time.Sleep(3 * lease)
	if legs := legsOf(s.w); legs["fin1"] != 1 {
		t.Fatalf("ran %d times, want 1", legs["fin1"])
	}
}
