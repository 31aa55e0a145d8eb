package upstream

import (
	"net/http"
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

// HealthEvent is one ejection, re-admission or drain of an endpoint.
type HealthEvent struct {
	Role     Role
	Endpoint string        // the endpoint's URL as configured
	Ejected  bool          // true: ejected; false: re-admitted (or, with Draining, a drain)
	Failures int           // ejection: the consecutive failures that caused it
	For      time.Duration // ejection or drain: how long it is out of rotation
	// Draining: the endpoint said it is draining (DrainSignal) and takes no
	// new legs for For; not a failure and not an ejection (Ejected false).
	Draining bool
}

// PoolHealth is one direct-mode pool's endpoint count, the endpoints in
// rotation (Healthy: neither ejected nor draining) and the draining ones.
type PoolHealth struct {
	Role      Role
	Endpoints int
	Healthy   int
	Draining  int
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
			if e.draining(now) {
				ph.Draining++
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

// Draining (issue 19). A worker on its way out (a rollout, a node drain)
// says so before it stops: vLLM behind uvicorn, or any server, answers new
// requests 503 with Retry-After, or 503 with Connection: close (the HTTP/1.1
// form of an HTTP/2 GOAWAY; legs are HTTP/1.1, docs/protocol.md). Such an
// endpoint is draining: it gets no new legs until the Retry-After elapses
// (capped at MaxDrainFor; DefaultDrainFor without one) or until a leg
// picked after the signal is answered well (a worker that restarted fast).
// Its legs in flight are untouched, and draining is not a failure: it
// neither counts toward nor resets the failure streak that ejects, and the
// never-last rule does not apply (when every endpoint of a pool drains, a
// draining one is still picked; choose's last pass takes any endpoint).
const (
	DefaultDrainFor = 5 * time.Second
	MaxDrainFor     = 60 * time.Second
)

// DrainSignal reports whether resp says its endpoint is draining and for
// how long: a 503 with a valid Retry-After (capped at MaxDrainFor), or a
// 503 with Connection: close (DefaultDrainFor). A 503 with neither is an
// overloaded worker: a failure, as before.
func DrainSignal(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	if s := RetryAfter(resp.Header, now); s > 0 {
		return min(time.Duration(s)*time.Second, MaxDrainFor), true
	}
	if resp.Close {
		return DefaultDrainFor, true
	}
	return 0, false
}

// Drain releases the target like Done, without a health verdict, and
// takes its endpoint out of rotation for d (at most MaxDrainFor). For the
// gateway it only releases: the gateway drains its own pods.
func (t *Target) Drain(d time.Duration) {
	if t.done == nil {
		return
	}
	if t.ep != nil {
		t.ep.inflight.Add(-1)
		t.ep.drain(min(d, MaxDrainFor))
	} else {
		t.done(false)
	}
	t.done = nil
}

// Release releases the target without a health verdict: the leg was not
// sent (a reroute found no endpoint it had not tried).
func (t *Target) Release() {
	if t.done == nil {
		return
	}
	if t.ep != nil {
		t.ep.inflight.Add(-1)
	} else {
		t.done(false)
	}
	t.done = nil
}

func (e *endpoint) draining(now int64) bool {
	u := e.drainUntil.Load()
	return u != 0 && now < u
}

func (e *endpoint) drain(d time.Duration) {
	p := e.pool
	now := p.now().UnixNano()
	e.drainEpoch.Add(1)
	e.drainUntil.Store(now + int64(d))
	logrus.WithFields(logrus.Fields{"pool": string(p.role), "endpoint": e.ep.URL, "drain_for": d.String()}).
		Info("upstream endpoint draining: no new legs until it recovers")
	p.emit(HealthEvent{Role: p.role, Endpoint: e.ep.URL, Draining: true, For: d})
}

// answered ends a drain when a leg picked after the latest drain signal
// (epoch) was answered well: the worker is back.
func (e *endpoint) answered(epoch uint32) {
	u := e.drainUntil.Load()
	if u == 0 || e.drainEpoch.Load() != epoch || !e.drainUntil.CompareAndSwap(u, 0) {
		return
	}
	if e.pool.now().UnixNano() < u {
		logrus.WithFields(logrus.Fields{"pool": string(e.pool.role), "endpoint": e.ep.URL}).
			Info("upstream endpoint answered again: no longer draining")
	}
}
