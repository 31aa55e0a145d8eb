// Package front is celflow's HTTP server: the OpenAI-compatible routes, the
// probes, request ids, body intake, error replies, per-request logs and the
// graceful shutdown (docs/configuration.md, Shutdown). It parses a request once (the body's
// top-level index, model and stream) and hands a workflow an engine.Run;
// everything past that is the workflow's business.
package front

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/engine"
)

// DefaultStreamWriteTimeout is server.stream_write_timeout's default:
// tens of seconds, as nginx's send_timeout (60s).
const DefaultStreamWriteTimeout = 30 * time.Second

// MiB is the unit of max_request_body_size.
const MiB = 1 << 20

// DefaultMaxBodyBytes is the default body cap (64 MiB,
// server.max_request_body_size).
const DefaultMaxBodyBytes = 64 * MiB

// Options configure a Server. Durations are used as given: zero means
// "none" (no read timeout, no drain delay, no shutdown budget), so callers
// apply the documented defaults (cmd/internal/server/config does).
type Options struct {
	// Listen is the address to listen on when Listener is nil.
	Listen string
	// Listener, when set, is used as is (tests pass 127.0.0.1:0).
	Listener net.Listener

	// Runners maps each client route to the workflow that serves it. A route
	// with no runner answers 404 not_found. Runners, MaxBodyBytes,
	// WriteTimeout, DrainDelay and ShutdownTimeout are the server's first
	// Live set; SetLive and SetRunners replace them while it runs.
	Runners map[engine.Route]engine.Runner

	// Metrics serves GET /metrics; nil serves an empty 200 text reply.
	Metrics http.Handler
	// Observe, when set, is called once per finished request other than
	// probes and /metrics (metrics). It must not retain the Observation.
	Observe func(*Observation)
	// InFlight, when set, is called as an inference request starts; the
	// function it returns is called when it ends (an in-flight gauge).
	InFlight func() (done func())

	// Routes are extra handlers on the listener (GET/DELETE
	// /v1/requests/{id} of the async broker), served behind the same request
	// id, draining, panic and log wrapper as the inference routes. Path is a
	// gorilla/mux template; a path already routed is a programming error.
	Routes []Route

	// Log receives every log line; nil uses logrus.StandardLogger().
	Log *logrus.Logger

	// MaxBodyBytes caps a request body (413 above it); 0 means 64 MiB.
	MaxBodyBytes int64

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds celflow's own JSON replies from the moment they
	// are written. It is NOT a server write timeout: relaying nodes apply it
	// to non-streaming replies themselves, and streams are exempt (docs/protocol.md, Timeouts).
	WriteTimeout time.Duration
	// StreamWriteTimeout bounds each write of a streamed reply (a 2xx
	// text/event-stream, or a 2xx to a request with "stream": true): a write
	// or flush that makes no progress for this long ends the stream as the
	// client's failure and releases its admission slot (docs/protocol.md,
	// Timeouts). 0 means DefaultStreamWriteTimeout: a stream is never
	// exempt from it. Part of the first Live set.
	StreamWriteTimeout time.Duration

	// DrainDelay: after shutdown starts, how long /readyz is 503 while new
	// requests are still served. ShutdownTimeout: the budget for in-flight
	// requests after the listener closes.
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration

	// ClientFields are the celflow-owned body fields clients may send
	// (trust.client_fields); zero trusts none. Part of the first Live set.
	ClientFields ClientFields
	// Limits are the front's header and framing limits (server.max_header_*);
	// zero values take the defaults (Envoy's: 60 KiB, 100 headers).
	Limits Limits

	// TLS, when set, serves TLS on the listener with this config (HTTP/2
	// offered by ALPN); nil serves plain HTTP. tlsfiles.Server.Config
	// builds one whose certificates reload without a restart.
	TLS *tls.Config
	// MetricsListen, when set, serves GET /metrics on its own plain-HTTP
	// listener at this address, and the main listener answers 404 there.
	// MetricsListener, when set, is used instead (tests).
	MetricsListen   string
	MetricsListener net.Listener

	// Admission is the first Live set's admission (bounds, priority); the
	// zero value bounds nothing. AdmissionObserver, when set, receives every
	// admission decision (metrics).
	Admission         Admission
	AdmissionObserver admission.Observer
	// Extra is the first Live set's Extra.
	Extra any
	// Background, when set, marks requests that must never wait in the
	// admission queue (the async dispatcher's): they are admitted only
	// into spare capacity, else refused at once with 429 overloaded.
	Background func(*http.Request) bool
	// MaxConnections caps the open client connections; above it a new
	// connection is closed at accept (connguard.go). 0: no cap (the config
	// derives one from the fd limit: DefaultMaxConnections).
	MaxConnections int
	// Resets is the early-reset policy (resets.go); the zero value is off.
	Resets ResetPolicy
	// Conns, when set, receives connection-level events (metrics).
	Conns ConnObserver

	// refusalEvery is the refusal log's interval; 0: refusalInterval
	// (tests shorten it).
	refusalEvery time.Duration
}

// Route is one extra handler (Options.Routes).
type Route struct {
	Path    string   // mux template, e.g. /v1/requests/{id}
	Methods []string // e.g. GET, DELETE
	Handler http.Handler
}

// PathVar returns a path variable of an extra route's request ("" when
// none): handlers need not import gorilla/mux.
func PathVar(r *http.Request, name string) string { return mux.Vars(r)[name] }

// Live is the part of a server's configuration that can change while it
// runs (a config reload). The server keeps it as one immutable snapshot
// behind an atomic pointer: a request reads its runner and body cap from
// the snapshot current at its arrival and keeps them to its end, so a swap
// never changes the workflow under a request in flight. WriteTimeout is read
// when an error reply is written, DrainDelay and ShutdownTimeout when the
// shutdown starts. Zero values mean what they mean in Options.
type Live struct {
	Runners         map[engine.Route]engine.Runner
	MaxBodyBytes    int64
	WriteTimeout    time.Duration
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	ClientFields    ClientFields
	Admission       Admission
	// Extra is the caller's own per-generation value, swapped with the
	// rest: the extra routes (Options.Routes) read the one current at the
	// request's arrival with LiveExtra (the async broker's tenant header
	// names belong to the workflow of the generation, not to the process).
	Extra any
	// StreamWriteTimeout is read when a request arrives (0: the default,
	// DefaultStreamWriteTimeout).
	StreamWriteTimeout time.Duration
}

// live is the stored form of Live: its own copy of the runner map, so that
// a caller mutating its map afterwards cannot reach a request in flight.
type live struct {
	runners         map[engine.Route]engine.Runner
	maxBody         int64
	writeTimeout    time.Duration
	streamWT        time.Duration
	drainDelay      time.Duration
	shutdownTimeout time.Duration
	clientFields    ClientFields
	adm             Admission
	extra           any
}

func newLive(l Live) *live {
	rs := make(map[engine.Route]engine.Runner, len(l.Runners))
	for rt, r := range l.Runners {
		if r != nil {
			rs[rt] = r
		}
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.StreamWriteTimeout <= 0 {
		l.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	l.Admission.Limits.Class = append([]int(nil), l.Admission.Limits.Class...)
	return &live{runners: rs, maxBody: l.MaxBodyBytes, writeTimeout: l.WriteTimeout, streamWT: l.StreamWriteTimeout,
		drainDelay: l.DrainDelay, shutdownTimeout: l.ShutdownTimeout, clientFields: l.ClientFields, adm: l.Admission, extra: l.Extra}
}

func (l *live) export() Live {
	rs := make(map[engine.Route]engine.Runner, len(l.runners))
	for rt, r := range l.runners {
		rs[rt] = r
	}
	adm := l.adm
	adm.Limits.Class = append([]int(nil), adm.Limits.Class...)
	return Live{Runners: rs, MaxBodyBytes: l.maxBody, WriteTimeout: l.writeTimeout, StreamWriteTimeout: l.streamWT,
		DrainDelay: l.drainDelay, ShutdownTimeout: l.shutdownTimeout, ClientFields: l.clientFields, Admission: adm, Extra: l.extra}
}

// Observation is what the front knows about one finished request.
type Observation struct {
	// Route is the client route, 0 for a request no route matched (404,
	// 405 on other paths): count those under a fixed label, never the path.
	Route    engine.Route
	Status   int // the status sent; 499 when the client left before any reply
	Duration time.Duration
	// Report and Run are the workflow's, nil when the request was refused
	// before a run (413, 400, 503 draining).
	Report *engine.Report
	Run    *engine.Run
	// FirstByte is the time from arrival to the first body byte written
	// (0 when none was); Stream: the client asked for a stream or the reply
	// is text/event-stream.
	FirstByte time.Duration
	Stream    bool
	// Partial: the reply had started and was ended abnormally.
	Partial bool
}
