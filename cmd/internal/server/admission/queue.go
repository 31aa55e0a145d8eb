package admission

// waiter is one request in the queue. prio, seq and class are fixed; index,
// done and err are guarded by the controller's lock, and ready is closed
// (under it) once done is set.
type waiter struct {
	prio  int64
	seq   uint64 // arrival order, unique per controller
	class int
	index int // position in its class's heap

	ready chan struct{}
	done  bool
	err   error // nil: admitted
}

// before: w goes ahead of o (higher priority, then earlier arrival).
func (w *waiter) before(o *waiter) bool {
	if w.prio != o.prio {
		return w.prio > o.prio
	}
	return w.seq < o.seq
}

// waitHeap is one class's waiters, best first (container/heap).
type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}

func (h *waitHeap) Pop() any {
	old := *h
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.index = -1
	*h = old[:n-1]
	return w
}

// The View: snapshots under the lock.

// InFlight is the number of admitted requests not yet released.
func (c *Controller) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Limit is the whole-server bound (0: none).
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lim.MaxInFlight
}

// Queued is the number of requests waiting.
func (c *Controller) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

// ClassInFlight is the admitted requests of one class (0 for a class out of range).
func (c *Controller) ClassInFlight(class int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if class < 0 || class >= len(c.classes) {
		return 0
	}
	return c.classes[class].inFlight
}

// ClassLimit is one class's bound (0: none).
func (c *Controller) ClassLimit(class int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if class < 0 {
		return 0
	}
	return c.lim.class(class)
}

// ClassQueued is the waiters of one class.
func (c *Controller) ClassQueued(class int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if class < 0 || class >= len(c.classes) {
		return 0
	}
	return c.classes[class].waiters.Len()
}

// Spare is the room left under the bounds for one more request of class:
// min(server room, class room) minus the waiters ahead, never negative;
// bounded is false when neither bound applies (then n is 0 and means
// nothing: the caller needs its own gate).
// The async dispatcher takes work only while n > 0.
func (c *Controller) Spare(class int) (n int, bounded bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n = -1
	if m := c.lim.MaxInFlight; m > 0 {
		n, bounded = m-c.inFlight-c.queued, true
	}
	if class >= 0 && class < len(c.classes) {
		if m := c.lim.class(class); m > 0 {
			r := m - c.classes[class].inFlight - c.classes[class].waiters.Len()
			if !bounded || r < n {
				n = r
			}
			bounded = true
		}
	}
	if !bounded {
		return 0, false
	}
	return max(n, 0), true
}
