package upstream

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
)

// The truth check (docs/operations.md, Cache-aware routing): every
// prediction a leg carries (Target.Route: the cache-aware picker's, or a
// predicted conditional-decode hit) is compared with what the worker then
// reports, usage.prompt_tokens_details.cached_tokens, read from the reply
// the client gets (nodes/internal/leg, usage.go). Per pool it counts the
// outcome (tp: predicted a cached prefix and the worker had one; fp:
// predicted, none; fn: none predicted, the worker had one; tn: neither)
// and the tokens (predicted, reported, and correct: the smaller of the
// two), so precision = correct ÷ predicted and recall = correct ÷ reported.
//
// Per endpoint the last routing.mispredict_window predicted hits are judged
// together: when the worker confirmed less than mispredict_precision of the
// tokens predicted on it, the endpoint is mispredicting: logged, exported
// (celflow_route_mispredicting) and listed by GET /health. When those
// predictions came from the CacheSource (the workers' KV events), its view
// of that endpoint is not used for routing.distrust_for: the prediction
// index decides there, and the window starts over to judge it.

// routeStats are one pool's truth counters.
type routeStats struct {
	tp, fp, fn, tn                      atomic.Int64
	predicted, reported, correct, total atomic.Int64
}

// truthWindow is one endpoint's recent predicted hits.
type truthWindow struct {
	mu               sync.Mutex
	pred, corr       []int64
	next, n          int
	sumPred, sumCorr int64

	mispredicting atomic.Bool
	precision     atomic.Uint64 // float64 bits of the last full window's precision; NaN before one
	distrustUntil atomic.Int64  // unix ns; the CacheSource view is not used before it
}

func (w *truthWindow) init(size int) {
	if size <= 0 {
		size = DefaultMispredictWindow
	}
	w.pred, w.corr = make([]int64, size), make([]int64, size)
	w.precision.Store(math.Float64bits(math.NaN()))
}

// distrusted: the endpoint's CacheSource view is set aside now.
func (w *truthWindow) distrusted(now int64) bool {
	u := w.distrustUntil.Load()
	return u != 0 && now < u
}

// ObserveCached compares the target's prediction with cached, the
// worker's usage.prompt_tokens_details.cached_tokens for this leg. Call it
// once, when the reply was read whole; it does nothing for a target that
// carries no prediction (gateway mode, round-robin, least-in-flight).
func (t *Target) ObserveCached(cached int) {
	if t == nil || t.Route == nil || t.ep == nil || cached < 0 {
		return
	}
	e, r := t.ep, t.Route
	p := e.pool
	pred := int64(r.Predicted)
	got := int64(cached)
	correct := min(pred, got)
	st := &p.stats
	switch {
	case pred > 0 && got > 0:
		st.tp.Add(1)
	case pred > 0:
		st.fp.Add(1)
	case got > 0:
		st.fn.Add(1)
	default:
		st.tn.Add(1)
	}
	st.predicted.Add(pred)
	st.reported.Add(got)
	st.correct.Add(correct)
	st.total.Add(int64(r.PromptTokens))
	if pred > 0 {
		e.truth.add(e, r.Source, pred, correct)
	}
}

// add records one predicted hit and judges the window once it is full.
func (w *truthWindow) add(e *endpoint, source string, pred, correct int64) {
	p := e.pool
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == len(w.pred) {
		w.sumPred -= w.pred[w.next]
		w.sumCorr -= w.corr[w.next]
	} else {
		w.n++
	}
	w.pred[w.next], w.corr[w.next] = pred, correct
	w.sumPred += pred
	w.sumCorr += correct
	w.next = (w.next + 1) % len(w.pred)
	if w.n < len(w.pred) {
		return
	}
	prec := float64(w.sumCorr) / float64(w.sumPred)
	w.precision.Store(math.Float64bits(prec))
	bound := p.routing.MispredictPrecision
	if bound == 0 {
		bound = DefaultMispredictPrecision
	}
	log := logrus.WithFields(logrus.Fields{"pool": string(p.role), "endpoint": e.ep.URL, "precision": round3(prec),
		"window": len(w.pred), "source": source})
	switch bad := prec < bound; {
	case bad && !w.mispredicting.Load():
		w.mispredicting.Store(true)
		if source == SourceEvents {
			d := p.routing.DistrustFor
			if d <= 0 {
				d = DefaultDistrustFor
			}
			w.distrustUntil.Store(p.now().Add(d).UnixNano())
			w.reset()
			log.WithField("distrust_for", d.String()).Warn("cache-aware routing: the worker keeps not confirming predicted cache hits; " +
				"its KV-event view is set aside and the prediction index decides for it")
			return
		}
		log.Warn("cache-aware routing: the worker keeps not confirming predicted cache hits")
	case !bad && w.mispredicting.Load():
		w.mispredicting.Store(false)
		log.Info("cache-aware routing: the worker confirms predicted cache hits again")
	}
}

// reset empties the window (w.mu held).
func (w *truthWindow) reset() {
	clear(w.pred)
	clear(w.corr)
	w.next, w.n, w.sumPred, w.sumCorr = 0, 0, 0, 0
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// PoolRoute is one pool's truth counters and its endpoints' standing.
type PoolRoute struct {
	Pool   string
	Picker string // the configured picker
	// Legs by outcome of their prediction (see the package's truth check).
	TP, FP, FN, TN int64
	// Tokens over the observed legs: predicted cached, reported cached by
	// the workers, correct (the smaller of the two per leg), and prompt.
	PredictedTokens, ReportedTokens, CorrectTokens, PromptTokens int64
	Endpoints                                                    []EndpointRoute
}

// EndpointRoute is one endpoint's standing in the truth check.
type EndpointRoute struct {
	Endpoint      string  // as configured
	Mispredicting bool    // its last full window fell below routing.mispredict_precision
	Precision     float64 // of its last full window; NaN before one
	Distrusted    bool    // its CacheSource view is set aside now
}

// RouteStats reports the truth check of every direct-mode pool that
// predicts (the decode role's and the named ones), in allPools order; nil
// in gateway mode.
func (c *Client) RouteStats() []PoolRoute {
	var out []PoolRoute
	for _, p := range c.impl.allPools() {
		if p.role != RoleDecode && roleIndex(p.role) >= 0 {
			continue
		}
		st := &p.stats
		pr := PoolRoute{Pool: string(p.role), Picker: c.impl.cfg.Picker,
			TP: st.tp.Load(), FP: st.fp.Load(), FN: st.fn.Load(), TN: st.tn.Load(),
			PredictedTokens: st.predicted.Load(), ReportedTokens: st.reported.Load(),
			CorrectTokens: st.correct.Load(), PromptTokens: st.total.Load()}
		now := p.now().UnixNano()
		for _, e := range p.eps {
			pr.Endpoints = append(pr.Endpoints, EndpointRoute{Endpoint: e.ep.URL,
				Mispredicting: e.truth.mispredicting.Load(),
				Precision:     math.Float64frombits(e.truth.precision.Load()),
				Distrusted:    e.truth.distrusted(now)})
		}
		out = append(out, pr)
	}
	return out
}
