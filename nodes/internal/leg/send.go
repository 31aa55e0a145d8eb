package leg

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// OwnedHeaders are server-owned headers stamped on every worker leg of the
// run after the client's headers were filtered (the async broker's
// objective and fairness id). The node that provides them runs before any
// leg is built; read-only afterwards. Unset for none; worker nodes read them
// without needing them (most runs have none).
var OwnedHeaders = engine.NewKey[http.Header]("owned-headers")

// NewLeg builds a leg carrying body, with the client's headers, the
// canonical id and the node's trace context. The body is replayable (one
// resend on a stale keep-alive connection).
func NewLeg(x *engine.Exec, role upstream.Role, path string, body *jsonb.Body, ttfb time.Duration) *upstream.Leg {
	l := &upstream.Leg{
		Role:    role,
		Path:    path,
		Body:    body.Reader(),
		Length:  int64(body.Len()),
		NewBody: body.Reader,
		TTFB:    ttfb,
		Trace:   TraceHeaders(x),
	}
	if x.Run != nil && x.Run.Req != nil {
		l.Header = x.Run.Req.Header
		l.ReqID = x.Run.Req.ID
		l.Extra = OwnedHeaders.Value(x.Run)
	}
	if x.Target != nil {
		l.TargetHeader, l.TargetDrop = x.Target.Header, x.Target.Drop
		if x.Target.TTFB != nil { // the chosen target rule's ttfb_timeout
			l.TTFB = *x.Target.TTFB
		}
	}
	return l
}

// Model is the "model" a target rule puts on the node's legs (a JSON
// string), nil to keep the body's. Body builders splice it over the
// top-level "model" (added at the end when the client sent none).
func Model(x *engine.Exec) []byte {
	if x == nil || x.Target == nil {
		return nil
	}
	return x.Target.Model
}

// Pick chooses a target for role; no target is KindBadGateway.
func Pick(c *upstream.Client, role upstream.Role) (*upstream.Target, *engine.Error) {
	return pick(c, role, "", nil, upstream.CacheKey{})
}

// pick chooses from the named pool a target rule chose, else the role's.
func pick(c *upstream.Client, role upstream.Role, pool string, exclude []string, k upstream.CacheKey) (*upstream.Target, *engine.Error) {
	t, err := c.PickKey(role, pool, k, exclude...)
	if err != nil {
		what := string(role)
		if pool != "" {
			what = "pool " + pool
		}
		e := engine.Errorf(engine.KindBadGateway, "no %s target available", what)
		e.Cause = err
		return nil, e
	}
	return t, nil
}

// pool is the named pool x's target rule chose, "" for the role's.
func pool(x *engine.Exec) string {
	if x == nil || x.Target == nil {
		return ""
	}
	return x.Target.Pool
}

// triedKey holds, per node and fan-out item (the key's scope), the
// endpoints its attempts were sent to.
var triedKey = engine.NewKey[*tried]("leg.tried")

// tried is the endpoints one node's attempts were sent to in one run.
type tried struct {
	mu   sync.Mutex
	urls []string
}

// PickFor is Pick for one execution: a retry (Attempt > 1) avoids the
// endpoints earlier attempts of the node used, when another is available
// (docs/errors.md, Upstream 503, 429 and `param`).
func PickFor(x *engine.Exec, c *upstream.Client, role upstream.Role) (*upstream.Target, *engine.Error) {
	if !c.Direct() || x.Run == nil {
		return pick(c, role, pool(x), nil, upstream.CacheKey{})
	}
	tr := triedKey.GetOrMakeIn(x.Run, x.NodeID+"/"+strconv.Itoa(x.Index), func() *tried { return &tried{} })
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var exclude []string
	if x.Attempt > 1 {
		exclude = tr.urls
	}
	t, e := pick(c, role, pool(x), exclude, cacheKey(x))
	if e == nil && t.Endpoint != nil {
		tr.urls = append(tr.urls, t.Endpoint.URL)
	}
	noteRoute(x, t)
	return t, e
}

// noteTried adds a re-send's endpoint to the node's tried list, so a later
// attempt of the node (its retry: block) avoids it too.
func noteTried(x *engine.Exec, url string) {
	if x == nil || x.Run == nil {
		return
	}
	tr := triedKey.GetOrMakeIn(x.Run, x.NodeID+"/"+strconv.Itoa(x.Index), func() *tried { return &tried{} })
	tr.mu.Lock()
	tr.urls = append(tr.urls, url)
	tr.mu.Unlock()
}

// Attrs are the span attributes of one leg sent to t.
func Attrs(t *upstream.Target, l *upstream.Leg) map[string]any {
	a := map[string]any{
		"celflow.upstream.url": t.Base + l.Path,
		"celflow.bytes_out":    l.Length,
	}
	if l.Role != "" {
		a["celflow.epp_profile"] = string(l.Role)
	}
	if t.Endpoint != nil {
		a["celflow.endpoint"] = t.Endpoint.URL
	}
	if r := t.Route; r != nil { // cache-aware routing (docs/operations.md)
		a["celflow.route.score"], a["celflow.route.cached_blocks"], a["celflow.route.load"] = r.Score, r.CachedBlocks, r.Load
		a["celflow.route.source"] = r.Source
	}
	return a
}

// Failed reports whether a leg's outcome counts against the endpoint's
// passive health: a transport failure or a 5xx. Slowness (a TTFB timeout)
// and the client leaving never eject (docs/configuration.md,
// upstream.health).
func Failed(resp *http.Response, e *engine.Error) bool {
	if resp != nil {
		return resp.StatusCode >= 500
	}
	return e != nil && e.Kind == engine.KindBadGateway
}

// PredictHit is upstream's direct-mode hit prediction within the pool x's
// target rule chose (the decode role's when none). When tokens are the
// run's T, the prompt is named as the cache-aware picker names it
// (cacheKey: the model, for its LoRA adapter, and the media items); a
// prompt with an item without a hash then has no key: a miss.
func PredictHit(x *engine.Exec, c *upstream.Client, tokens []int64) (*upstream.Target, bool) {
	k := upstream.CacheKey{Tokens: tokens}
	if x != nil && x.Run != nil && x.Run.State.Tokens.Known && tokens != nil && sameIDs(x.Run.State.Tokens.IDs, tokens) {
		k = cacheKey(x)
	}
	t, hit := c.PredictHitKey(pool(x), k)
	noteRoute(x, t)
	return t, hit
}

// sameIDs: a and b are the same slice of ids (the run's T).
func sameIDs(a, b []int64) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
