package prefill

import (
	"context"
	"errors"
	"time"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/connectors/kv"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// Run sends the prefill leg and records the handoff (handoff.KV).
func (n *Prefill) Run(ctx context.Context, x *engine.Exec) engine.Result {
	if n.concurrent {
		return n.runConcurrent(ctx, x)
	}
	in, e := n.input(x)
	if e != nil {
		return leg.Fail(0, e)
	}
	var t *upstream.Target
	if t, e = leg.PickFor(x, n.client, upstream.RolePrefill); e != nil {
		return leg.Fail(0, e)
	}
	if n.kv.Bootstrap() {
		in.Boot = &boot{Port: n.ownPort(t), Room: leg.NewRoom()}
	}
	reply, res := n.send(ctx, x, t, in)
	if res.Err != nil {
		return res
	}
	if n.kv.Bootstrap() {
		b, e := n.bootstrapFromReply(reply, t, in.Boot)
		if e != nil {
			return fail(res, e)
		}
		handoff.KV.Set(x.Run, handoff.KVHandoff{PrefillRan: true, Bootstrap: b, ReadyAt: time.Now()})
		return res
	}
	params, e := n.handoff(reply)
	if e != nil {
		return fail(res, e)
	}
	handoff.KV.Set(x.Run, handoff.KVHandoff{PrefillRan: true, Params: params, ReadyAt: time.Now()})
	return res
}

func fail(r engine.Result, e *engine.Error) engine.Result {
	r.Err = e
	return r
}

// input gathers the body inputs from the run; EC conflicts fail here,
// before anything is sent (502 upstream_protocol_error).
func (n *Prefill) input(x *engine.Exec) (*bodyIn, *engine.Error) {
	st := &x.Run.State
	route := x.Run.Req.Route
	if n.kv.Bootstrap() && route == engine.RouteGenerate {
		return nil, engine.Errorf(engine.KindInvalidRequest, "kv-sglang cannot serve %s: SGLang has no generate endpoint", route.Path())
	}
	obj, e := leg.ParseBody(x, st.Body)
	if e != nil {
		return nil, e
	}
	in := &bodyIn{
		Route: route, TokensIn: n.tokensIn, Body: st.Body, Obj: obj, ReqID: x.Run.Req.ID,
		Tokens: st.Tokens, Media: st.Media, KV: n.kv.PrefillParams(), Model: leg.Model(x),
	}
	prepared, err := n.ec.Prepare(handoff.EC.Value(x.Run))
	if err != nil {
		e := engine.Errorf(engine.KindUpstreamProtocol, "encoders returned %v", err)
		e.Cause = err
		return nil, e
	}
	in.EC = ec.Marshal(prepared)
	return in, nil
}

// send builds the body, posts it to t and reads the JSON reply. The result
// carries the status and span attributes either way.
func (n *Prefill) send(ctx context.Context, x *engine.Exec, t *upstream.Target, in *bodyIn) ([]byte, engine.Result) {
	body, path, e := build(in)
	if e != nil {
		t.Done(false)
		return nil, leg.Fail(0, e)
	}
	var res engine.Result
	resp, _, e := leg.Call{Role: upstream.RolePrefill, Path: path, Body: body, TTFB: n.ttfb, Bounds: n.body, Target: t}.Send(ctx, x, n.client, &res)
	res.Attrs["celflow.kv_connector"] = n.kv.Name()
	if e != nil {
		res.Err = e
		return nil, res
	}
	reply, e := leg.ReadJSON(x, resp, replyLimit)
	if e != nil {
		res.Err = e
		return nil, res
	}
	return reply, res
}

// handoff runs the prefill reply's kv_transfer_params through the connector.
func (n *Prefill) handoff(reply []byte) ([]byte, *engine.Error) {
	var raw []byte
	if obj, err := jsonb.Parse(reply); err == nil {
		raw, _ = obj.Get("kv_transfer_params")
	}
	params, err := n.kv.Decode(raw)
	if err != nil {
		k := engine.KindInternal
		if errors.Is(err, kv.ErrHandoff) {
			k = engine.KindUpstreamProtocol
		}
		e := engine.Errorf(k, "prefill reply has no usable kv_transfer_params for %s", n.kv.Name())
		e.Cause = err
		return nil, e
	}
	return params, nil
}

// ownPort is the bootstrap port celflow announces for target t: the port
// its direct pool lists, else SGLANG_BOOTSTRAP_PORT or 8998.
func (n *Prefill) ownPort(t *upstream.Target) int {
	if t.Endpoint != nil && t.Endpoint.BootstrapPort > 0 {
		return t.Endpoint.BootstrapPort
	}
	return n.port
}
