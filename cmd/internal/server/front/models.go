package front

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// PathModels and PathHealth are the endpoints OpenAI SDKs, UIs and load
// balancers probe first (issue 12): the model list and vLLM's liveness path.
const (
	PathModels = "/v1/models"
	PathHealth = "/health"
)

// ModelsTTL is how long a model list asked of the upstreams is reused.
const ModelsTTL = 10 * time.Second

// modelsFetchTimeout bounds one refresh (all endpoints asked at once).
const modelsFetchTimeout = 5 * time.Second

// ModelSource is where GET /v1/models gets its list: Static when set
// (upstream.models), else List (the workers' or the gateway's lists).
type ModelSource struct {
	Static []string
	// List asks the upstreams; failed are the upstreams that did not answer
	// (logged, tolerated), err means none did.
	List func(ctx context.Context) (models []upstream.Model, failed []error, err error)
}

// modelCache serves one ModelSource: a static list rendered once, or the
// upstreams' list refreshed at most once per ModelsTTL by one fetch that
// concurrent requests share. A failed refresh is not cached.
type modelCache struct {
	src    ModelSource
	static []byte
	s      *Server

	mu   sync.Mutex
	body []byte
	at   time.Time
	wait chan struct{} // closed when the fetch in flight ends; nil when none
	err  *engine.Error // the result of the last fetch when it failed
}

// SetModels replaces the model source (start-up, config reload); the
// cached list goes with the old source.
func (s *Server) SetModels(src ModelSource) {
	c := &modelCache{src: src, s: s}
	if len(src.Static) > 0 {
		now := time.Now().Unix()
		ms := make([]upstream.Model, len(src.Static))
		for i, id := range src.Static {
			ms[i] = upstream.Model{ID: id, Object: "model", Created: now, OwnedBy: "celflow"}
		}
		c.static = renderModels(ms)
	}
	s.models.Store(c)
}

func renderModels(ms []upstream.Model) []byte {
	b, _ := json.Marshal(struct {
		Object string           `json:"object"`
		Data   []upstream.Model `json:"data"`
	}{"list", ms})
	return b
}

// listModels answers GET /v1/models in OpenAI's list shape. Like the
// probes, its summary line is debug level and it is not counted in the
// request metrics (whose route label is an inference route or
// "unmatched"): SDKs call it on start-up, and an upstream that fails it is
// logged at warning level anyway.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	probe(w)
	c := s.models.Load()
	if c == nil {
		s.fail(w, engine.Errorf(engine.KindModelsUnavailable, "no model list is configured"))
		return
	}
	body, e := c.get(r.Context())
	if e != nil {
		s.fail(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (c *modelCache) get(ctx context.Context) ([]byte, *engine.Error) {
	if c.static != nil {
		return c.static, nil
	}
	if c.src.List == nil {
		return nil, engine.Errorf(engine.KindModelsUnavailable, "no model list is configured")
	}
	c.mu.Lock()
	if c.body != nil && time.Since(c.at) < ModelsTTL {
		b := c.body
		c.mu.Unlock()
		return b, nil
	}
	wait := c.wait
	if wait == nil {
		wait = make(chan struct{})
		c.wait = wait
		// Detached from the request: a client that leaves does not cancel
		// the fetch the others wait for.
		go c.fetch(wait)
	}
	c.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, engine.AsError(ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	return c.body, nil
}

func (c *modelCache) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(c.s.base, modelsFetchTimeout)
	defer cancel()
	ms, failed, err := c.src.List(ctx)
	for _, f := range failed {
		c.s.log.WithError(f).Warn("GET /v1/models: an upstream did not answer; listing the others")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait = nil
	if err != nil {
		c.err = &engine.Error{Kind: engine.KindModelsUnavailable, Item: -1,
			Msg: "no upstream answered GET /v1/models", Cause: err}
	} else {
		c.err, c.body, c.at = nil, renderModels(ms), time.Now()
	}
	close(done)
}
