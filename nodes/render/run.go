package render

import (
	"context"
	"time"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// Run implements engine.Node.
func (n *Node) Run(ctx context.Context, x *engine.Exec) engine.Result {
	st := &x.Run.State
	switch x.Run.Req.Route {
	case engine.RouteChat:
		return n.chat(ctx, x, st)
	case engine.RouteCompletions:
		kind, t, e := mm.ParseCompletionsPrompt(st.Body, nil)
		if e != nil {
			return engine.Result{Err: e}
		}
		if kind == mm.PromptTokens { // no call: T is the prompt
			return n.publish(st, t, st.Media, nil)
		}
		raw, res := n.call(ctx, x, CompletionsPath, st.Body)
		if res.Err != nil {
			return res
		}
		t, e = mm.ParseRenderCompletions(raw)
		if e != nil && !jsonb.Valid(raw) { // not JSON at all: 502 bad_gateway, not a protocol error
			e = leg.Unparseable(x, res.HTTPStatus, raw)
		}
		if e != nil {
			return engine.Result{HTTPStatus: res.HTTPStatus, Err: e, Attrs: res.Attrs}
		}
		return n.publish(st, t, st.Media, &res)
	case engine.RouteGenerate:
		// The front parsed token_ids and features at entry: no call,
		// but the limits still apply (docs/protocol.md, render).
		return n.publish(st, st.Tokens, st.Media, nil)
	}
	return engine.Result{Err: engine.Errorf(engine.KindInternal, "render: unknown route %v", x.Run.Req.Route)}
}

func (n *Node) chat(ctx context.Context, x *engine.Exec, st *engine.State) engine.Result {
	media := st.Media
	if len(media) == 0 {
		// No fetch-media ran: find the parts so features can be matched.
		parts, err := mm.ScanParts(st.Body, nil)
		if err != nil {
			return engine.Result{Err: mm.ScanError(err)}
		}
		media = mm.MediaItems(parts)
	}
	raw, res := n.call(ctx, x, ChatPath, st.Body)
	if res.Err != nil {
		return res
	}
	t, items, e := mm.ParseRenderChat(raw, media)
	if e != nil && !jsonb.Valid(raw) { // judged only on failure: the parse above validated it
		e = leg.Unparseable(x, res.HTTPStatus, raw)
	}
	if e != nil {
		return engine.Result{HTTPStatus: res.HTTPStatus, Err: e, Attrs: res.Attrs}
	}
	return n.publish(st, t, items, &res)
}

// call posts body (byte-faithful) to the render service and reads a JSON reply.
func (n *Node) call(ctx context.Context, x *engine.Exec, path string, body []byte) ([]byte, engine.Result) {
	if n.client == nil {
		return nil, engine.Result{Err: engine.Errorf(engine.KindInternal, "render was built without an upstream client")}
	}
	// Render's own service, not a worker pool: the target is its address
	// (no role, no endpoint health).
	var sent engine.Result
	start := time.Now()
	resp, _, e := leg.Call{Path: path, Body: jsonb.Raw(body), TTFB: n.cfg.ttfb, Bounds: n.cfg.body,
		Target: &upstream.Target{Base: n.cfg.address}}.Send(ctx, x, n.client, &sent)
	attrs := sent.Attrs
	if e != nil {
		return nil, engine.Result{HTTPStatus: sent.HTTPStatus, Err: e, Attrs: attrs}
	}
	attrs[string(leg.AttrTTFB)] = float64(time.Since(start).Microseconds()) / 1000
	// Read, not ReadJSON: the mm parsers scan the reply anyway (a 50k-id
	// reply is the largest body render sees), and judge it on failure.
	raw, e := leg.ReadBody(x, resp, replyLimit)
	res := engine.Result{HTTPStatus: resp.StatusCode, Attrs: attrs}
	if e != nil {
		res.Err = e
		return nil, res
	}
	attrs["celflow.bytes_in"] = len(raw)
	return raw, res
}

// publish checks the limits and writes T and the items to the run state.
func (n *Node) publish(st *engine.State, t engine.Tokens, items []engine.MediaItem, res *engine.Result) engine.Result {
	out := engine.Result{}
	if res != nil {
		out = *res
	}
	if out.Attrs == nil {
		out.Attrs = map[string]any{}
	}
	out.Attrs["celflow.tokens"] = len(t.IDs)
	out.Attrs["celflow.media.items"] = len(items)
	if e := mm.CheckLimits(t, items, n.cfg.maxTotal, n.cfg.maxPlaceholder); e != nil {
		out.Err = e
		return out
	}
	st.Tokens = t
	st.Media = items
	return out
}
