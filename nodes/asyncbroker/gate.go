package asyncbroker

import (
	"sync"
	"time"
)

// InFlightView is what the dispatcher's gate reads: legs in flight per
// worker pool (role). connectors/upstream's Client satisfies it through
// UpstreamView; the admission controller can provide another.
type InFlightView interface {
	InFlight(role string) int64
}

// gate lets queued work take only spare capacity: a dispatch may start
// while every pool's in-flight count is below the budget. A worker's 429
// halves the budget and closes the gate until its Retry-After; each
// completed dispatch gives one slot back, up to the configured budget.
type gate struct {
	view  InFlightView
	roles []string
	max   int

	mu     sync.Mutex
	cur    int
	paused time.Time
}

func newGate(view InFlightView, roles []string, budget int) *gate {
	if budget <= 0 {
		budget = 1
	}
	return &gate{view: view, roles: roles, max: budget, cur: budget}
}

// spare is how many dispatches may start now (0: the gate is closed).
func (g *gate) spare(now time.Time) int {
	g.mu.Lock()
	cur, paused := g.cur, g.paused
	g.mu.Unlock()
	if now.Before(paused) {
		return 0
	}
	free := cur
	if g.view == nil {
		return free
	}
	for _, r := range g.roles {
		if f := cur - int(g.view.InFlight(r)); f < free {
			free = f
		}
	}
	return max(free, 0)
}

// refused halves the budget and pauses until retryAfter has passed.
func (g *gate) refused(now time.Time, retryAfter time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cur = max(1, g.cur/2)
	if until := now.Add(retryAfter); until.After(g.paused) {
		g.paused = until
	}
}

// succeeded gives one slot of the budget back.
func (g *gate) succeeded() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur < g.max {
		g.cur++
	}
}

func (g *gate) budget() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur
}
