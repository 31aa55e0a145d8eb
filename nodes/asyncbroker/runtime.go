package asyncbroker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/connectors/async"
	"github.com/celflow/celflow/engine"
)

// Settings are the serve config's async keys the HTTP side needs.
type Settings struct {
	Queues, Tiers  []string      // what routes may name (nil: not checked)
	WaitDefault    time.Duration // wait mode's deadline without the header [60s]
	WaitMax        time.Duration // longest wait-mode deadline [1h]
	EnqueueDefault time.Duration // enqueue mode's deadline without the header [1h]
	WaitCap        time.Duration // longest hold before a 202 (0: the deadline; the serve config defaults it to 60s) [0]
	// MaxWaiters bounds the long-polls (GET ?wait, wait mode) this replica
	// holds at once; above it a long-poll is answered at once with the
	// current state (0: no bound; the serve config defaults it to 1000) [0].
	MaxWaiters     int
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

// ServiceName names the async runtime (*Runtime) in engine.Services: the
// composition root lends it to the builds of every generation, and the
// async-broker node takes it from its engine.BuildContext.
const ServiceName = "async"

// Runtime is the process's async machinery: the back end, its settings and
// metrics. cmd/celflow builds it from the serve config's `async` object
// (restart-only) and lends it to each workflow build as the service
// ServiceName; it holds nothing that belongs to one workflow. Without one
// (validate, or no async config), queued modes answer 503 ENQUEUE_FAILED.
type Runtime struct {
	Backend  async.Backend
	Settings Settings
	Metrics  *Metrics // nil: none
	Log      *logrus.Logger

	waiters atomic.Int64 // long-polls held now (Settings.MaxWaiters)
}

// enterWait counts a long-poll in; false (not counted) when MaxWaiters are
// held already. A true is paired with leaveWait.
func (rt *Runtime) enterWait() bool {
	n := rt.waiters.Add(1)
	if m := rt.Settings.MaxWaiters; m > 0 && n > int64(m) {
		rt.waiters.Add(-1)
		rt.Metrics.waitRefusedInc()
		return false
	}
	rt.Metrics.waitersAdd(1)
	return true
}

func (rt *Runtime) leaveWait() {
	rt.waiters.Add(-1)
	rt.Metrics.waitersAdd(-1)
}

// Waiters is the number of long-polls this replica holds now.
func (rt *Runtime) Waiters() int { return int(rt.waiters.Load()) }

// NewRuntime fills the settings' defaults.
func NewRuntime(b async.Backend, s Settings, m *Metrics, log *logrus.Logger) *Runtime {
	s.defaults()
	if log == nil {
		log = logrus.StandardLogger()
	}
	return &Runtime{Backend: b, Settings: s, Metrics: m, Log: log}
}

// Binding is what a workflow's async-broker node contributes to the HTTP
// side: the header names that scope GET and DELETE /v1/requests/{id}. It
// belongs to that workflow's generation: the composition root derives it
// with BindingOf when it builds the generation and serves it next to the
// workflow, swapped with it in one step, so a reload that is refused
// changes nothing. Immutable; the nil *Binding is the defaults.
type Binding struct{ cfg *config }

// BindingOf is the binding of w's async-broker node (the last one in
// declaration order, should there be several), or the defaults when w is
// nil or has none.
func BindingOf(w *engine.Workflow) *Binding {
	if w == nil {
		return nil
	}
	var b *Binding
	for _, n := range w.Built() {
		if an, ok := n.(*Node); ok {
			b = &Binding{cfg: an.cfg}
		}
	}
	return b
}

// defaultHeaders is the header config of a node with no params.
var defaultHeaders = sync.OnceValue(func() *config {
	c, _ := parseParams(nil, nil, nil)
	return c
})

// headers is the header config GET/DELETE read: the node's, else the
// defaults.
func (b *Binding) headers() *config {
	if b == nil || b.cfg == nil {
		return defaultHeaders()
	}
	return b.cfg
}
