package prefill

import (
	"context"
	"strconv"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// bootstrapFromReply completes the sequential kv-sglang handoff
// (docs/protocol.md, kv-sglang): the host is the picked worker's with a direct
// pool, else the reply's (kv_transfer_params.bootstrap_host, else top-level
// bootstrap_host; missing is a protocol error); the port is the reply's when it
// reports one, else our own; the room is ours.
func (n *Prefill) bootstrapFromReply(reply []byte, t *upstream.Target, own *boot) (*handoff.Bootstrap, *engine.Error) {
	var top, kvo *jsonb.Object
	if obj, err := jsonb.Parse(reply); err == nil {
		top = obj
		if raw, ok := obj.Get("kv_transfer_params"); ok && len(raw) > 0 && raw[0] == '{' {
			if o, err := jsonb.Parse(raw); err == nil {
				kvo = o
			}
		}
	}
	b := &handoff.Bootstrap{Port: own.Port, Room: own.Room}
	if t.Endpoint != nil {
		b.Host = t.Host
	} else {
		b.Host = stringField("bootstrap_host", kvo, top)
	}
	if b.Host == "" {
		return nil, engine.Errorf(engine.KindUpstreamProtocol, "prefill reply names no bootstrap_host for kv-sglang")
	}
	if p, ok := portField(kvo, top); ok {
		b.Port = p
	}
	return b, nil
}

// stringField reads a string member from the first object that has it.
func stringField(key string, objs ...*jsonb.Object) string {
	for _, o := range objs {
		if o == nil {
			continue
		}
		if raw, ok := o.Get(key); ok && len(raw) > 1 && raw[0] == '"' {
			var s string
			if err := jsonUnquote(raw, &s); err == nil && s != "" {
				return s
			}
		}
	}
	return ""
}

// portField reads bootstrap_port as an integer in 1–65535.
func portField(objs ...*jsonb.Object) (int, bool) {
	for _, o := range objs {
		if o == nil {
			continue
		}
		if raw, ok := o.Get("bootstrap_port"); ok {
			if p, err := strconv.Atoi(string(raw)); err == nil && p >= 1 && p <= 65535 {
				return p, true
			}
		}
	}
	return 0, false
}

// runConcurrent is the concurrent kv-sglang shape: decode runs beside this
// node, both legs carry the session's host, port and room; the reply is
// drained and only recorded. A failure before decode's reply started
// cancels decode through the session (the client then gets this error).
func (n *Prefill) runConcurrent(ctx context.Context, x *engine.Exec) engine.Result {
	s := leg.Session(x, n.client, n.port)
	res := n.concurrentLeg(ctx, x, s)
	if res.Err != nil {
		e := engine.AsError(res.Err)
		if e.Kind != engine.KindCancelled && s.PrefillFailed(x.NodeID, e) {
			leg.Log(x).WithError(e).Info("kv-sglang prefill failed before decode's reply started: decode cancelled")
		}
	}
	return res
}

func (n *Prefill) concurrentLeg(ctx context.Context, x *engine.Exec, s *leg.SGLang) engine.Result {
	if s.PickErr != nil {
		return leg.Fail(0, s.PickErr)
	}
	in, e := n.input(x)
	if e != nil {
		s.Target.Done(false)
		return leg.Fail(0, e)
	}
	in.Boot = &boot{Host: s.Host, Port: s.Port, Room: s.Room}
	_, res := n.send(ctx, x, s.Target, in)
	if res.Attrs != nil {
		res.Attrs["celflow.sglang.room"] = strconv.FormatUint(s.Room, 10)
	}
	return res
}
