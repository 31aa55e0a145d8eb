package asyncbroker

import (
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/connectors/async"
)

// Settings are the serve config's async keys the HTTP side needs.
type Settings struct {
	Queues, Tiers  []string      // what routes may name (nil: not checked)
	WaitDefault    time.Duration // wait mode's deadline without the header [60s]
	WaitMax        time.Duration // longest wait-mode deadline [1h]
	EnqueueDefault time.Duration // enqueue mode's deadline without the header [1h]
	WaitCap        time.Duration // longest hold before a 202 (0: the deadline) [0]
	PollInterval   time.Duration // wait-mode polling fallback, and Retry-After on 202s [1s]
	MaxInlineBytes int           // largest body queued (413 above) [4 MiB]
}

func (s *Settings) defaults() {
	if s.WaitDefault <= 0 {
		s.WaitDefault = 60 * time.Second
	}
	if s.WaitMax <= 0 {
		s.WaitMax = time.Hour
	}
	if s.EnqueueDefault <= 0 {
		s.EnqueueDefault = time.Hour
	}
	if s.PollInterval <= 0 {
		s.PollInterval = time.Second
	}
	if s.MaxInlineBytes <= 0 {
		s.MaxInlineBytes = 4 << 20
	}
}

// Runtime is the process's async machinery: the back end, its settings,
// metrics, and (for GET/DELETE on the listener) the header names of the
// live workflow's async-broker node. cmd/celflow builds it from the serve
// config's `async` object and installs it before loading the workflow;
// nodes built afterwards use it. Without one (validate, or no async
// config), queued modes answer 503 ENQUEUE_FAILED.
type Runtime struct {
	Backend  async.Backend
	Settings Settings
	Metrics  *Metrics // nil: none
	Log      *logrus.Logger

	bound atomic.Pointer[config] // the live workflow's node params (headers)
}

// NewRuntime fills the settings' defaults.
func NewRuntime(b async.Backend, s Settings, m *Metrics, log *logrus.Logger) *Runtime {
	s.defaults()
	if log == nil {
		log = logrus.StandardLogger()
	}
	return &Runtime{Backend: b, Settings: s, Metrics: m, Log: log}
}

var installed atomic.Pointer[Runtime]

// Install makes rt the runtime of nodes built from now on (nil removes it).
func Install(rt *Runtime) { installed.Store(rt) }

// Installed is the current runtime, nil when none.
func Installed() *Runtime { return installed.Load() }

// headers is the header config GET/DELETE read: the bound node's, else the
// defaults.
func (rt *Runtime) headers() *config {
	if c := rt.bound.Load(); c != nil {
		return c
	}
	c, _ := parseParams(nil, nil, nil)
	rt.bound.CompareAndSwap(nil, c)
	return rt.bound.Load()
}
