package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/cmd/internal/server/metrics"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/telemetry"
	"github.com/celflow/celflow/schema"
)

// cmdServe: `celflow serve --config FILE [-v N] [--log-format json|text]`.
// Exit 0 after a complete drain, 1 when the config or workflow does not
// load (printing the same diagnostics as validate), when the server cannot
// start, or when the shutdown budget cut a request; 2 on usage errors.
// SIGHUP reloads the config (reload.go).
func cmdServe(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Subscribed before loading: a SIGHUP during start-up waits for the
	// server instead of killing the process (SIGHUP's default action).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return runServe(ctx, args, os.Stderr, os.Getenv, hup)
}

// runServe is cmdServe with its context (cancelled = shutdown), output,
// environment and reload signals (nil: none) injected, for tests. Reloads
// read the same getenv as start-up.
func runServe(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string, hup <-chan os.Signal) int {
	fs := flag.NewFlagSet("celflow serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "the serve config file (YAML; see docs/configuration.md)")
	verbosity := fs.Int("v", 0, "log verbosity: 1 is debug, 2 is trace (overrides telemetry.log_level)")
	logFormat := fs.String("log-format", "", "json or text (overrides telemetry.log_format)")
	check := fs.Bool("check", false, "load the config, its environment and its workflow as serve would, print every problem, and exit (0 valid, 1 invalid) without serving")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if *cfgPath == "" || len(rest) > 0 {
		fmt.Fprintln(stderr, "usage: celflow serve --config FILE [--check] [-v N] [--log-format json|text]")
		return 2
	}
	if *check {
		ds, summary := checkServe(*cfgPath, getenv, environ(getenv), true)
		fmt.Fprint(stderr, ds.Pretty())
		if ds.HasErrors() {
			return 1
		}
		fmt.Fprintf(stderr, "%s: ok (%s)\n", *cfgPath, summary)
		return 0
	}

	m := metrics.New()
	// The one build step validate and --check run too (check.go). The async
	// runtime is built from the config's async section before the workflow
	// loads: the async-broker node takes it from its build context.
	var as *asyncSetup
	defer func() { as.close() }() // as is set by prepare's services step
	p, ds := prepare(*cfgPath, getenv, prepareOptions{metrics: m, serverTLS: true,
		services: func(c *config.Config) (engine.Services, error) {
			var err error
			as, err = newAsync(c.Async, m.Registry(), logrus.StandardLogger())
			return as.services(), err
		}})
	if p == nil {
		return refuse(stderr, ds)
	}
	g := p.gen
	env := &buildEnv{m: m, services: as.services()}
	// Until the reloader owns it (rl.shutdown closes it), a start-up that
	// gives up closes the generation here.
	owned := false
	defer func() {
		if !owned {
			g.close(nil)
		}
	}()
	m.WatchUpstream(g.up)
	cfg := g.cfg
	level, err := logLevel(cfg.Telemetry.LogLevel, *verbosity)
	if err != nil {
		fmt.Fprintf(stderr, "celflow serve: %v\n", err)
		return 2
	}
	format := cfg.Telemetry.LogFormat
	if *logFormat != "" {
		format = *logFormat
	}
	// Nodes log through logrus's standard logger: configure that one.
	log := logrus.StandardLogger()
	if err := front.ConfigureLogger(log, stderr, format, level); err != nil {
		fmt.Fprintf(stderr, "celflow serve: %v\n", err)
		return 2
	}

	// A CELFLOW_* variable that names no key is a warning here (a fleet does
	// not refuse to start over it) and an error under --check and
	// `validate --config`, where CI catches it.
	ds = append(ds, config.UnknownEnv(environ(getenv), schema.Warning)...)
	fmt.Fprint(stderr, ds.Pretty()) // warnings, printed as validate prints them

	tracing := cfg.Telemetry.Tracing
	tracing.ServiceVersion = celflowVersion() // the resource's service.version: the build's stamp
	shutdownTracing, err := telemetry.Setup(ctx, tracing)
	if err != nil {
		log.WithError(err).Error("tracing")
		return 1
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(c); err != nil {
			log.WithError(err).Warn("tracing: flush at exit")
		}
	}()

	tlsSt := newTLSState(p.serverTLS, cfg, log, m)
	tlsSt.setUpstream(g.up)

	lv := g.live()
	// Request ids are minted per request: draw their randomness in batches.
	// Safe here, before anything serves (the pool is not switched concurrently).
	uuid.EnableRandPool()
	s := cfg.Server
	opts := front.Options{
		Listen:            s.Listen,
		Runners:           lv.Runners,
		Metrics:           m.Handler(),
		Observe:           m.Observe,
		InFlight:          m.InFlight,
		Log:               log,
		MaxBodyBytes:      lv.MaxBodyBytes,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		ReadTimeout:       s.ReadTimeout,
		WriteTimeout:      lv.WriteTimeout,
		DrainDelay:        lv.DrainDelay,
		ShutdownTimeout:   lv.ShutdownTimeout,
		MetricsListen:     s.MetricsListen,
		Routes:            as.routes(),
		ClientFields:      lv.ClientFields,
		Limits:            front.Limits{MaxHeaderBytes: s.MaxHeaderBytes, MaxHeaderCount: s.MaxHeaderCount},
		Admission:         lv.Admission,
		AdmissionObserver: m.AdmissionObserver(),
		Background:        dispatchedRequest,
		Extra:             lv.Extra,
		MaxConnections:    s.MaxConnections,
		Resets:            front.ResetPolicy{Limit: s.ResetLimit, Window: s.ResetWindow, Cooldown: s.ResetCooldown},
		Conns:             m.ConnObserver(),
	}
	if opts.MaxConnections == 0 { // derived from the fd limit (docs/operations.md)
		opts.MaxConnections = front.DefaultMaxConnections()
	}
	opts.StreamWriteTimeout = lv.StreamWriteTimeout // issue 17 (kept apart from the aligned literal)
	tlsSt.options(&opts)
	srv := front.New(opts)
	srv.SetModels(g.models())
	if err := g.startKV(); err != nil {
		log.WithError(err).Error("kv events")
		return 1
	}
	kvLogStart(log, g)
	srv.SetHealthDetail(g.healthDetail)
	m.WatchKVEvents(g.kv)
	m.WatchAdmission(srv.Admission())
	log.WithFields(g.fields()).Info("workflow loaded")

	// Reloads run on their own goroutine, one at a time, and stop when the
	// shutdown starts.
	rl := &reloader{path: *cfgPath, getenv: getenv, verbosity: *verbosity,
		formatSet: *logFormat != "", log: log, m: m, env: env, srv: srv, boot: cfg, cur: g, tls: tlsSt,
		stop: make(chan struct{})}
	owned = true
	if as != nil {
		as.up.Store(g.up)
		rl.onSwap = func(ng *generation) { as.up.Store(ng.up) }
	}
	reloadCtx, stopReloads := context.WithCancel(ctx)
	tlsSt.watch(reloadCtx, cfg)
	reloads := make(chan struct{})
	go func() {
		defer close(reloads)
		rl.loop(reloadCtx, hup)
	}()
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		as.dispatch(ctx, srv, lv.ShutdownTimeout, log)
	}()
	code := srv.Run(ctx)
	stopReloads()
	<-reloads
	<-dispatched
	rl.shutdown() // nothing runs any more: close every generation
	return code
}

// refuse prints load diagnostics exactly as `celflow validate` does, and
// fails.
func refuse(stderr io.Writer, ds schema.Diagnostics) int {
	fmt.Fprint(stderr, ds.Sort().Pretty())
	return 1
}

// logLevel is telemetry.log_level unless -v raises it.
func logLevel(cfg string, v int) (logrus.Level, error) {
	switch {
	case v >= 2:
		return logrus.TraceLevel, nil
	case v == 1:
		return logrus.DebugLevel, nil
	case v < 0:
		return 0, fmt.Errorf("-v %d: want 0, 1 or 2", v)
	}
	return logrus.ParseLevel(cfg)
}
