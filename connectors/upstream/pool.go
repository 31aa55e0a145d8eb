package upstream

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// ErrNoEndpoint: a leg's role has no endpoint (direct mode without a pool
// for the role, or render passed to Pick).
var ErrNoEndpoint = errors.New("no endpoint for role")

// endpoint is one worker of a direct pool with its live state. Picking and
// releasing are lock-free; only an ejection decision takes the pool lock.
type endpoint struct {
	ep   Endpoint // as configured; Target.Endpoint points here
	base string   // URL without trailing slash
	host string
	pool *pool

	inflight     atomic.Int64
	failures     atomic.Int32 // consecutive failures since the last success or ejection
	ejectedUntil atomic.Int64 // unix ns; 0 or past = healthy
	// Draining (health.go): the endpoint asked for no new legs until
	// drainUntil (unix ns; 0 or past = not draining). drainEpoch counts drain
	// signals, so a leg picked after the latest one can end the drain.
	drainUntil atomic.Int64
	drainEpoch atomic.Uint32

	prefix *prefixIndex // decode pools only

	relaying atomic.Int64 // replies of scored picks being relayed to clients (Target.StartRelay)
	scraped  loadFigures  // the worker's own running/waiting (routing.metrics_interval)
	truth    truthWindow  // how its recent predicted hits turned out (truth.go)
}

// pool is the endpoints of one role.
type pool struct {
	role          Role
	eps           []*endpoint
	next          atomic.Uint64 // rotation counter
	leastInFlight bool
	threshold     int32
	ejectFor      time.Duration
	now           func() time.Time
	mu            sync.Mutex   // serialises ejections (the never-last rule)
	ejected       atomic.Int32 // endpoints ejected and not yet re-admitted (sweep)
	hook          *healthHook  // the client's health hook; nil in tests that build a pool alone

	// Cache-aware routing (score.go): cacheAware scores this pool's picks
	// (by the client's CacheSource for the pool, cachesource_set.go, else
	// the prediction index); scraper reads the workers' /metrics when
	// configured.
	cacheAware bool
	routing    Routing
	bs         int // PrefixBlockTokens
	scraper    *scraper
	stats      routeStats   // the truth check's counters (truth.go)
	adapters   adapterTable // which model names are LoRA adapters (adapters.go)
}

func newPool(r Role, eps []Endpoint, cfg Config) *pool {
	// A named pool may serve decode, so it is scored like decode's; the
	// other roles' pools under cache-aware pick the least loaded.
	scored := cfg.Picker == pickCacheAware && (r == RoleDecode || roleIndex(r) < 0)
	p := &pool{
		role:          r,
		leastInFlight: cfg.Picker == pickLeastInFlight || (cfg.Picker == pickCacheAware && !scored),
		threshold:     int32(min(cfg.FailureThreshold, 1<<30)),
		ejectFor:      cfg.EjectFor,
		now:           time.Now,
		cacheAware:    scored,
		routing:       cfg.Routing,
		bs:            cfg.PrefixBlockTokens,
	}
	if scored && cfg.Routing.MetricsInterval > 0 {
		p.scraper = newScraper(cfg.Routing.MetricsTimeout)
	}
	for _, ep := range eps {
		e := &endpoint{ep: ep, base: strings.TrimRight(ep.URL, "/"), pool: p}
		e.host = hostOf(e.base)
		if r == RoleDecode || roleIndex(r) < 0 { // a named pool may serve decode
			e.prefix = newPrefixIndex(cfg.PrefixIndexSize)
		}
		e.truth.init(cfg.Routing.MispredictWindow)
		p.eps = append(p.eps, e)
	}
	return p
}

func (c *client) pick(r Role, exclude []string) (*Target, error) {
	i := roleIndex(r)
	if i < 0 {
		return nil, fmt.Errorf("%w %q", ErrNoEndpoint, r)
	}
	if !c.direct {
		c.gwInflight[i].Add(1)
		return &Target{Base: c.gateway, Host: c.gatewayHost, done: c.gwDone[i]}, nil
	}
	p := c.pools[i]
	if p == nil {
		return nil, fmt.Errorf("%w %q", ErrNoEndpoint, r)
	}
	return c.pickIn(p, exclude, CacheKey{}), nil
}

// choose prefers a healthy, non-excluded endpoint; then a healthy one; then
// any (ejections expire, and the never-last rule keeps one healthy, so the
// last pass is a safety net).
func (p *pool) choose(exclude []string) *endpoint {
	now := p.now().UnixNano()
	p.sweep(now)
	for pass := 0; pass < 3; pass++ {
		ok := func(e *endpoint) bool {
			return pass == 2 || (e.healthy(now) && (pass == 1 || !e.excluded(exclude)))
		}
		if e := p.scan(ok); e != nil {
			return e
		}
	}
	return p.eps[0] // unreachable: pass 2 accepts every endpoint
}

// scan returns the next eligible endpoint in rotation (round-robin) or the
// eligible one with the fewest legs in flight, ties broken by rotation.
func (p *pool) scan(ok func(*endpoint) bool) *endpoint {
	n := uint64(len(p.eps))
	if !p.leastInFlight {
		// Advancing the counter past skipped endpoints keeps the rotation
		// fair among the eligible ones.
		for range n {
			if e := p.eps[(p.next.Add(1)-1)%n]; ok(e) {
				return e
			}
		}
		return nil
	}
	start := p.next.Add(1) - 1
	var best *endpoint
	var bestN int64
	for k := range n {
		e := p.eps[(start+k)%n]
		if !ok(e) {
			continue
		}
		if in := e.inflight.Load(); best == nil || in < bestN {
			best, bestN = e, in
		}
	}
	return best
}

func (p *pool) take(e *endpoint) *Target {
	e.inflight.Add(1)
	return &Target{Base: e.base, Endpoint: &e.ep, Host: e.host, ep: e, done: e.release, epoch: e.drainEpoch.Load()}
}

// healthy: in rotation, neither ejected nor draining (health.go).
func (e *endpoint) healthy(now int64) bool {
	u := e.ejectedUntil.Load()
	return (u == 0 || now >= u) && !e.draining(now)
}

func (e *endpoint) excluded(exclude []string) bool {
	for _, x := range exclude {
		if x == e.base || x == e.ep.URL {
			return true
		}
	}
	return false
}

// release ends one leg: in-flight accounting and passive health. A success
// resets the failure streak; FailureThreshold consecutive failures eject.
func (e *endpoint) release(failed bool) {
	e.inflight.Add(-1)
	if !failed {
		if e.failures.Load() != 0 {
			e.failures.Store(0)
		}
		return
	}
	if e.failures.Add(1) >= e.pool.threshold {
		e.pool.eject(e)
	}
}

// eject takes e out of rotation for EjectFor unless it is the last healthy
// endpoint of its role (docs/configuration.md, upstream.health); then its
// streak keeps counting and the next failure tries again. A rejoining endpoint
// starts a fresh streak.
//
// Every ejection is logged (warn) and handed to the health hook; a refusal
// by the never-last rule is logged at debug level only, as it repeats on
// every further failure.
func (p *pool) eject(e *endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now().UnixNano()
	p.sweep(now) // an expired ejection is re-admitted before a new one counts
	if u := e.ejectedUntil.Load(); u != 0 && now < u {
		return
	}
	for _, o := range p.eps {
		if o != e && o.healthy(now) {
			n := int(e.failures.Load())
			e.ejectedUntil.Store(now + int64(p.ejectFor))
			e.failures.Store(0)
			p.ejected.Add(1)
			logrus.WithFields(logrus.Fields{"pool": string(p.role), "endpoint": e.ep.URL,
				"consecutive_failures": n, "eject_for": p.ejectFor.String()}).
				Warn("upstream endpoint ejected after consecutive failures")
			p.emit(HealthEvent{Role: p.role, Endpoint: e.ep.URL, Ejected: true, Failures: n, For: p.ejectFor})
			return
		}
	}
	logrus.WithFields(logrus.Fields{"pool": string(p.role), "endpoint": e.ep.URL}).
		Debug("upstream endpoint failing but kept: it is the last healthy endpoint of its pool")
}
