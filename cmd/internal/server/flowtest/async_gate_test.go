package flowtest_test

import (
	"sync"
	"testing"
	"time"
)

// Online load keeps the gate closed: with the decode pool at its budget,
// a queued request waits; when the online requests finish, it runs.
func TestOnlineLoadKeepsGateClosed(t *testing.T) {
	s := newStack(t, stackOpts{budget: 2})
	s.w.setHold(make(chan struct{}))
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.do("POST", "/v1/chat/completions", chatBody) }()
	}
	for i := 0; i < 2; i++ {
		select {
		case <-s.w.started:
		case <-time.After(10 * time.Second):
			t.Fatal("online requests did not start")
		}
	}
	enqueue(s, "queued1", chatBody)
	// An absence: the dispatcher polls the gate every 50 ms; six times that
	// without a dispatch shows the gate held.
	select {
	case id := <-s.w.started:
		t.Fatalf("%s was dispatched while online load filled the budget", id)
	case <-time.After(300 * time.Millisecond):
	}
	// Claimed or not, it is pending and no leg was sent (a claim that raced
	// the online load waits at the gate).
	if r := s.do("GET", "/v1/requests/queued1", ""); r.status != 202 {
		t.Fatalf("state: %s", r.body)
	}
	close(s.w.hold)
	wg.Wait()
	if r := s.do("GET", "/v1/requests/queued1?wait=10", ""); r.status != 200 {
		t.Fatalf("after the online load: %d %s", r.status, r.body)
	}
}

// A worker's 429 puts the request back and halves the budget; the retry
// succeeds and exactly one result is stored.
func TestWorker429Requeues(t *testing.T) {
	s := newStack(t, stackOpts{budget: 4})
	s.w.status = 429
	enqueue(s, "busy1", chatBody)
	select {
	case <-s.w.started:
	case <-time.After(10 * time.Second):
		t.Fatal("never dispatched")
	}
	s.w.mu.Lock()
	s.w.status = 200
	s.w.mu.Unlock()
	if r := s.do("GET", "/v1/requests/busy1?wait=10", ""); r.status != 200 {
		t.Fatalf("after a 429: %d %s", r.status, r.body)
	}
}
