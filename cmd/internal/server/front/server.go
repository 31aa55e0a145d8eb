package front

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/engine"
)

// Server is celflow's HTTP front. Build it with New and drive it with Run.
type Server struct {
	opts   Options
	log    *logrus.Logger
	router *mux.Router

	ready    atomic.Bool                // /readyz answers 200
	health   atomic.Pointer[func() any] // /health's detail beside "status" (SetHealthDetail); nil: none
	draining atomic.Bool                // the listener is closed: new requests get 503
	track    tracker
	adm      *admission.Controller // in-flight bounds and the wait queue; always counts

	// cur is the live set (runners, body cap, write and shutdown timeouts);
	// requests load it, SetLive and SetRunners replace it under swapMu (so
	// that SetRunners' read-modify-write cannot undo a concurrent SetLive).
	cur    atomic.Pointer[live]
	swapMu sync.Mutex

	// base is the parent of every request context; cancelling it cuts the
	// requests still in flight when the shutdown budget runs out.
	base       context.Context
	cancelBase context.CancelCauseFunc

	limits Limits // header limits (limits.go), fixed for the server's life

	models atomic.Pointer[modelCache] // GET /v1/models (models.go)

	resets   *resetTable // early resets per client address; nil: no policy
	refusals *refusalLog // refusal log lines, aggregated (refusallog.go)
}

// New builds a server; it does not listen yet.
func New(opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	s := &Server{opts: opts, log: opts.Log, limits: opts.Limits.withDefaults()}
	s.cur.Store(newLive(Live{Runners: opts.Runners, MaxBodyBytes: opts.MaxBodyBytes, WriteTimeout: opts.WriteTimeout, StreamWriteTimeout: opts.StreamWriteTimeout,
		DrainDelay: opts.DrainDelay, ShutdownTimeout: opts.ShutdownTimeout, ClientFields: opts.ClientFields, Admission: opts.Admission, Extra: opts.Extra}))
	s.adm = admission.New(AdmissionClasses, opts.Admission.Limits, opts.AdmissionObserver)
	if s.log == nil {
		s.log = logrus.StandardLogger()
	}
	s.resets = newResetTable(opts.Resets, resetTableSize)
	s.refusals = newRefusalLog(s.log, opts.refusalEvery)
	s.base, s.cancelBase = context.WithCancelCause(context.Background())
	s.router = s.routes()
	return s
}

// Handler is the server's root handler (request id, draining, panics, logs
// around the router). Run serves it; tests may mount it on httptest.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// SetLive replaces the live set (a config reload) in one atomic step:
// requests that arrive afterwards get the new runners and limits, requests
// in flight finish on the ones they started with. Safe for concurrent use
// with serving; the server keeps its own copy of l.Runners.
func (s *Server) SetLive(l Live) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	s.cur.Store(newLive(l))
	s.adm.SetLimits(l.Admission.Limits)
}

// SetRunners replaces the runners only, as SetLive does; a route missing
// from runners answers 404 from then on.
func (s *Server) SetRunners(runners map[engine.Route]engine.Runner) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	l := s.cur.Load().export()
	l.Runners = runners
	s.cur.Store(newLive(l))
}

// Live returns a copy of the current live set.
func (s *Server) Live() Live { return s.cur.Load().export() }

// SetReady flips /readyz; Run sets it once the listener is up.
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// Run listens and serves until ctx is done (the caller maps SIGTERM and
// SIGINT to that), then shuts down as docs/configuration.md (Shutdown)
// says:
//  1. /readyz turns 503 at once; requests are still served for DrainDelay;
//  2. the listener closes; a request that still arrives on a kept-alive
//     connection gets 503 shutting_down with Connection: close;
//  3. in-flight requests run on for at most ShutdownTimeout, then their
//     contexts are cancelled (upstream legs included);
//  4. the result is 0 when everything drained, 1 when a request was cut or
//     the server could not start or failed.
func (s *Server) Run(ctx context.Context) int {
	ln := s.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.opts.Listen); err != nil {
			s.log.WithError(err).Error("cannot listen")
			return 1
		}
	}
	// net/http's own complaints (superfluous WriteHeader) go to the log at
	// warn level; failed TLS handshakes and accept errors in aggregate
	// (refusallog.go).
	errLog := s.log.WriterLevel(logrus.WarnLevel)
	defer errLog.Close()
	defer s.refusals.close()
	srvLog := &errorLogWriter{out: errLog, agg: s.refusals, obs: s.opts.Conns}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          log.New(srvLog, "", 0),
		MaxHeaderBytes:    s.limits.hardHeaderBytes(),
		ConnContext:       serverConnContext,
		TLSConfig:         s.opts.TLS, // nil: plain HTTP (listeners.go)
		// Streams per HTTP/2 connection: no more than admission can hold
		// (listeners.go), so one connection cannot queue more handlers
		// than the server would ever admit.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: maxConcurrentStreams(s.opts.Admission.Limits)},
	}
	stopMetrics, err := s.serveMetrics(srvLog)
	if err != nil {
		_ = ln.Close()
		s.log.WithError(err).Error("cannot listen for metrics")
		return 1
	}
	defer stopMetrics()
	served := make(chan error, 1)
	// Plain connections are watched for ambiguous framing (framing.go);
	// TLS connections reach net/http as *tls.Conn (HTTP/2 by ALPN).
	// The guard (connection cap, refused addresses) sits below TLS: a
	// refused connection costs no handshake (connguard.go).
	guard := &guardListener{Listener: ln, max: int64(s.opts.MaxConnections), resets: s.resets, obs: s.opts.Conns, agg: s.refusals}
	framed := framedListener{Listener: tlsListener(guard, srv), maxLine: srv.MaxHeaderBytes + 4096, log: s.log}
	go func() { served <- srv.Serve(framed) }()
	s.ready.Store(true)
	s.log.WithFields(logrus.Fields{"listen": ln.Addr().String(), "tls": s.opts.TLS != nil}).Info("celflow is serving")

	select {
	case <-ctx.Done():
	case err := <-served:
		s.ready.Store(false)
		s.log.WithError(err).Error("server stopped")
		s.cancelBase(errShutdownCut)
		return 1
	}

	s.ready.Store(false)
	// The timeouts of the live set current when the shutdown starts.
	lv := s.cur.Load()
	s.log.WithField("drain_delay", lv.drainDelay.String()).Info("shutdown: readyz is 503, draining")
	if lv.drainDelay > 0 {
		time.Sleep(lv.drainDelay)
	}
	s.draining.Store(true)
	s.adm.Close() // waiters get 503 shutting_down at once
	_ = ln.Close()
	if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.WithError(err).Warn("shutdown: serve loop ended with an error")
	}
	s.log.WithFields(logrus.Fields{"in_flight": s.track.count(), "shutdown_timeout": lv.shutdownTimeout.String()}).
		Info("shutdown: listener closed, waiting for in-flight requests")

	budget := time.NewTimer(lv.shutdownTimeout)
	defer budget.Stop()
	cut := 0
	select {
	case <-s.track.idle():
	case <-budget.C:
		cut = s.track.count()
	}
	// Cancelling the base context cuts what is left (upstream legs
	// included); cancelled handlers unwind quickly.
	s.cancelBase(errShutdownCut)
	if cut > 0 {
		s.log.WithField("cut", cut).Error("shutdown: budget exhausted, in-flight requests cut")
	}
	// Handlers may be done while net/http still flushes their last bytes
	// (the final chunk): Shutdown waits for connections to go idle, where
	// Close would cut them; Close is the fallback after cutGrace.
	finish, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	if srv.Shutdown(finish) != nil {
		_ = srv.Close()
	}
	if cut > 0 {
		return 1
	}
	s.log.Info("shutdown: all requests drained")
	return 0
}

// cutGrace bounds the wait for cancelled handlers after the budget.
const cutGrace = time.Second

// tracker counts requests inside the handler and wakes waiters at zero.
type tracker struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		for _, w := range t.waiters {
			close(w)
		}
		t.waiters = nil
	}
	t.mu.Unlock()
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// idle returns a channel closed when no request is in flight.
func (t *tracker) idle() <-chan struct{} {
	ch := make(chan struct{})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		close(ch)
	} else {
		t.waiters = append(t.waiters, ch)
	}
	return ch
}
