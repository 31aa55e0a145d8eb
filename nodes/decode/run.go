package decode

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/replay"
)

// Run sends the decode leg and relays a 2xx reply to the client.
//
// A failure after the reply started comes back as Err with Responded true
// (see leg.Relay): the front ends the reply abnormally.
func (n *Decode) Run(ctx context.Context, x *engine.Exec) engine.Result {
	st := &x.Run.State
	res := engine.Result{Attrs: map[string]any{}}
	kv := handoff.KV.Value(x.Run)
	if n.aggregated {
		res.Outputs = map[string]any{"aggregated": true}
		res.Attrs["celflow.aggregated"] = true
	}
	// docs/protocol.md, Cancellation: the client left after prefill answered and before decode
	// was sent. No decode; the prefill worker's lease frees the KV.
	if err := firstErr(x.Run.Ctx, ctx); err != nil {
		if kv.PrefillRan && x.Run.Ctx.Err() != nil {
			x.Run.Abandon()
			res.Attrs["celflow.prefill_abandoned"] = true
		}
		res.Err = engine.AsError(err)
		return res
	}
	obj, e := leg.ParseBody(x, st.Body)
	if e != nil {
		res.Err = e
		return res
	}
	in := &bodyIn{Route: x.Run.Req.Route, Body: st.Body, Obj: obj, Tokens: st.Tokens, Media: st.Media, Model: leg.Model(x)}
	if !n.aggregated && kv.PrefillRan && kv.Bootstrap == nil {
		in.KV = kv.Params
	}
	var session *leg.SGLang
	if n.sglang {
		if in.Route == engine.RouteGenerate {
			res.Err = engine.Errorf(engine.KindInvalidRequest, "kv-sglang cannot serve %s: SGLang has no generate endpoint", in.Route.Path())
			return res
		}
		switch {
		case kv.Bootstrap != nil: // sequential: prefill ran before us
			in.Boot = kv.Bootstrap
		case n.client != nil && n.client.Direct() && n.client.HasRole(upstream.RolePrefill):
			// Concurrent shape: meet the prefill node in the run's session.
			session = leg.Session(x, n.client, n.port)
			if session.PickErr != nil {
				res.Err = session.PickErr
				return res
			}
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			defer cancel(nil)
			if e := session.JoinDecode(cancel); e != nil {
				res.Err = e
				return res
			}
			in.Boot = &handoff.Bootstrap{Host: session.Host, Port: session.Port, Room: session.Room}
		}
	}
	return n.send(ctx, x, in, session, res)
}

// handoffFailure: a decode 4xx after a KV hand-off whose message is about
// the transfer (the prefill's KV could not be pulled: the prefill died or
// its lease ran out) is not the client's error but the worker side's, so it
// is 502 upstream_error, not the worker's 400 upstream_rejected
// (docs/errors.md). The worker's message stays in the log (Cause), and even
// as a 4xx it would have been relayed scrubbed of addresses
// (upstream.ScrubAddresses).
func handoffFailure(e *engine.Error) *engine.Error {
	if e.Kind != engine.KindUpstreamRejected || e.Status == http.StatusTooManyRequests || !aboutKVTransfer(e.UpstreamMsg) {
		return e
	}
	return &engine.Error{Kind: engine.KindBadGateway, Node: e.Node, Item: e.Item, Status: e.Status, Cause: e,
		Msg: "the KV hand-off from prefill failed: decode could not pull the prefilled KV (HTTP " + strconv.Itoa(e.Status) + ")"}
}

// kvWords are what a worker's message about a KV transfer says (vLLM's
// connectors, the simulator's "KV transfer failed: …").
var kvWords = []string{"kv transfer", "kv_transfer", "kv cache transfer", "kv pull", "remote_request_id",
	"remote_host", "remote_engine_id", "remote_block_ids", "nixl", "bootstrap"}

func aboutKVTransfer(msg string) bool {
	m := strings.ToLower(msg)
	for _, w := range kvWords {
		if strings.Contains(m, w) {
			return true
		}
	}
	return false
}

func firstErr(ctxs ...context.Context) error {
	for _, c := range ctxs {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (n *Decode) send(ctx context.Context, x *engine.Exec, in *bodyIn, s *leg.SGLang, res engine.Result) engine.Result {
	fo := n.plan(x, in)
	in.TokenIDs = fo.ids
	body, e := build(in)
	if e != nil {
		res.Err = e
		return res
	}
	ready := handoff.KV.Value(x.Run).ReadyAt
	var resp *http.Response
	var t *upstream.Target
	for kvTries := 0; ; kvTries++ {
		resp, t, e = leg.Call{Role: upstream.RoleDecode, Path: x.Run.Req.Route.Path(), Body: body, TTFB: n.ttfb,
			Reroute: n.reroutes, Fallback: n.fallbackFor(x), // before the first byte (node.go)
			Prepare: func(l *upstream.Leg) {
				fo.prepare(l, leg.StreamIdle(x, n.idle))
				// Hand-over time (docs/benchmarks.md, Hand-over): from prefill's
				// answer to this request being handed to the transport; what
				// follows until decode's first byte is the worker's
				// (celflow.ttfb_ms).
				if !ready.IsZero() {
					h := time.Since(ready)
					if res.Outputs == nil {
						res.Outputs = make(map[string]any, 1)
					}
					res.Outputs["handover"] = h
					res.Attrs["celflow.handover_ms"] = float64(h.Microseconds()) / 1000
				}
			}}.Send(ctx, x, n.client, &res)
		if t == nil {
			res.Err = e
			return res
		}
		if e == nil || s != nil || n.aggregated || !handoff.KV.Value(x.Run).PrefillRan || !isKVPull(e) || !n.fo.On[replay.ReasonKVPull] || kvTries >= n.fo.Attempts {
			break
		}
		// The prefill's KV could not be pulled (its worker died or its lease
		// ran out): prefill again, on another prefill worker, and decode again.
		var ok bool
		if body, ok = n.reprefill(ctx, x, in, &res); !ok {
			break
		}
	}
	if e != nil {
		if s != nil {
			if pe := s.PrefillErr(); pe != nil { // prefill failed first: its error wins
				e = pe
			}
		}
		if !n.aggregated && handoff.KV.Value(x.Run).PrefillRan {
			e = handoffFailure(e)
		}
		res.Err = e
		return res
	}
	if s != nil {
		if pe := s.DecodeStarted(); pe != nil {
			resp.Body.Close()
			res.Err = pe
			return res
		}
	}
	if n.client.Direct() && in.Tokens.Known {
		n.client.RecordPrefix(t, in.Tokens.IDs)
	}
	if fo.on {
		return n.relayFailover(ctx, x, in, fo, resp, t, res)
	}
	r := leg.Relay(x, resp, n.idle, n.writeTimeout)
	for k, v := range r.Attrs {
		res.Attrs[k] = v
	}
	res.Responded, res.Err = r.Responded, r.Err
	if r.Err != nil && fo.refused != "" && x.Run.Ctx.Err() == nil {
		// Failover is on but this request cannot be continued: it ends
		// abnormally as without failover, and is counted.
		res.Failovers = append(res.Failovers, engine.Failover{Reason: breakReason(r.Err), Outcome: fo.refused})
	}
	return res
}
