package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/config"
	"github.com/celflow/celflow/engine/front"
	"github.com/celflow/celflow/engine/metrics"
	"github.com/celflow/celflow/engine/upstream"
	"github.com/celflow/celflow/schema"
)

// generation is one loaded, validated serve config with what was built
// from it. A reload replaces it as a whole or not at all.
type generation struct {
	cfg *config.Config
	up  *upstream.Client
	wf  *engine.Workflow
}

// load reads the config file (with getenv's CELFLOW_* overrides), builds
// the upstream client and loads the workflow, exactly as start-up does. On
// failure the generation is nil and ds holds every problem, in the text
// `celflow validate` prints; on success ds holds the warnings. reuse, when
// its upstream section equals the new one, lends its client to the new
// generation: an unchanged upstream keeps its connections, passive health
// and prefix index across a reload.
func load(path string, getenv func(string) string, m *metrics.Metrics, reuse *generation) (*generation, schema.Diagnostics) {
	cfg, ds := config.LoadFile(path, getenv)
	if cfg == nil {
		return nil, ds
	}
	warn := ds
	var up *upstream.Client
	if reuse != nil && sameUpstream(reuse.cfg.Upstream, cfg.Upstream) {
		up = reuse.up
	} else {
		if up, ds = cfg.NewUpstream(); up == nil {
			return nil, ds
		}
		up.OnLeg = m.UpstreamHook()
		up.SetHealthHook(m.HealthHook())
	}
	opts := engine.LoadOptions{Upstream: up, Pools: up, WriteTimeout: cfg.Server.WriteTimeout}
	var wf *engine.Workflow
	if cfg.Workflow.Inline != nil {
		wf, ds = engine.LoadDoc(cfg.Workflow.Inline, opts)
	} else {
		wf, ds = engine.LoadFile(cfg.Workflow.Path, opts)
	}
	if wf == nil {
		return nil, ds
	}
	return &generation{cfg: cfg, up: up, wf: wf}, append(warn, ds...)
}

// live is what the front swaps: the workflow on each route it serves, and
// the server keys that are read per request or at shutdown.
func (g *generation) live() front.Live {
	runners := map[engine.Route]engine.Runner{}
	for _, rt := range engine.Routes {
		if g.wf.Serves(rt) {
			runners[rt] = g.wf
		}
	}
	s := g.cfg.Server
	// The schema's enum admits only known names.
	fields, _ := front.ParseClientFields(g.cfg.Trust.ClientFields)
	return front.Live{Runners: runners, MaxBodyBytes: s.MaxBodyBytes(), WriteTimeout: s.WriteTimeout,
		DrainDelay: s.DrainDelay, ShutdownTimeout: s.ShutdownTimeout, ClientFields: fields,
		Admission: admissionOf(g.cfg.Admission)}
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
}

// reloader applies SIGHUP: one reload at a time, from one goroutine.
type reloader struct {
	path      string
	getenv    func(string) string
	verbosity int  // -v: when set, telemetry.log_level is not applied
	formatSet bool // --log-format: telemetry.log_format is not used at all
	log       *logrus.Logger
	m         *metrics.Metrics
	srv       *front.Server
	boot      *config.Config    // what the process started with (restart-only keys)
	cur       *generation       // what serves now
	tls       *tlsState         // TLS material, reloaded on every SIGHUP
	onSwap    func(*generation) // called after a successful swap (async gate's upstream view)
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

// reload re-reads everything as start-up does. On success the new runners
// and limits serve every request that arrives afterwards (requests in
// flight finish on the old ones), a replaced upstream client's idle
// connections are closed, and the new workflow is logged; on any error the
// old config keeps serving and every diagnostic is logged. Either way
// celflow_config_reloads_total counts it.
func (r *reloader) reload() bool {
	r.log.WithField("config", r.path).Info("config reload: SIGHUP received")
	g, ds := load(r.path, r.getenv, r.m, r.cur)
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
	r.srv.SetLive(g.live())
	r.srv.SetModels(g.models())
	old := r.cur
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
	r.log.WithFields(g.fields()).WithField("upstream_replaced", old.up != g.up).Info("config reloaded")
	r.m.ConfigReload(true)
	return true
}
