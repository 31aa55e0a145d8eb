// Package admission bounds the requests celflow serves at once: a limit on
// requests in flight for the whole server and one per class (the front uses
// one class per client route, class = int(engine.Route)), a bounded wait
// queue with a timeout, and priorities. It is pure: no HTTP, no CEL, no
// metrics; the front maps its errors to replies, an Observer feeds the
// metrics, and View is the in-flight view other components read (the async
// dispatcher's spare-capacity gate).
//
// Order: among waiters that could run (their class is under its bound), the
// highest priority goes first, FIFO (arrival order) within a priority. A
// bound on one class never blocks another class's waiters. When the queue
// is full, a newcomer of strictly higher priority than the lowest-priority
// waiter takes that waiter's place (the newest among equals is evicted,
// with ErrQueueFull); otherwise the newcomer is refused.
//
// Work that does not come through the front (the async dispatcher) shares
// the bounds by calling TryAcquire(class) and Release(class) around a run:
// it never queues, so waiting online requests keep precedence, and Spare
// tells it beforehand whether there is room.
//
// Starvation: strict priority can starve a low tier for as long as higher
// tiers keep the server saturated; the queue timeout bounds how long such a
// waiter waits (it then gets ErrQueueTimeout), so nothing waits forever.
package admission

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// Errors Acquire returns; a cancelled context returns ctx.Err().
var (
	ErrQueueFull    = errors.New("admission: at the in-flight bound and the wait queue is full")
	ErrQueueTimeout = errors.New("admission: waited the whole queue timeout")
	ErrShuttingDown = errors.New("admission: shutting down")
)

// Reason is why a request was not admitted (a metrics label).
type Reason uint8

const (
	ReasonQueueFull    Reason = iota + 1 // "queue_full"
	ReasonQueueTimeout                   // "queue_timeout"
	ReasonShuttingDown                   // "shutting_down"
	ReasonCancelled                      // "cancelled": the client left while waiting
)

// Reasons lists every Reason (pre-created metric series).
var Reasons = []Reason{ReasonQueueFull, ReasonQueueTimeout, ReasonShuttingDown, ReasonCancelled}

func (r Reason) String() string {
	switch r {
	case ReasonQueueFull:
		return "queue_full"
	case ReasonQueueTimeout:
		return "queue_timeout"
	case ReasonShuttingDown:
		return "shutting_down"
	case ReasonCancelled:
		return "cancelled"
	}
	return "other"
}

// ReasonOf classifies an Acquire error.
func ReasonOf(err error) Reason {
	switch {
	case errors.Is(err, ErrQueueFull):
		return ReasonQueueFull
	case errors.Is(err, ErrQueueTimeout):
		return ReasonQueueTimeout
	case errors.Is(err, ErrShuttingDown):
		return ReasonShuttingDown
	}
	return ReasonCancelled
}

// Limits are the bounds; zero means none. A Controller with no bound at
// all admits everything at once and only counts (Enabled is false).
type Limits struct {
	MaxInFlight int   // whole server
	Class       []int // per class, indexed by class; missing or 0: none
	// MaxQueue is how many requests may wait when a bound is reached; 0
	// refuses at once. QueueTimeout bounds one wait (0: no wait either).
	MaxQueue     int
	QueueTimeout time.Duration
}

// Enabled: some bound is set.
func (l Limits) Enabled() bool {
	if l.MaxInFlight > 0 {
		return true
	}
	for _, n := range l.Class {
		if n > 0 {
			return true
		}
	}
	return false
}

func (l Limits) class(c int) int {
	if c < len(l.Class) {
		return l.Class[c]
	}
	return 0
}

// Observer receives every decision, outside the controller's lock. waited
// is the time spent in the queue (0 on the fast path).
type Observer interface {
	Admitted(class int, waited time.Duration)
	Rejected(class int, r Reason, waited time.Duration)
}

// PriorityObserver is an Observer that also counts the admission priority
// expressions that failed at run time (the request waited with the
// default priority, 0). The front calls it when its Observer implements it.
type PriorityObserver interface {
	PriorityError()
}

// View is the read-only in-flight view. Counts are a snapshot; a limit of
// 0 means unbounded.
type View interface {
	InFlight() int
	Limit() int
	Queued() int
	ClassInFlight(class int) int
	ClassLimit(class int) int
	ClassQueued(class int) int
	// Spare is the room left for one more request of class (see
	// Controller.Spare); bounded is false when no bound applies.
	Spare(class int) (n int, bounded bool)
}

// Controller is the admission state. All methods are safe for concurrent
// use. Every admitted request must be released exactly once.
type Controller struct {
	obs Observer

	mu       sync.Mutex
	lim      Limits
	inFlight int
	classes  []classState
	queued   int
	seq      uint64
	closed   bool
}

type classState struct {
	inFlight int
	waiters  waitHeap
}

var _ View = (*Controller)(nil)

// New builds a controller for classes 0..classes-1; obs may be nil.
func New(classes int, lim Limits, obs Observer) *Controller {
	return &Controller{obs: obs, lim: lim, classes: make([]classState, classes)}
}

// SetLimits replaces the bounds (a config reload) and admits whatever the
// new bounds allow. Waiters are kept even if the new queue is smaller; they
// are admitted or time out as before.
func (c *Controller) SetLimits(l Limits) {
	c.mu.Lock()
	c.lim = l
	c.dispatch()
	c.mu.Unlock()
}

// Limits returns the current bounds.
func (c *Controller) Limits() Limits {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lim
}

// Enabled reports whether some bound is set.
func (c *Controller) Enabled() bool { return c.Limits().Enabled() }

// TryAcquire admits at once when the bounds allow it (always when none is
// set) and reports whether it did. It never queues: on false, call Acquire
// with the request's priority (computed only then).
func (c *Controller) TryAcquire(class int) bool {
	c.mu.Lock()
	if c.closed || !c.fits(class) {
		c.mu.Unlock()
		return false
	}
	c.admit(class)
	c.mu.Unlock()
	if c.obs != nil {
		c.obs.Admitted(class, 0)
	}
	return true
}

// Acquire admits the request, waiting in the queue if a bound is reached.
// It returns nil once admitted (then Release must follow), or
// ErrQueueFull, ErrQueueTimeout, ErrShuttingDown, or ctx.Err() when the
// client left while waiting.
func (c *Controller) Acquire(ctx context.Context, class int, prio int64) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.reject(class, ErrShuttingDown, 0)
	}
	if c.fits(class) {
		c.admit(class)
		c.mu.Unlock()
		if c.obs != nil {
			c.obs.Admitted(class, 0)
		}
		return nil
	}
	if c.lim.MaxQueue <= 0 || c.lim.QueueTimeout <= 0 {
		c.mu.Unlock()
		return c.reject(class, ErrQueueFull, 0)
	}
	if c.queued >= c.lim.MaxQueue && !c.evictFor(prio) {
		c.mu.Unlock()
		return c.reject(class, ErrQueueFull, 0)
	}
	start := time.Now()
	w := &waiter{prio: prio, seq: c.seq, class: class, ready: make(chan struct{})}
	c.seq++
	heap.Push(&c.classes[class].waiters, w)
	c.queued++
	timeout := c.lim.QueueTimeout
	c.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	var why error
	select {
	case <-w.ready:
	case <-ctx.Done():
		why = ctx.Err()
	case <-t.C:
		why = ErrQueueTimeout
	}
	c.mu.Lock()
	if w.done {
		// Decided meanwhile (admitted, evicted or shut down): that decision
		// stands, unless the client left, which frees the slot at once.
		err := w.err
		c.mu.Unlock()
		if err == nil && ctx.Err() != nil {
			c.Release(class)
			return c.reject(class, ctx.Err(), time.Since(start))
		}
		if err != nil {
			return c.reject(class, err, time.Since(start))
		}
		if c.obs != nil {
			c.obs.Admitted(class, time.Since(start))
		}
		return nil
	}
	heap.Remove(&c.classes[class].waiters, w.index)
	c.queued--
	c.mu.Unlock()
	return c.reject(class, why, time.Since(start))
}

// Shed refuses a request that may not wait (background work after
// TryAcquire failed): ErrShuttingDown once closed, else ErrQueueFull,
// counted as either by the Observer.
func (c *Controller) Shed(class int) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return c.reject(class, ErrShuttingDown, 0)
	}
	return c.reject(class, ErrQueueFull, 0)
}

// Release ends an admitted request and admits waiters into the freed room.
func (c *Controller) Release(class int) {
	c.mu.Lock()
	c.inFlight--
	c.classes[class].inFlight--
	c.dispatch()
	c.mu.Unlock()
}

// Close refuses every waiter and every later request with ErrShuttingDown
// (the listener has closed: docs/configuration.md, Shutdown). Admitted
// requests run on.
func (c *Controller) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for i := range c.classes {
		h := &c.classes[i].waiters
		for h.Len() > 0 {
			c.decide(heap.Pop(h).(*waiter), ErrShuttingDown)
		}
	}
}

func (c *Controller) reject(class int, err error, waited time.Duration) error {
	if c.obs != nil {
		c.obs.Rejected(class, ReasonOf(err), waited)
	}
	return err
}

// fits: one more request of class stays within the bounds.
func (c *Controller) fits(class int) bool {
	if m := c.lim.MaxInFlight; m > 0 && c.inFlight >= m {
		return false
	}
	if m := c.lim.class(class); m > 0 && c.classes[class].inFlight >= m {
		return false
	}
	return true
}

func (c *Controller) admit(class int) {
	c.inFlight++
	c.classes[class].inFlight++
}

// decide ends a waiter's wait (nil: admitted); w is out of its heap.
func (c *Controller) decide(w *waiter, err error) {
	c.queued--
	w.err, w.done = err, true
	close(w.ready)
}

// dispatch admits waiters while there is room: each time the best waiter
// (priority, then arrival) among the classes under their own bound.
func (c *Controller) dispatch() {
	for c.queued > 0 {
		if m := c.lim.MaxInFlight; m > 0 && c.inFlight >= m {
			return
		}
		var best *waiter
		for i := range c.classes {
			cs := &c.classes[i]
			if cs.waiters.Len() == 0 || !c.fits(i) {
				continue
			}
			if w := cs.waiters[0]; best == nil || w.before(best) {
				best = w
			}
		}
		if best == nil {
			return
		}
		heap.Remove(&c.classes[best.class].waiters, best.index)
		c.admit(best.class)
		c.decide(best, nil)
	}
}

// evictFor makes room in a full queue for a newcomer of priority prio by
// refusing the lowest-priority waiter (the newest among equals), if that
// one's priority is strictly lower. O(queue), only when the queue is full.
func (c *Controller) evictFor(prio int64) bool {
	var worst *waiter
	for i := range c.classes {
		for _, w := range c.classes[i].waiters {
			if worst == nil || worst.before(w) {
				worst = w
			}
		}
	}
	if worst == nil || worst.prio >= prio {
		return false
	}
	heap.Remove(&c.classes[worst.class].waiters, worst.index)
	c.decide(worst, ErrQueueFull)
	return true
}
