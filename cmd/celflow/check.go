package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/telemetry"
	"github.com/celflow/celflow/internal/tlsfiles"
	"github.com/celflow/celflow/nodes/asyncbroker"
	"github.com/celflow/celflow/schema"
)

// prepared is everything serve builds from its config before it listens:
// the generation (the config with its compiled admission.priority and
// async settings, the upstream client, the workflow) and the listener's
// TLS material. Serve then only opens listeners and runs.
type prepared struct {
	gen       *generation
	serverTLS *tlsfiles.Server // nil: plain HTTP, or not asked for (reload)
}

// prepareOptions say how the callers of prepare differ: in what they keep
// or install, never in what is checked.
type prepareOptions struct {
	// metrics, when set, hooks a new upstream client to it (serve).
	metrics *metrics.Metrics
	// reuse lends its upstream client when the upstream section is
	// unchanged (reload: connections, health and prefix index survive).
	reuse *generation
	// serverTLS loads server.tls (start-up and the checks; a reload
	// applies it to the running listener instead).
	serverTLS bool
	// services gives the services lent to the workflow's nodes (the async
	// runtime the async-broker node takes at build time), from a config
	// whose async section is valid: serve builds the real runtime at
	// start-up, a reload lends the running one (async changes need a
	// restart), the checks one with no back end.
	services func(*config.Config) (engine.Services, error)
}

// prepare is the one build step of a serve config, shared by `celflow
// validate --config`, `celflow serve --check` and `celflow serve` (start-up
// and SIGHUP reload): it reads the file once (with getenv's CELFLOW_*
// overrides), decodes and checks it, builds the upstream client, checks the
// async settings and the listener's TLS files, and loads the workflow
// against the real pools. It goes on past a failing part, so ds holds
// every problem at once; the result is nil when any is an error, and on
// success ds holds the warnings.
func prepare(path string, getenv func(string) string, o prepareOptions) (*prepared, schema.Diagnostics) {
	cfg, ds := config.Read(path, getenv)
	if cfg == nil {
		return nil, ds
	}
	var up *upstream.Client
	if cfg.Clean("upstream") {
		if o.reuse != nil && sameUpstream(o.reuse.cfg.Upstream, cfg.Upstream) {
			up = o.reuse.up
		} else {
			var uds schema.Diagnostics
			up, uds = cfg.NewUpstream()
			ds = append(ds, uds...)
			if up != nil && o.metrics != nil {
				up.OnLeg = o.metrics.UpstreamHook()
				up.SetHealthHook(o.metrics.HealthHook())
			}
		}
	}
	var kv *kvevents.Hub
	if up != nil {
		var kds schema.Diagnostics
		kv, kds = buildKV(cfg, o.reuse, o.reuse != nil && up == o.reuse.up)
		ds = append(ds, kds...)
	}
	asyncOK := cfg.Clean("async")
	if asyncOK && cfg.Async.Enabled() {
		if _, err := redis.ParseURL(cfg.Async.RedisURL); err != nil {
			ds = append(ds, cfg.Diag("/async/redis_url", schema.RuleAsync, err.Error()))
			asyncOK = false
		}
	}
	if cfg.Clean("telemetry") {
		// What telemetry.Setup refuses at start-up (the endpoint, the
		// OTEL_* variables), checked without installing a tracer.
		if err := telemetry.Check(cfg.Telemetry.Tracing); err != nil {
			ds = append(ds, cfg.Diag("/telemetry/tracing", "", err.Error()))
		}
	}
	var srvTLS *tlsfiles.Server
	if o.serverTLS && cfg.Clean("server") && cfg.Server.TLS.Enabled() {
		s, err := tlsfiles.NewServer(cfg.Server.TLS, tlsHosts(cfg))
		if err != nil {
			ds = append(ds, cfg.Diag("/server/tls", schema.RuleTLS, err.Error()))
		}
		srvTLS = s
	}
	var wf *engine.Workflow
	if cfg.Clean("workflow") {
		var services engine.Services
		if asyncOK && o.services != nil {
			var err error
			if services, err = o.services(cfg); err != nil {
				ds = append(ds, cfg.Diag("/async", schema.RuleAsync, err.Error()))
			}
		}
		// Without a client (the upstream section has errors) the workflow
		// is checked validate-only, so its own problems are reported too.
		opts := engine.LoadOptions{Upstream: up, Services: services, WriteTimeout: cfg.Server.WriteTimeout, Entry: front.Entry}
		var wds schema.Diagnostics
		if cfg.Workflow.Inline != nil {
			wf, wds = engine.LoadDoc(cfg.Workflow.Inline, opts)
		} else {
			wf, wds = engine.LoadFile(cfg.Workflow.Path, opts)
		}
		ds = append(ds, wds...)
	}
	if ds.HasErrors() || wf == nil || up == nil {
		// What this build made is closed (a failed workflow load closed
		// its own nodes); a client lent by the live generation is not.
		wf.Close()
		if up != nil && (o.reuse == nil || up != o.reuse.up) {
			up.CloseIdle()
		}
		if kv != nil && (o.reuse == nil || kv != o.reuse.kv) {
			kv.Close()
		}
		return nil, ds.Sort()
	}
	g := &generation{cfg: cfg, up: up, kv: kv, wf: wf, async: asyncbroker.BindingOf(wf), idle: make(chan struct{}, 1)}
	return &prepared{gen: g, serverTLS: srvTLS}, ds.Sort()
}

// checkServices are the services of the checks: the async-broker node is
// built against the configured queues and tiers, as serve builds it, with
// a runtime that has no back end (nothing is sent).
func checkServices(cfg *config.Config) (engine.Services, error) {
	if !cfg.Async.Enabled() {
		return nil, nil
	}
	return engine.Services{asyncbroker.ServiceName: asyncbroker.NewRuntime(nil, asyncSettings(cfg.Async), nil, nil)}, nil
}

// tlsHosts are the names a self-signed listener certificate carries:
// localhost, the loopback addresses, the host name and the listen host.
func tlsHosts(cfg *config.Config) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	if h, _, err := net.SplitHostPort(cfg.Server.Listen); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return hosts
}

// checkServe is what `celflow validate --config FILE` and `celflow serve
// --check` run: prepare, exactly as serve runs it, plus what only a check
// adds: any CELFLOW_* variable that names no key is an error (a warning
// for serve), and tests runs the workflow's tests: block. The summary
// describes a clean load.
func checkServe(path string, getenv func(string) string, environ []string, tests bool) (schema.Diagnostics, string) {
	p, ds := prepare(path, getenv, prepareOptions{serverTLS: true, services: checkServices})
	ds = append(ds, config.UnknownEnv(environ, schema.Error)...)
	if p == nil {
		return ds.Sort(), ""
	}
	defer p.gen.close(nil)
	wf, up := p.gen.wf, p.gen.up
	if tests {
		ds = append(ds, wf.RunTests(context.Background())...)
	}
	mode := "gateway"
	if up.Direct() {
		mode = "direct"
	}
	return ds.Sort(), fmt.Sprintf("workflow %s, %d nodes, %d tests, upstream %s", wf.Name(), len(wf.Nodes()), wf.TestCount(), mode)
}

// environ is the process environment as getenv sees it: the entries of
// os.Environ whose name getenv answers (all of them for os.Getenv; tests
// inject a map and see only what both hold).
func environ(getenv func(string) string) []string {
	if getenv == nil {
		return nil
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if getenv(name) != "" {
			out = append(out, kv)
		}
	}
	return out
}
