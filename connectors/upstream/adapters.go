package upstream

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// LoRA adapters in the cache key (docs/operations.md, Cache-aware routing:
// LoRA and media). vLLM serves a LoRA adapter under its own model name and
// hashes a request's blocks with the adapter's name folded in (its KV
// events carry it as lora_name), so the same token ids under an adapter and
// under the base model share no cached block. A request only names a model;
// which names are adapters is learned from the pool's own GET /v1/models,
// where vLLM lists each adapter with "parent" = the model it extends (the
// base model's entry has parent null). The cache-aware picker sets
// CacheKey.LoRA to the request's model when the pool lists it as an adapter.
//
// The list is fetched on demand from a pick, never on the request path: a
// pick that finds it older than adapterRefresh (or finds a model name the
// list does not know, at most every adapterRetry: an adapter loaded at run
// time with /v1/load_lora_adapter) starts one refresh in the background and
// uses what it has. Until the pool's first list arrives, a request naming a
// model is scored on load alone and predicted no conditional-decode hit: it
// may be an adapter, and scoring it as the base model would predict hits
// the worker does not have. (The pickers that do not score record it as
// the base model's meanwhile, as they did before adapters were known.)

// Bounds of the adapter list.
const (
	adapterRefresh = 30 * time.Second
	adapterRetry   = 5 * time.Second
	adapterTimeout = 2 * time.Second
)

// adapterTable is one pool's view of which model names are adapters. The
// zero value is ready: nothing learned yet.
type adapterTable struct {
	names   atomic.Pointer[adapterList]
	running atomic.Bool  // a refresh is in flight
	last    atomic.Int64 // unix nanos when the last refresh started
}

// adapterList is one refresh's result: every model name the pool's
// endpoints list, adapter or not.
type adapterList struct {
	adapter map[string]bool // model name → it is an adapter
}

// lora resolves k for p: LoRA from the request's model when p lists it as
// an adapter; ok false when p's list is not known yet and k names a model
// (score on load alone). It may start a refresh.
func (c *client) lora(p *pool, k CacheKey) (CacheKey, bool) {
	if k.LoRA != "" || k.Model == "" || len(k.Tokens) == 0 {
		return k, true
	}
	t := &p.adapters
	l := t.names.Load()
	now := time.Now().UnixNano()
	known := l != nil
	isAdapter, listed := false, false
	if known {
		isAdapter, listed = l.adapter[k.Model]
	}
	age := time.Duration(now - t.last.Load())
	if !known || age > adapterRefresh || (!listed && age > adapterRetry) {
		c.refreshAdapters(p, now)
	}
	if !known {
		return k, false
	}
	if isAdapter {
		k.LoRA = k.Model
	}
	return k, true
}

// refreshAdapters starts one background GET /v1/models on every endpoint
// of p unless one is running. Each answer is merged into the list as it
// arrives (so one endpoint that hangs delays nothing the others said); once
// all are in, the union of the answers replaces the list. When no endpoint
// answers, the list is kept (or, before the first, an empty one is set:
// requests are then keyed as the base model's, as before adapters were
// known, rather than scored on load alone for ever).
func (c *client) refreshAdapters(p *pool, now int64) {
	t := &p.adapters
	if !t.running.CompareAndSwap(false, true) {
		return
	}
	t.last.Store(now)
	go func() {
		defer t.running.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), adapterTimeout)
		defer cancel()
		var mu sync.Mutex
		union := map[string]bool{}
		answered := false
		var wg sync.WaitGroup
		for _, e := range p.eps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.getAdapters(ctx, e.base)
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				answered = true
				mergeAdapters(union, l)
				// Meanwhile: what was known, plus what this refresh heard.
				next := map[string]bool{}
				if old := t.names.Load(); old != nil {
					mergeAdapters(next, old.adapter)
				}
				mergeAdapters(next, union)
				t.names.Store(&adapterList{adapter: next})
			}()
		}
		wg.Wait()
		if answered {
			t.names.Store(&adapterList{adapter: union})
		} else if t.names.Load() == nil {
			t.names.Store(&adapterList{adapter: map[string]bool{}})
		}
	}()
}

// mergeAdapters adds src to dst, at most maxModels names; a name any
// endpoint lists as an adapter is one.
func mergeAdapters(dst, src map[string]bool) {
	for name, a := range src {
		if _, ok := dst[name]; ok || len(dst) < maxModels {
			dst[name] = dst[name] || a
		}
	}
}

// getAdapters is one endpoint's model list as name → is an adapter: an
// entry whose "parent" is a string other than its own id (vLLM's
// serving_models.py: an adapter's ModelCard has parent = its base model).
func (c *client) getAdapters(ctx context.Context, base string) (map[string]bool, error) {
	body, err := c.getModelsBody(ctx, base, "")
	if err != nil {
		return nil, err
	}
	return parseAdapters(body)
}

// parseAdapters reads the parent of each entry of a model list, with the
// bounds parseModels applies.
func parseAdapters(body []byte) (map[string]bool, error) {
	var doc struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Data == nil {
		return nil, errNotModelList
	}
	out := map[string]bool{}
	for _, raw := range doc.Data {
		if len(out) == maxModels {
			break
		}
		var d struct {
			ID     any `json:"id"`
			Parent any `json:"parent"`
		}
		if json.Unmarshal(raw, &d) != nil {
			continue
		}
		id, ok := d.ID.(string)
		if !ok || !printable(id, maxModelID) {
			continue
		}
		parent, _ := d.Parent.(string)
		out[id] = out[id] || (parent != "" && parent != id)
	}
	return out, nil
}

// AdapterOf says whether the direct-mode pool named pool ("" for decode)
// lists model as a LoRA adapter (known false before its list arrived);
// for tests and diagnostics. It starts no refresh.
func (c *Client) AdapterOf(pool, model string) (adapter, known bool) {
	if pool == "" {
		pool = string(RoleDecode)
	}
	p := c.impl.poolNamed(pool)
	if p == nil {
		return false, false
	}
	l := p.adapters.names.Load()
	if l == nil {
		return false, false
	}
	return l.adapter[model], true
}
