package front

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/admission"
)

// tlsListener is ln itself for plain HTTP; with Options.TLS it hands out
// *tls.Conn, which framedListener leaves unwrapped (its tracker must never
// see ciphertext) and net/http serves with HTTP/2 when ALPN picks "h2"
// (srv.TLSConfig offers it). Certificates come from the config's callbacks.
func tlsListener(ln net.Listener, srv *http.Server) net.Listener {
	if srv.TLSConfig == nil {
		return ln
	}
	return tls.NewListener(ln, srv.TLSConfig)
}

// separateMetrics: /metrics lives on its own listener, not the main one.
func (s *Server) separateMetrics() bool {
	return s.opts.MetricsListen != "" || s.opts.MetricsListener != nil
}

// serveMetrics starts the metrics listener when one is configured. It
// serves GET /metrics only (JSON 404 and 405 elsewhere, as the main
// listener does), in plain HTTP: scrapers sit inside the cluster, on a port
// the Service does not expose. It keeps serving through the drain, so the
// last scrapes see the shutdown; stop closes it.
func (s *Server) serveMetrics(errLog io.Writer) (stop func(), err error) {
	if !s.separateMetrics() {
		return func() {}, nil
	}
	ln := s.opts.MetricsListener
	if ln == nil {
		if ln, err = net.Listen("tcp", s.opts.MetricsListen); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+PathMetrics, s.metrics())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.router.NotFoundHandler.ServeHTTP(w, r)
	})
	mux.HandleFunc(PathMetrics, func(w http.ResponseWriter, r *http.Request) {
		s.router.MethodNotAllowedHandler.ServeHTTP(w, r)
	})
	srv := &http.Server{
		// Through serveHTTP's wrapper for ids and the probe log level,
		// but not its draining refusal: scrapes go on during the drain.
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveMetricsHTTP(w, r, mux) }),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		ErrorLog:          log.New(errLog, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.WithError(err).Error("metrics listener stopped")
		}
	}()
	s.log.WithField("metrics_listen", ln.Addr().String()).Info("serving /metrics on its own listener")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// serveMetricsHTTP is serveHTTP for the metrics listener: request id, the
// summary line and panics handled alike, no draining refusal and no
// in-flight tracking (a scrape never holds the shutdown).
func (s *Server) serveMetricsHTTP(w http.ResponseWriter, r *http.Request, h http.Handler) {
	x := &exchange{ResponseWriter: w, start: time.Now()}
	x.id, x.rejected = requestID(r.Header)
	if x.rejected >= 0 {
		r.Header.Del("X-Request-Id")
	}
	w.Header().Set("X-Request-Id", x.id)
	defer s.finish(x, r)
	h.ServeHTTP(x, r)
}

// defaultMaxStreams is net/http's default of concurrent HTTP/2 streams per
// connection; minStreams the least celflow sets, so that probes, /metrics
// and the async routes (not admitted) still fit beside admitted requests.
const (
	defaultMaxStreams = 250
	minStreams        = 8
)

// maxConcurrentStreams bounds the streams of one HTTP/2 connection to what
// admission can hold (its in-flight bound plus its queue), between
// minStreams and net/http's default. Streams above it wait in the client
// (a peer must respect SETTINGS_MAX_CONCURRENT_STREAMS; net/http refuses
// the excess streams of one that does not), so a single connection cannot
// start more handlers than admission would ever take. The bound is read
// once, when the server starts: HTTP/2 settings belong to the http.Server,
// and a reload that changes admission keeps them.
func maxConcurrentStreams(l admission.Limits) int {
	hold := l.MaxInFlight
	if hold <= 0 {
		// Per-route bounds only: their sum, unless a route is unbounded.
		for i := 1; i < AdmissionClasses; i++ {
			if i >= len(l.Class) || l.Class[i] <= 0 {
				return defaultMaxStreams
			}
			hold += l.Class[i]
		}
	}
	return max(minStreams, min(defaultMaxStreams, hold+l.MaxQueue))
}
