package kvevents

import (
	"sort"
	"time"

	"github.com/sirupsen/logrus"
)

// States of a worker's subscription, as metrics, /health and the logs name
// them.
const (
	StateConnecting = "connecting" // connect topology: not connected yet
	StateDown       = "down"       // connect topology: the publisher cannot be reached (its view is kept until stale_after)
	StateWaiting    = "waiting"    // subscribed, no batch since the view began
	StateLive       = "live"       // the view is trusted
	StateStale      = "stale"      // no confirmation the view is current within stale_after
	StateGapped     = "gapped"     // batches were lost and not replayed
)

// States lists every state (metrics export each as a 0/1 series).
var States = []string{StateConnecting, StateDown, StateWaiting, StateLive, StateStale, StateGapped}

// Problem reports whether a state means the worker's events are not
// arriving as they should (/health lists such workers).
func Problem(state string) bool {
	return state == StateDown || state == StateStale || state == StateGapped
}

// WorkerStats is one worker's subscription, for metrics and /health.
type WorkerStats struct {
	Pools           []string // the pools the worker serves in
	ID              string   // Worker.ID: pool[index], safe to show
	Base            string
	State           string
	Batches         int64 // batches applied (live and replayed)
	Events          int64 // events applied
	Gaps            int64 // holes in the sequence seen
	Replayed        int64 // batches applied from replay
	ReplayFailures  int64
	DecodeErrors    int64
	ConnectFailures int64
	Restarts        int64         // publisher restarts and lost connections seen
	Orphans         int64         // BlockStored events whose parent block the view did not hold
	Blocks          int           // blocks in the view
	Lag             time.Duration // the last batch's age when applied (its ts to now)
	LastBatch       time.Time     // zero: none yet
}

func (h *Hub) state(w *workerIndex, now time.Time) string {
	switch {
	case w.gapped:
		return StateGapped
	case h.opts.Bind == "" && !w.connected && w.downSince.IsZero():
		return StateConnecting
	case h.opts.Bind == "" && !w.connected:
		if now.Sub(w.downSince) >= h.index.staleAfter {
			return StateStale
		}
		return StateDown
	case !w.synced:
		return StateWaiting
	case h.opts.Bind != "" && now.Sub(w.lastBatch) >= h.index.staleAfter:
		return StateStale
	}
	return StateLive
}

// Stats reports every worker, sorted by base URL.
func (h *Hub) Stats() []WorkerStats {
	now := time.Now()
	pools := map[string][]string{}
	for p, bases := range h.pools {
		for _, b := range bases {
			pools[b] = append(pools[b], p)
		}
	}
	ids := map[string]string{}
	for _, w := range h.workers {
		ids[w.Base] = w.ID
	}
	out := make([]WorkerStats, 0, len(h.byBase))
	for base, w := range h.byBase {
		w.mu.RLock()
		s := WorkerStats{
			Pools: pools[base], ID: ids[base], Base: base, State: h.state(w, now), Blocks: w.order.Len(),
			Lag: w.lag, LastBatch: w.lastBatch,
		}
		w.mu.RUnlock()
		sort.Strings(s.Pools)
		s.Batches, s.Events, s.Gaps, s.Replayed = w.batches.Load(), w.events.Load(), w.gaps.Load(), w.replayed.Load()
		s.ReplayFailures, s.DecodeErrors, s.ConnectFailures = w.replayFailures.Load(), w.decodeErrors.Load(), w.connectFailures.Load()
		s.Restarts, s.Orphans = w.restarts.Load(), w.orphans.Load()
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Base < out[j].Base })
	return out
}

// watchStates logs each worker's state changes (one line per change, so a
// worker that flaps is visible and one that is down is not repeated).
func (h *Hub) watchStates() {
	defer h.wg.Done()
	t := time.NewTicker(h.opts.StateEvery)
	defer t.Stop()
	for {
		h.logStates()
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *Hub) logStates() {
	h.stateMu.Lock()
	defer h.stateMu.Unlock()
	for _, s := range h.Stats() {
		was, ok := h.states[s.Base]
		if ok && was == s.State {
			continue
		}
		h.states[s.Base] = s.State
		if !ok && (s.State == StateConnecting || s.State == StateWaiting) {
			continue // the initial state is not news
		}
		e := h.log.WithFields(logrus.Fields{"worker": s.Base, "pools": s.Pools, "from": was, "to": s.State, "blocks": s.Blocks, "gaps": s.Gaps})
		if Problem(s.State) {
			e.Warn("kv events: worker state changed; its requests are routed by the prediction index")
		} else {
			e.Info("kv events: worker state changed")
		}
	}
}
