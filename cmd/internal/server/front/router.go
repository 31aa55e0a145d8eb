package front

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/celflow/celflow/engine"
)

// Probe and metrics paths (docs/configuration.md, Endpoints served).
const (
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	PathMetrics = "/metrics"
)

// routes builds the router. Anything it does not know is a JSON 404, a
// known path with the wrong method a JSON 405 (probes and /metrics
// included); a trailing slash is another path, so 404. Paths are matched
// as sent (SkipClean): "//v1/completions" is a 404, not a redirect.
func (s *Server) routes() *mux.Router {
	r := mux.NewRouter()
	r.SkipClean(true)
	for _, rt := range engine.Routes {
		r.Handle(rt.Path(), s.inference(rt)).Methods(http.MethodPost)
	}
	r.HandleFunc(PathHealthz, s.healthz).Methods(http.MethodGet)
	r.HandleFunc(PathReadyz, s.readyz).Methods(http.MethodGet)
	if !s.separateMetrics() {
		r.Handle(PathMetrics, s.metrics()).Methods(http.MethodGet)
	}
	r.HandleFunc(PathHealth, s.healthz).Methods(http.MethodGet) // vLLM's liveness path
	r.HandleFunc(PathModels, s.listModels).Methods(http.MethodGet)
	for _, x := range s.opts.Routes {
		r.Handle(x.Path, s.extraRoute(x.Handler)).Methods(x.Methods...)
	}
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, engine.Errorf(engine.KindNotFound, "no route for %s %s", r.Method, cutPath(r.URL.EscapedPath())))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, engine.Errorf(engine.KindMethodNotAllowed, "method %s is not allowed on %s", r.Method, r.URL.Path))
	})
	return r
}

// liveExtraKey carries Live.Extra in an extra route's request context.
type liveExtraKey struct{}

// extraRoute hands h the live set's Extra current at the request's arrival
// (LiveExtra), read from the same snapshot a reload swaps in one step.
func (s *Server) extraRoute(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if x := s.cur.Load().extra; x != nil {
			r = r.WithContext(context.WithValue(r.Context(), liveExtraKey{}, x))
		}
		h.ServeHTTP(w, r)
	})
}

// LiveExtra is the Live.Extra of the live set current when an extra route's
// request arrived (nil when none).
func LiveExtra(r *http.Request) any { return r.Context().Value(liveExtraKey{}) }

// cutPath keeps an unknown path short in error messages and logs.
func cutPath(p string) string { return engine.CutUTF8(p, 256) }

var okBody = []byte(`{"status":"ok"}`)

// healthz is 200 while the process lives, draining included.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	probe(w)
	w.Header().Set("Content-Type", "application/json")
	if f := s.health.Load(); f != nil && r.URL.Path == PathHealth {
		if d := (*f)(); d != nil {
			// Liveness stays 200: the detail reports parts that degrade
			// (and fall back), not a process to restart.
			b, err := json.Marshal(map[string]any{"status": "ok", "detail": d})
			if err == nil {
				_, _ = w.Write(b)
				return
			}
		}
	}
	_, _ = w.Write(okBody)
}

// SetHealthDetail makes GET /health answer {"status":"ok","detail":f()}
// (when f returns non-nil) instead of {"status":"ok"}; /healthz is
// unchanged. f must be cheap and hold no client-controlled data or internal
// address: /health is served on the client listener. nil removes it.
func (s *Server) SetHealthDetail(f func() any) {
	if f == nil {
		s.health.Store(nil)
		return
	}
	s.health.Store(&f)
}

// readyz is 200 once serving and 503 from the start of the shutdown.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	probe(w)
	if !s.ready.Load() {
		s.fail(w, engine.Errorf(engine.KindShuttingDown, "not ready"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(okBody)
}

func (s *Server) metrics() http.Handler {
	if s.opts.Metrics != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			probe(w)
			s.opts.Metrics.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		probe(w)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.WriteHeader(http.StatusOK)
	})
}

// probe marks the exchange as a probe (its summary line is debug level).
func probe(w http.ResponseWriter) {
	if x, ok := w.(*exchange); ok {
		x.probe = true
	}
}

// fail writes celflow's own JSON error reply (docs/errors.md) unless the
// reply has started, bounding the write by the live WriteTimeout. A KindCancelled
// error writes nothing: the client is gone.
func (s *Server) fail(w http.ResponseWriter, e *engine.Error) {
	x, _ := w.(*exchange)
	if x != nil {
		x.err = e
		if x.wroteHeader {
			x.abort = true
			return
		}
	}
	if e.Kind == engine.KindCancelled {
		return
	}
	if wt := s.cur.Load().writeTimeout; wt > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wt))
	}
	id := w.Header().Get("X-Request-Id")
	if x != nil {
		id = x.id
	}
	engine.WriteError(w, e, id)
}
