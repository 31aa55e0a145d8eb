package demo

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/engine"
)

// Finished is what the front observed about one request.
type Finished struct {
	Status   int // the status sent to the client
	Duration time.Duration
	Report   *engine.Report // nil when the request was refused before a run
}

// Reports collects the front's observations of the requests the demo is
// waiting for (by request id), through front.Options.Observe. Requests
// nobody awaits (curl against `demo --serve`) are not kept.
type Reports struct {
	mu      sync.Mutex
	pending map[string]*awaited
}

type awaited struct {
	done chan struct{}
	f    Finished
}

func newReports() *Reports { return &Reports{pending: map[string]*awaited{}} }

// Expect registers a request id before the request is sent.
func (r *Reports) Expect(id string) {
	r.mu.Lock()
	r.pending[id] = &awaited{done: make(chan struct{})}
	r.mu.Unlock()
}

// Wait returns the observation of an expected request id, once the front
// has finished it (the client may read the reply before that), and forgets
// the id.
func (r *Reports) Wait(ctx context.Context, id string) (Finished, bool) {
	r.mu.Lock()
	a := r.pending[id]
	r.mu.Unlock()
	if a == nil {
		return Finished{}, false
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return Finished{}, false
	}
	r.mu.Lock()
	delete(r.pending, id)
	r.mu.Unlock()
	return a.f, true
}

// observe is the front's Observe hook. It must not retain the Observation,
// so the report is copied.
func (r *Reports) observe(o *front.Observation) {
	if o.Run == nil || o.Run.Req == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.pending[o.Run.Req.ID]
	if a == nil {
		return
	}
	select {
	case <-a.done:
		return // already observed
	default:
	}
	a.f = Finished{Status: o.Status, Duration: o.Duration}
	if o.Report != nil {
		rep := *o.Report
		rep.Outcomes = slices.Clone(rep.Outcomes)
		a.f.Report = &rep
	}
	close(a.done)
}
