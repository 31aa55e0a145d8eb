package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/asyncbroker"
	"github.com/celflow/celflow/schema"
)

// generation is one loaded, validated serve config with everything built
// from it: the upstream client, the workflow (its nodes hold their own
// transports), the async broker's HTTP binding, and the limits and
// admission settings of its front.Live. Building one touches nothing live
// (load); a reload swaps the front to it in one step (front.Server.SetLive:
// runners, limits, admission and the async binding are one snapshot) or
// closes it unused. The generation it replaces is closed once the requests
// running on it are done (retire).
type generation struct {
	cfg   *config.Config
	up    *upstream.Client
	kv    *kvevents.Hub // the workers' KV events (kvevents.go); nil when off
	wf    *engine.Workflow
	async *asyncbroker.Binding // GET/DELETE /v1/requests/{id}'s header names

	// running counts the requests in this generation's workflow (Serve);
	// idle is signalled when it drops to 0 after retired was set.
	running atomic.Int64
	retired atomic.Bool
	idle    chan struct{}
}

// buildEnv is what every generation's build gets from the process: the
// metrics (whose hooks a new upstream client gets) and the services lent to
// the nodes (the async runtime). It is built once by runServe.
type buildEnv struct {
	m        *metrics.Metrics
	services engine.Services
}

// load is a reload's build step: prepare, the one used by start-up and the
// checks, with the services the process lends every generation (the async
// runtime: async changes need a restart) and without touching anything that
// serves. On failure the generation is nil, what it had built is closed,
// and ds holds every problem, in the text `celflow validate` prints; on
// success ds holds the warnings. reuse, when its upstream section equals
// the new one, lends its client to the new generation: an unchanged
// upstream keeps its connections, passive health and prefix index across a
// reload.
func load(path string, getenv func(string) string, env *buildEnv, reuse *generation) (*generation, schema.Diagnostics) {
	p, ds := prepare(path, getenv, prepareOptions{metrics: env.m, reuse: reuse,
		services: func(*config.Config) (engine.Services, error) { return env.services, nil }})
	if p == nil {
		return nil, ds
	}
	return p.gen, ds
}

// Serve runs a request on the generation's workflow, counted so that the
// generation is closed only after its requests are done (engine.Runner).
func (g *generation) Serve(r *engine.Run) *engine.Report {
	g.running.Add(1)
	defer g.leave()
	return g.wf.Serve(r)
}

func (g *generation) leave() {
	if g.running.Add(-1) == 0 && g.retired.Load() {
		select {
		case g.idle <- struct{}{}:
		default:
		}
	}
}

// drainBound is the longest a retired generation waits for its requests
// before it is closed anyway: the workflow's request_timeout when longer.
// Closing early is safe, only wasteful: a node's Close and the upstream
// client's CloseIdle drop idle connections, and a request still running
// goes on (what it opens afterwards closes at its idle timeout).
const drainBound = time.Minute

// retire waits until no request runs on g (at most drainBound, or the
// workflow's request_timeout when longer, or until stop is closed: the
// server has drained), then closes it. next is the generation that replaced
// it, whose upstream client, when it is g's, stays open.
func (g *generation) retire(next *generation, stop <-chan struct{}) {
	g.retired.Store(true)
	bound := max(drainBound, g.wf.RequestTimeout())
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for g.running.Load() > 0 {
		select {
		case <-g.idle:
		case <-timer.C:
			g.close(next)
			return
		case <-stop:
			g.close(next)
			return
		}
	}
	g.close(next)
}

// close releases what g holds: the workflow's nodes, and its upstream
// client's idle connections unless keep (the generation that serves now,
// or nil) uses the same client.
func (g *generation) close(keep *generation) {
	if err := g.wf.Close(); err != nil {
		logrus.WithError(err).Warn("closing a retired workflow")
	}
	if keep == nil || keep.up != g.up {
		g.up.CloseIdle()
	}
	if g.kv != nil && (keep == nil || keep.kv != g.kv) {
		g.kv.Close()
	}
}

// live is what the front swaps: the generation on each route its workflow
// serves, the server keys that are read per request or at shutdown, and the
// generation itself for the async GET/DELETE handlers (asyncBinding).
func (g *generation) live() front.Live {
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		if g.wf.Serves(rt) {
			runners[rt] = g
		}
	}
	s := g.cfg.Server
	// The schema's enum admits only known names.
	fields, _ := front.ParseClientFields(g.cfg.Trust.ClientFields)
	return front.Live{Runners: runners, MaxBodyBytes: s.MaxBodyBytes(), WriteTimeout: s.WriteTimeout,
		DrainDelay: s.DrainDelay, ShutdownTimeout: s.ShutdownTimeout, ClientFields: fields,
		Admission: admissionOf(g.cfg.Admission), Extra: g, StreamWriteTimeout: s.StreamWriteTimeout}
}

// asyncBinding is the async binding of the generation that was live when
// r arrived (front.LiveExtra), nil (the defaults) when none.
func asyncBinding(r *http.Request) *asyncbroker.Binding {
	if g, ok := front.LiveExtra(r).(*generation); ok {
		return g.async
	}
	return nil
}

func (g *generation) fields() logrus.Fields {
	return logrus.Fields{"workflow": g.wf.Name(), "version": g.wf.Version(), "hash": g.wf.Hash()}
}

// restartKeys are the keys a running process cannot apply: the listener and
// its read timeouts belong to the http.Server, the log format and the
// tracer provider are set up once. A reload that changes one warns and
// keeps the running value. Everything else (upstream, workflow, the body
// cap, write_timeout, drain_delay, shutdown_timeout, log_level) is hot.
var restartKeys = []struct {
	key string
	get func(*config.Config) string
}{
	{"server.listen", func(c *config.Config) string { return c.Server.Listen }},
	{"server.read_header_timeout", func(c *config.Config) string { return c.Server.ReadHeaderTimeout.String() }},
	{"server.read_timeout", func(c *config.Config) string { return c.Server.ReadTimeout.String() }},
	{"telemetry.log_format", func(c *config.Config) string { return c.Telemetry.LogFormat }},
	{"telemetry.tracing.enabled", func(c *config.Config) string { return fmt.Sprint(c.Telemetry.Tracing.Enabled) }},
	{"telemetry.tracing.protocol", func(c *config.Config) string { return c.Telemetry.Tracing.Protocol }},
	{"telemetry.tracing.endpoint", func(c *config.Config) string { return c.Telemetry.Tracing.Endpoint }},
	{"server.tls (on or off)", func(c *config.Config) string { return fmt.Sprint(c.Server.TLS.Enabled()) }},
	{"server.tls.self_signed", func(c *config.Config) string { return fmt.Sprint(c.Server.TLS.SelfSigned) }},
	{"server.tls.reload_interval", func(c *config.Config) string { return c.Server.TLS.ReloadInterval.String() }},
	{"upstream.tls.reload_interval", func(c *config.Config) string { return c.Upstream.TLS.ReloadInterval.String() }},
	{"server.metrics_listen", func(c *config.Config) string { return c.Server.MetricsListen }},
	// The async machinery is built once at start-up (docs/configuration.md#async).
	{"async", func(c *config.Config) string { return fmt.Sprintf("%+v", c.Async) }},
	{"server.max_header_bytes", func(c *config.Config) string { return fmt.Sprint(c.Server.MaxHeaderBytes) }},
	{"server.max_header_count", func(c *config.Config) string { return fmt.Sprint(c.Server.MaxHeaderCount) }},
	// The listener's guard and the reset table are built once (connguard.go, resets.go).
	{"server.max_connections", func(c *config.Config) string { return fmt.Sprint(c.Server.MaxConnections) }},
	{"server.reset_limit", func(c *config.Config) string { return fmt.Sprint(c.Server.ResetLimit) }},
	{"server.reset_window", func(c *config.Config) string { return c.Server.ResetWindow.String() }},
	{"server.reset_cooldown", func(c *config.Config) string { return c.Server.ResetCooldown.String() }},
}

// reloader applies SIGHUP: one reload at a time, from one goroutine.
type reloader struct {
	path      string
	getenv    func(string) string
	verbosity int  // -v: when set, telemetry.log_level is not applied
	formatSet bool // --log-format: telemetry.log_format is not used at all
	log       *logrus.Logger
	m         *metrics.Metrics
	env       *buildEnv // what every generation's build gets
	srv       *front.Server
	boot      *config.Config    // what the process started with (restart-only keys)
	cur       *generation       // what serves now
	tls       *tlsState         // TLS material, reloaded on every SIGHUP
	onSwap    func(*generation) // called after a successful swap (async gate's upstream view)

	retiring sync.WaitGroup // the replaced generations still draining
	stop     chan struct{}  // closed by shutdown: the server has drained
}

// shutdown closes the generation that served last and every replaced one
// still draining, once the server has stopped (no request runs any more)
// and the reload loop has returned.
func (r *reloader) shutdown() {
	close(r.stop)
	r.retiring.Wait()
	r.cur.close(nil)
}

// loop reloads on every signal until ctx is done.
func (r *reloader) loop(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload()
		}
	}
}

// reload re-reads everything as start-up does and builds the whole new
// generation without touching anything that serves. On success it swaps
// the front to it in one step (SetLive: runners, limits, admission and the
// async binding; requests in flight finish on the old generation), then
// points the model list, the metrics' upstream gauges and the async gate
// at it, and retires the old generation (closed once its requests are
// done; a replaced upstream client's idle connections close at once). On
// any error nothing live changed: the new generation's leftovers are
// closed, the old one keeps serving and every diagnostic is logged. Either
// way celflow_config_reloads_total counts it.
func (r *reloader) reload() bool {
	r.log.WithField("config", r.path).Info("config reload: SIGHUP received")
	g, ds := load(r.path, r.getenv, r.env, r.cur)
	r.reloadTLS(g)
	if g == nil {
		for _, d := range ds.Sort() {
			e := r.log.WithField("diagnostic", d.String())
			if d.Severity == schema.Error {
				e.Error("config reload: invalid")
			} else {
				e.Warn("config reload: warning")
			}
		}
		r.log.WithFields(r.cur.fields()).Error("config reload failed: still serving the previous config")
		r.m.ConfigReload(false)
		return false
	}
	for _, d := range ds.Sort() {
		r.log.WithField("diagnostic", d.String()).Warn("config reload: warning")
	}
	for _, k := range restartKeys {
		if k.key == "telemetry.log_format" && r.formatSet {
			continue
		}
		if was, now := k.get(r.boot), k.get(g.cfg); was != now {
			r.log.WithFields(logrus.Fields{"key": k.key, "running": was, "configured": now}).
				Warn("config reload: this key needs a restart; keeping the running value")
		}
	}
	if r.verbosity == 0 {
		if lvl, err := logrus.ParseLevel(g.cfg.Telemetry.LogLevel); err == nil {
			r.log.SetLevel(lvl)
		}
	}
	old := r.cur
	if old.kv != nil && old.kv != g.kv && g.cfg.KVEvents.Bind != "" && g.cfg.KVEvents.Bind == old.cfg.KVEvents.Bind {
		// The new subscriber binds the address the old one holds: the old
		// one goes first (its generation's requests fall back to the
		// prediction index meanwhile).
		old.kv.Close()
	}
	if err := g.startKV(); err != nil {
		r.log.WithError(err).Error("config reload: kv events not started; routing uses the prediction index")
		g.kv.Close()
		g.kv = nil
		_ = g.startKV()
	} else if g.kv != old.kv {
		kvLogStart(r.log, g)
	}
	r.srv.SetLive(g.live())
	r.srv.SetModels(g.models())
	r.srv.SetHealthDetail(g.healthDetail)
	r.m.WatchKVEvents(g.kv)
	r.cur = g
	r.m.WatchUpstream(g.up)
	if r.onSwap != nil {
		r.onSwap(g)
	}
	if old.up != g.up {
		// Legs in flight keep their connections; the pool's idle ones go
		// now rather than at idle_timeout.
		old.up.CloseIdle()
	}
	r.retiring.Add(1)
	go func() {
		defer r.retiring.Done()
		old.retire(g, r.stop)
	}()
	r.log.WithFields(g.fields()).WithField("upstream_replaced", old.up != g.up).Info("config reloaded")
	r.m.ConfigReload(true)
	return true
}
