package upstream

import (
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Passive health made visible (issue 12): every ejection and re-admission
// of a direct-mode endpoint is logged and handed to the health hook (the
// metrics' counters), and Health reports the healthy endpoints per pool
// (the metrics' gauge). A re-admission has no timer of its own: an
// ejection simply expires, and the first pick or Health call after that
// notices it (sweep), so the event is logged at most one pick late.

// HealthEvent is one ejection or re-admission of an endpoint.
type HealthEvent struct {
	Role     Role
	Endpoint string        // the endpoint's URL as configured
	Ejected  bool          // true: ejected; false: re-admitted
	Failures int           // ejection: the consecutive failures that caused it
	For      time.Duration // ejection: how long it is out of rotation
}

// PoolHealth is one direct-mode pool's endpoint count and healthy count.
type PoolHealth struct {
	Role      Role
	Endpoints int
	Healthy   int
}

// SetHealthHook sets the function called on every HealthEvent (nil: none).
// It is called synchronously, possibly under a pool lock: keep it cheap.
func (c *Client) SetHealthHook(f func(HealthEvent)) {
	if f == nil {
		c.impl.health.Store(nil)
		return
	}
	c.impl.health.Store(&f)
}

// Health reports each direct-mode pool (none in gateway mode), in role
// order, and notices expired ejections first.
func (c *Client) Health() []PoolHealth {
	var out []PoolHealth
	for _, p := range c.impl.pools {
		if p == nil {
			continue
		}
		now := p.now().UnixNano()
		p.sweep(now)
		ph := PoolHealth{Role: p.role, Endpoints: len(p.eps)}
		for _, e := range p.eps {
			if e.healthy(now) {
				ph.Healthy++
			}
		}
		out = append(out, ph)
	}
	return out
}

// sweep re-admits every endpoint whose ejection expired, once each. It
// costs one atomic load while nothing is ejected.
func (p *pool) sweep(now int64) {
	if p.ejected.Load() == 0 {
		return
	}
	for _, e := range p.eps {
		u := e.ejectedUntil.Load()
		if u == 0 || now < u || !e.ejectedUntil.CompareAndSwap(u, 0) {
			continue
		}
		p.ejected.Add(-1)
		logrus.WithFields(logrus.Fields{"pool": string(p.role), "endpoint": e.ep.URL}).
			Info("upstream endpoint re-admitted: its ejection expired")
		p.emit(HealthEvent{Role: p.role, Endpoint: e.ep.URL})
	}
}

func (p *pool) emit(ev HealthEvent) {
	if p.hook == nil {
		return
	}
	if f := p.hook.Load(); f != nil {
		(*f)(ev)
	}
}

// healthHook is the client's hook, shared by its pools.
type healthHook = atomic.Pointer[func(HealthEvent)]
