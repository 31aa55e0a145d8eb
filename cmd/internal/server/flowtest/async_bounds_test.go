package flowtest_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/celflow/celflow/nodes/asyncbroker"
)

// Long-polls are bounded: ?wait=N is clamped to wait_cap (the header says
// the wait granted), and above max_waiters a GET or a wait-mode request is
// answered at once with the current state instead of being held.
func TestLongPollBounds(t *testing.T) {
	t.Run("clamped to wait_cap", func(t *testing.T) {
		s := newStack(t, stackOpts{noDispatch: true, settings: asyncbroker.Settings{WaitCap: time.Second}})
		enqueue(s, "c1", chatBody)
		for _, wait := range []string{"3600", "99999999999999999"} {
			start := time.Now()
			r := s.do("GET", "/v1/requests/c1?wait="+wait, "")
			if r.status != 202 || r.header.Get(asyncbroker.HeaderWait) != "1" {
				t.Fatalf("wait=%s: %d %s=%q %s", wait, r.status, asyncbroker.HeaderWait, r.header.Get(asyncbroker.HeaderWait), r.body)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("wait=%s held %v, want about the 1s cap", wait, d)
			}
		}
		if r := s.do("GET", "/v1/requests/c1?wait=0", ""); r.header.Get(asyncbroker.HeaderWait) != "0" {
			t.Fatalf("wait=0: %v", r.header)
		}
		if r := s.do("GET", "/v1/requests/c1", ""); r.header.Get(asyncbroker.HeaderWait) != "" {
			t.Fatalf("no wait asked, yet %s: %v", asyncbroker.HeaderWait, r.header)
		}
	})
	t.Run("max_waiters", func(t *testing.T) {
		s := newStack(t, stackOpts{noDispatch: true, settings: asyncbroker.Settings{WaitCap: time.Minute, MaxWaiters: 2}})
		enqueue(s, "m1", chatBody)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); s.doCtx(ctx, "GET", "/v1/requests/m1?wait=60", "") }()
		}
		eventually(t, "the two long-polls were not held", func() bool { return s.rt.Waiters() == 2 })
		start := time.Now()
		r := s.do("GET", "/v1/requests/m1?wait=60", "")
		if r.status != 202 || r.header.Get(asyncbroker.HeaderWait) != "0" || r.header.Get("Retry-After") == "" {
			t.Fatalf("third long-poll: %d %v %s", r.status, r.header, r.body)
		}
		w := s.do("POST", "/v1/chat/completions", chatBody, "x-llm-d-async-mode", "wait", "x-request-id", "m2")
		if w.status != 202 || w.header.Get(asyncbroker.HeaderWait) != "0" || !strings.Contains(w.body, `"state":"queued"`) {
			t.Fatalf("wait mode over the bound: %d %v %s", w.status, w.header, w.body)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("answers over the bound took %v", d)
		}
		cancel()
		wg.Wait()
		eventually(t, "waiters not released", func() bool { return s.rt.Waiters() == 0 })
		// Below the bound again: held (and answered at the cap or result).
		s.startDispatcher(8)
		if r := s.do("GET", "/v1/requests/m1?wait=30", ""); r.status != 200 || r.header.Get(asyncbroker.HeaderWait) != "30" {
			t.Fatalf("after release: %d %v %s", r.status, r.header, r.body)
		}
	})
}

// 2,000 long-polls on one replica share its one pub/sub connection: Redis
// sees about as many clients as with none, and each is woken by the result.
// Submit latency is measured with and without them (reported, not
// asserted: the machine is shared).
func TestManyWaitersShareRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 connections")
	}
	const waiters = 2000
	s := newStack(t, stackOpts{noDispatch: true, settings: asyncbroker.Settings{WaitCap: time.Minute, PollInterval: time.Second}})
	submits := func(tag string, n int) (p50, p99 time.Duration) {
		var ds []time.Duration
		for i := 0; i < n; i++ {
			start := time.Now()
			if r := enqueue(s, fmt.Sprintf("%s-%d", tag, i), chatBody); r.status != 202 {
				t.Fatalf("submit: %d %s", r.status, r.body)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[n/2], ds[n*99/100]
	}
	b50, b99 := submits("base", 200)
	before := clientsOf(t, s)

	for i := 0; i < waiters/20; i++ {
		enqueue(s, fmt.Sprintf("w-%d", i), chatBody)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: waiters}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	statuses := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := cl.Get(fmt.Sprintf("%s/v1/requests/w-%d?wait=60", s.url, i%(waiters/20)))
			if err != nil {
				statuses <- -1
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}(i)
	}
	deadline := time.Now().Add(60 * time.Second)
	for s.rt.Waiters() < waiters {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d long-polls held", s.rt.Waiters(), waiters)
		}
		time.Sleep(20 * time.Millisecond)
	}
	during := clientsOf(t, s)
	w50, w99 := submits("during", 200)
	t.Logf("redis clients: %d before, %d with %d waiters; submit p50/p99: %v/%v before, %v/%v with the waiters",
		before, during, waiters, b50, b99, w50, w99)
	if during-before > 50 {
		t.Fatalf("%d waiters opened %d Redis connections", waiters, during-before)
	}
	s.startDispatcher(16)
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Fatalf("a waiter got %d", st)
		}
	}
}

// A Redis error is a 503 with Retry-After and a code naming the operation.
func TestStoreUnavailable(t *testing.T) {
	s := newStack(t, stackOpts{noDispatch: true})
	s.redis.Stop()
	for _, c := range []struct{ method, path, body, code string }{
		{"POST", "/v1/chat/completions", chatBody, "ENQUEUE_FAILED"},
		{"GET", "/v1/requests/su1", "", "FETCH_FAILED"},
		{"GET", "/v1/requests/su1?wait=5", "", "FETCH_FAILED"},
		{"DELETE", "/v1/requests/su1", "", "CANCEL_FAILED"},
	} {
		r := s.do(c.method, c.path, c.body, "x-llm-d-async-mode", "enqueue", "x-request-id", "su1")
		if r.status != 503 || !strings.Contains(r.body, `"code":"`+c.code+`"`) || r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: %d Retry-After=%q %s", c.method, c.path, r.status, r.header.Get("Retry-After"), r.body)
		}
		if strings.Contains(r.body, s.redis.Addr) {
			t.Errorf("%s %s: the Redis address reached the client: %s", c.method, c.path, r.body)
		}
	}
}

// Re-POSTing a finished request (same id, same body) answers with its
// result, as GET does, not a 202.
func TestRepostFinished(t *testing.T) {
	s := newStack(t, stackOpts{})
	enqueue(s, "rp1", chatBody)
	if r := s.do("GET", "/v1/requests/rp1?wait=30", ""); r.status != 200 {
		t.Fatalf("result: %d %s", r.status, r.body)
	}
	r := enqueue(s, "rp1", chatBody)
	if r.status != 200 || !strings.Contains(r.body, `"id":"cmpl-rp1"`) {
		t.Fatalf("re-POST of a finished request: %d %s", r.status, r.body)
	}
	if legs := legsOf(s.w); legs["rp1"] != 1 {
		t.Fatalf("ran %d times", legs["rp1"])
	}
}
