package encode

import (
	"context"
	"sync"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// replies holds each fan-out item's ec_transfer_params until Merge, per run.
type replies struct {
	mu sync.Mutex
	by map[int]ec.Params
}

// repliesKey holds each encode node's replies on the run (scope: node id).
var repliesKey = engine.NewKey[*replies]("encode.replies")

func (n *Node) store(x *engine.Exec) *replies {
	return repliesKey.GetOrMakeIn(x.Run, x.NodeID, func() *replies { return &replies{by: map[int]ec.Params{}} })
}

// item is the media item of this execution: the engine hands the run's
// engine.MediaItem as Exec.Item for a foreach over `media` (filtered lists
// included); otherwise Exec.Index indexes State.Media.
func item(x *engine.Exec) (*engine.MediaItem, bool) {
	media := x.Run.State.Media
	switch v := x.Item.(type) {
	case engine.MediaItem:
		if v.Index >= 0 && v.Index < len(media) {
			return &media[v.Index], true
		}
	case *engine.MediaItem:
		return v, true
	}
	if x.Index >= 0 && x.Index < len(media) {
		return &media[x.Index], true
	}
	return nil, false
}

// Run sends one item's encoder leg.
func (n *Node) Run(ctx context.Context, x *engine.Exec) engine.Result {
	if n.client == nil {
		return engine.Result{Err: engine.Errorf(engine.KindInternal, "encode was built without an upstream client")}
	}
	it, ok := item(x)
	if !ok {
		return engine.Result{Err: engine.Errorf(engine.KindInternal, "encode: fan-out item %d is not a media item", x.Index)}
	}
	st := &x.Run.State
	generate := n.tokensIn || x.Run.Req.Route == engine.RouteGenerate
	var body *jsonb.Body
	var err error
	path := engine.RouteChat.Path()
	if generate {
		path = engine.RouteGenerate.Path()
		body, err = generateBody(st, it, leg.Model(x))
	} else {
		body, err = chatBody(st, it, leg.Model(x))
	}
	if err != nil {
		e := engine.Errorf(engine.KindUpstreamProtocol, "cannot build the encoder request: %v", err)
		return engine.Result{Err: e}
	}
	var sent engine.Result
	resp, target, e := leg.Call{Role: upstream.RoleEncode, Path: path, Body: body, TTFB: n.ttfb, Bounds: n.body}.Send(ctx, x, n.client, &sent)
	if target == nil {
		return engine.Result{Err: e}
	}
	attrs, status := sent.Attrs, sent.HTTPStatus
	attrs["celflow.media.hash"] = it.Hash
	if e != nil {
		return engine.Result{HTTPStatus: status, Err: e, Attrs: attrs}
	}
	raw, e := leg.ReadJSON(x, resp, replyLimit)
	if e != nil {
		return engine.Result{HTTPStatus: status, Err: e, Attrs: attrs}
	}
	p, e := ecParams(x, raw, it.Hash)
	if e != nil {
		return engine.Result{HTTPStatus: status, Err: e, Attrs: attrs}
	}
	if p != nil {
		s := n.store(x)
		s.mu.Lock()
		s.by[x.Index] = p
		s.mu.Unlock()
		attrs["celflow.ec.entries"] = len(p)
	}
	return engine.Result{HTTPStatus: status, Attrs: attrs}
}

// Merge hands the items' ec_transfer_params to the EC connector in item
// order (not arrival order) and records the result as handoff.EC.
func (n *Node) Merge(_ context.Context, x *engine.Exec, items []engine.Result) engine.Result {
	s := n.store(x)
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := make([]ec.Params, len(items))
	for k := range items {
		if items[k].Err != nil {
			continue
		}
		rs[k] = s.by[k]
		if rs[k] == nil && n.ec.Name() == ec.NIXL {
			leg.Log(x).WithField("item", k).Warn("encoder reply carried no ec_transfer_params; prefill will not get this item's descriptor")
		}
	}
	merged := n.ec.Merge(rs)
	handoff.EC.Set(x.Run, merged)
	return engine.Result{Attrs: map[string]any{"celflow.ec.connector": n.ec.Name(), "celflow.ec.bytes": len(merged)}}
}
