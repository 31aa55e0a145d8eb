package admission

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// counts is an Observer that counts decisions.
type counts struct {
	mu       sync.Mutex
	admitted int
	rejected map[Reason]int
}

func (c *counts) Admitted(int, time.Duration) { c.mu.Lock(); c.admitted++; c.mu.Unlock() }
func (c *counts) Rejected(_ int, r Reason, _ time.Duration) {
	c.mu.Lock()
	if c.rejected == nil {
		c.rejected = map[Reason]int{}
	}
	c.rejected[r]++
	c.mu.Unlock()
}

func (c *counts) get() (int, map[Reason]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[Reason]int{}
	for k, v := range c.rejected {
		m[k] = v
	}
	return c.admitted, m
}

// waitFor polls cond until it holds or the test's bound (5 s) expires: a
// condition wait, not a timed assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestBoundsAndFastPath(t *testing.T) {
	cases := []struct {
		name  string
		lim   Limits
		class int
		admit int // how many TryAcquire calls succeed before the first refusal
	}{
		{"unbounded counts only", Limits{}, 1, 50},
		{"server bound", Limits{MaxInFlight: 3}, 1, 3},
		{"class bound", Limits{Class: []int{0, 2, 5}}, 1, 2},
		{"tighter of both", Limits{MaxInFlight: 4, Class: []int{0, 9}}, 1, 4},
		{"other class unbounded", Limits{Class: []int{0, 0, 1}}, 1, 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := New(3, tc.lim, nil)
			n := 0
			for n < 50 && c.TryAcquire(tc.class) {
				n++
			}
			if n != tc.admit {
				t.Fatalf("admitted %d, want %d", n, tc.admit)
			}
			if c.InFlight() != n || c.ClassInFlight(tc.class) != n {
				t.Fatalf("in flight %d/%d, want %d", c.InFlight(), c.ClassInFlight(tc.class), n)
			}
			if tc.lim.Enabled() && n < 50 {
				// At the bound with no queue: refused at once.
				if err := c.Acquire(context.Background(), tc.class, 0); !errors.Is(err, ErrQueueFull) {
					t.Fatalf("Acquire at the bound: %v, want ErrQueueFull", err)
				}
				c.Release(tc.class)
				if !c.TryAcquire(tc.class) {
					t.Fatal("not admitted again after a release")
				}
			}
		})
	}
}

func TestClassBoundDoesNotBlockOtherClass(t *testing.T) {
	c := New(3, Limits{MaxInFlight: 3, Class: []int{0, 1, 0}, MaxQueue: 4, QueueTimeout: time.Minute}, nil)
	if !c.TryAcquire(1) {
		t.Fatal("first request of class 1 refused")
	}
	done := make(chan error, 1)
	go func() { done <- c.Acquire(context.Background(), 1, 100) }()
	waitFor(t, "class 1 waiter", func() bool { return c.Queued() == 1 })
	// Class 2 goes ahead of the queued class-1 request of higher priority:
	// class 1 is at its own bound, the server is not.
	if err := c.Acquire(context.Background(), 2, 0); err != nil {
		t.Fatalf("class 2 blocked by class 1's bound: %v", err)
	}
	c.Release(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.InFlight() != 2 || c.Queued() != 0 {
		t.Fatalf("in flight %d queued %d", c.InFlight(), c.Queued())
	}
}

func TestQueueTimeout(t *testing.T) {
	obs := &counts{}
	c := New(2, Limits{MaxInFlight: 1, MaxQueue: 1, QueueTimeout: 20 * time.Millisecond}, obs)
	c.TryAcquire(1)
	if err := c.Acquire(context.Background(), 1, 0); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("got %v, want ErrQueueTimeout", err)
	}
	if c.Queued() != 0 || c.InFlight() != 1 {
		t.Fatalf("queued %d in flight %d after a timeout", c.Queued(), c.InFlight())
	}
	if _, rej := obs.get(); rej[ReasonQueueTimeout] != 1 {
		t.Fatalf("rejections %v", rej)
	}
}

// acquireAsync starts a waiter and waits until it is queued, so that the
// arrival order (seq) is the call order.
func acquireAsync(t *testing.T, c *Controller, ctx context.Context, class int, prio int64, id int, out chan<- result) {
	t.Helper()
	before := c.Queued()
	go func() { out <- result{id, c.Acquire(ctx, class, prio)} }()
	waitFor(t, "waiter queued", func() bool { return c.Queued() == before+1 })
}

type result struct {
	id  int
	err error
}

// ACCEPTANCE-like check of issue 12: priority order under a full queue,
// FIFO within a tier, and a higher tier displacing the lowest waiter.
func TestPriorityOrderUnderFullQueue(t *testing.T) {
	obs := &counts{}
	c := New(2, Limits{MaxInFlight: 1, MaxQueue: 5, QueueTimeout: time.Minute}, obs)
	c.TryAcquire(1)
	out := make(chan result, 16)
	prios := []int64{0, 10, 0, 5, 10} // ids 0..4
	for id, p := range prios {
		acquireAsync(t, c, context.Background(), 1, p, id, out)
	}
	// The queue is full: a tier-0 newcomer is refused, a tier-7 one evicts
	// the newest tier-0 waiter (id 2).
	if err := c.Acquire(context.Background(), 1, 0); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("low newcomer into a full queue: %v", err)
	}
	go func() { out <- result{5, c.Acquire(context.Background(), 1, 7)} }()
	if r := <-out; r.id != 2 || !errors.Is(r.err, ErrQueueFull) {
		t.Fatalf("evicted %+v, want id 2 ErrQueueFull", r)
	}
	waitFor(t, "the newcomer in the evicted one's place", func() bool { return c.Queued() == 5 })
	var order []int
	for range 5 {
		c.Release(1)
		r := <-out
		if r.err != nil {
			t.Fatalf("id %d: %v", r.id, r.err)
		}
		order = append(order, r.id)
	}
	want := []int{1, 4, 5, 3, 0}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("admission order %v, want %v", order, want)
		}
	}
	if adm, rej := obs.get(); adm != 6 || rej[ReasonQueueFull] != 2 {
		t.Fatalf("observer: admitted %d rejected %v", adm, rej)
	}
}

func TestCancelledWaiterFreesItsPlace(t *testing.T) {
	c := New(2, Limits{MaxInFlight: 1, MaxQueue: 1, QueueTimeout: time.Minute}, nil)
	c.TryAcquire(1)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan result, 2)
	acquireAsync(t, c, ctx, 1, 0, 0, out)
	cancel()
	if r := <-out; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", r.err)
	}
	if c.Queued() != 0 {
		t.Fatalf("queued %d after cancel", c.Queued())
	}
	// Its place in the queue is free again.
	acquireAsync(t, c, context.Background(), 1, 0, 1, out)
	c.Release(1)
	if r := <-out; r.err != nil || c.InFlight() != 1 {
		t.Fatalf("next waiter: %v, in flight %d", r.err, c.InFlight())
	}
}

func TestCloseRefusesWaitersAndNewcomers(t *testing.T) {
	c := New(2, Limits{MaxInFlight: 1, MaxQueue: 3, QueueTimeout: time.Minute}, nil)
	c.TryAcquire(1)
	out := make(chan result, 3)
	for id := range 3 {
		acquireAsync(t, c, context.Background(), 1, int64(id), id, out)
	}
	c.Close()
	for range 3 {
		if r := <-out; !errors.Is(r.err, ErrShuttingDown) {
			t.Fatalf("waiter %d: %v", r.id, r.err)
		}
	}
	if c.TryAcquire(1) {
		t.Fatal("admitted after Close")
	}
	if err := c.Acquire(context.Background(), 1, 0); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("after Close: %v", err)
	}
	c.Release(1) // the admitted one runs on and ends normally
	if c.InFlight() != 0 || c.Queued() != 0 {
		t.Fatalf("in flight %d queued %d", c.InFlight(), c.Queued())
	}
}

func TestSetLimitsAdmitsWaiters(t *testing.T) {
	c := New(2, Limits{MaxInFlight: 1, MaxQueue: 2, QueueTimeout: time.Minute}, nil)
	c.TryAcquire(1)
	out := make(chan result, 2)
	acquireAsync(t, c, context.Background(), 1, 0, 0, out)
	acquireAsync(t, c, context.Background(), 1, 0, 1, out)
	c.SetLimits(Limits{MaxInFlight: 3, MaxQueue: 2, QueueTimeout: time.Minute})
	for range 2 {
		if r := <-out; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if c.InFlight() != 3 || c.Limit() != 3 {
		t.Fatalf("in flight %d limit %d", c.InFlight(), c.Limit())
	}
}

func TestShed(t *testing.T) {
	obs := &counts{}
	c := New(2, Limits{MaxInFlight: 1}, obs)
	if err := c.Shed(1); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Shed: %v", err)
	}
	c.Close()
	if err := c.Shed(1); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Shed after Close: %v", err)
	}
	if _, rej := obs.get(); rej[ReasonQueueFull] != 1 || rej[ReasonShuttingDown] != 1 {
		t.Fatalf("rejections %v", rej)
	}
}

func TestSpare(t *testing.T) {
	c := New(3, Limits{MaxInFlight: 4, Class: []int{0, 0, 1}}, nil)
	if _, bounded := New(3, Limits{}, nil).Spare(1); bounded {
		t.Fatal("unbounded controller reports a bound")
	}
	c.TryAcquire(1)
	if n, _ := c.Spare(1); n != 3 {
		t.Fatalf("spare(1) = %d, want 3", n)
	}
	c.TryAcquire(2)
	if n, _ := c.Spare(2); n != 0 {
		t.Fatalf("spare(2) = %d, want 0 (class bound)", n)
	}
}

// TestStressNoLostWakeups runs a bounded concurrent load (run it with
// -race): every request is accounted for, the bound holds at every
// instant, nothing waits out a timeout it should not (a lost wake-up would
// surface as ErrQueueTimeout with a queue sized for every client), and no
// goroutine is left behind.
func TestStressNoLostWakeups(t *testing.T) {
	const clients, rounds, bound = 32, 200, 4
	base := runtime.NumGoroutine()
	obs := &counts{}
	c := New(4, Limits{MaxInFlight: bound, Class: []int{0, 2, 3, 3}, MaxQueue: clients, QueueTimeout: time.Minute}, obs)
	var (
		mu      sync.Mutex
		cur     int
		peak    int
		okN     int
		cancelN int
		wg      sync.WaitGroup
	)
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				class := 1 + (g+i)%3
				ctx, cancel := context.WithCancel(context.Background())
				if (g*rounds+i)%7 == 0 {
					cancel() // some clients leave at once: cancellation races admission
				}
				err := c.Acquire(ctx, class, int64((g+i)%4))
				cancel()
				switch {
				case err == nil:
					mu.Lock()
					cur++
					peak = max(peak, cur)
					okN++
					mu.Unlock()
					runtime.Gosched()
					mu.Lock()
					cur--
					mu.Unlock()
					c.Release(class)
				case errors.Is(err, context.Canceled):
					mu.Lock()
					cancelN++
					mu.Unlock()
				default:
					t.Errorf("client %d round %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if okN+cancelN != clients*rounds {
		t.Fatalf("admitted %d + cancelled %d != %d sent", okN, cancelN, clients*rounds)
	}
	if peak > bound {
		t.Fatalf("peak in flight %d > bound %d", peak, bound)
	}
	if c.InFlight() != 0 || c.Queued() != 0 {
		t.Fatalf("in flight %d queued %d at the end", c.InFlight(), c.Queued())
	}
	adm, rej := obs.get()
	if adm != okN || rej[ReasonCancelled] != cancelN {
		t.Fatalf("observer admitted %d rejected %v; counted %d ok %d cancelled", adm, rej, okN, cancelN)
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= base })
}
