package main

import (
	"reflect"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/connectors/kvevents"
	"github.com/celflow/celflow/schema"
)

// KV events (issue 20, docs/operations.md#kv-events): a generation whose
// config reads the workers' KV events holds a kvevents.Hub. prepare builds
// it without opening a socket (so `validate --config` and `serve --check`
// open none); startKV, when the generation starts serving, opens its
// sockets and installs each pool's view on the upstream client. A reload
// whose upstream client and kv_events settings are unchanged lends the
// running hub (and its index) to the new generation, as it lends the
// client.

// buildKV is prepare's step: the hub of cfg's kv_events, or the one reuse
// lends, nil when events are off.
func buildKV(cfg *config.Config, reuse *generation, sameClient bool) (*kvevents.Hub, schema.Diagnostics) {
	if !cfg.KVEvents.Enabled() {
		return nil, nil
	}
	if reuse != nil && sameClient && reuse.kv != nil && reflect.DeepEqual(reuse.cfg.KVEvents, cfg.KVEvents) {
		return reuse.kv, nil
	}
	h, err := kvevents.New(cfg.KVEvents.Workers(), cfg.KVEvents.Options(cfg.Upstream.PrefixBlockTokens))
	if err != nil {
		return nil, schema.Diagnostics{cfg.Diag("/upstream/kv_events", schema.RuleUpstream, err.Error())}
	}
	return h, nil
}

// startKV opens g's subscribers (a lent hub is already running) and points
// every pool of g's client at its view: the hub's for the pools it covers,
// none for the others (so a client kept across a reload that switched
// events off routes as without them).
func (g *generation) startKV() error {
	var err error
	if g.kv != nil {
		err = g.kv.Start()
	}
	for _, p := range g.up.PoolNames() {
		if g.kv != nil && err == nil {
			if src := g.kv.Source(p); src != nil {
				_ = g.up.SetCacheSource(p, src)
				continue
			}
		}
		_ = g.up.SetCacheSource(p, nil)
	}
	return err
}

// kvHealth is /health's detail: each subscribed worker by pool[index] (no
// address: /health is on the client listener) with its state, and the
// workers whose events are not arriving as they should.
func (g *generation) kvHealth() any {
	if g.kv == nil {
		return nil
	}
	type worker struct {
		Worker       string   `json:"worker"`
		Pools        []string `json:"pools"`
		State        string   `json:"state"`
		Blocks       int      `json:"blocks"`
		LastBatchAge *float64 `json:"last_batch_age_seconds,omitempty"`
	}
	var ws []worker
	var problems []string
	now := time.Now()
	for _, s := range g.kv.Stats() {
		w := worker{Worker: s.ID, Pools: s.Pools, State: s.State, Blocks: s.Blocks}
		if !s.LastBatch.IsZero() {
			age := now.Sub(s.LastBatch).Seconds()
			w.LastBatchAge = &age
		}
		ws = append(ws, w)
		if kvevents.Problem(s.State) {
			problems = append(problems, s.ID+": "+s.State)
		}
	}
	return map[string]any{"kv_events": map[string]any{"workers": ws, "problems": problems}}
}

// kvLogStart logs where events are read from, once per new hub.
func kvLogStart(log *logrus.Logger, g *generation) {
	if g.kv == nil {
		return
	}
	f := logrus.Fields{"workers": len(g.cfg.KVEvents.Workers()), "stale_after": g.cfg.KVEvents.StaleAfter.String()}
	if g.cfg.KVEvents.Bind != "" {
		f["bind"] = g.kv.BindAddr()
	}
	log.WithFields(f).Info("kv events: subscribed; routing reads each worker's cache where its events are live")
}
