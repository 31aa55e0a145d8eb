// Package asyncbroker is the async-broker node type: the first node of a
// workflow that serves async requests (docs/async.md). By the mode header a
// request is passed on with celflow's objective and fairness headers
// stamped (passthrough), queued and answered 202 (enqueue), or queued and
// held until its result (wait). Requests without the header pass through
// untouched, at the cost of two header map reads and a context lookup.
//
// The package also serves GET and DELETE /v1/requests/{id} (api.go) and
// runs the builtin back end's dispatcher (dispatch.go), which feeds queued
// requests back through the same front handler, so every node of the
// workflow runs on them exactly as on an online request.
package asyncbroker

import (
	"context"
	_ "embed"
	"encoding/json"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/async"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "async-broker"

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "async requests over Redis: passthrough, enqueue (202) or wait by the mode header; place it first",
		Build:  build,
	})
}

// Node is a built async-broker node: immutable, safe for concurrent use.
type Node struct {
	cfg *config
	rt  *Runtime // nil: no async config (validate, or not configured)
	// The node's header names reach GET/DELETE through its generation's
	// Binding (BindingOf), never through the runtime.
}

func build(b *engine.BuildContext, params json.RawMessage) (engine.Node, error) {
	rt, _ := engine.Service[*Runtime](b, ServiceName)
	var queues, tiers []string
	if rt != nil {
		queues, tiers = rt.Settings.Queues, rt.Settings.Tiers
	}
	cfg, err := parseParams(params, queues, tiers)
	if err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, rt: rt}, nil
}

// Contract: the node answers the queued modes itself and passes the rest
// on, so its successors need an edge condition (see the README).
func (n *Node) Contract() engine.Contract {
	return engine.Contract{Responds: true, Gate: true, Provides: []engine.AnyKey{leg.OwnedHeaders}}
}

// pass is the result of a request that goes on through the workflow (no
// mode header, passthrough, dispatched): the node succeeded without
// answering. Its successor takes the edge `if: outcome.status ==
// "succeeded"`, false when the node refused the request (a failure the
// front answers) and never reached when it answered.
var pass = engine.Result{}

// Run decides the mode. The no-header path allocates nothing.
func (n *Node) Run(ctx context.Context, x *engine.Exec) engine.Result {
	m, tenant, r, done := n.decide(ctx, x)
	if done {
		return r
	}
	return n.queue(ctx, x, m, tenant)
}

// decide reads the mode and the tenant and serves what needs no queue (no
// header, passthrough, a refused header): done is false for the queued
// modes, which Run queues and Preview describes.
func (n *Node) decide(ctx context.Context, x *engine.Exec) (m mode, tenant string, r engine.Result, done bool) {
	h := x.Run.Req.Header
	v := first(h, n.cfg.mode, n.cfg.modeAlias)
	if v == "" {
		if d, ok := ctx.Value(dispatchKey{}).(*dispatched); ok {
			// A queued request the dispatcher feeds back: stamp celflow's
			// own objective and fairness id on its legs.
			leg.OwnedHeaders.Set(x.Run, n.cfg.legHeader(d.tier, d.tenant, n.overflow(ctx, d.tenant)))
		}
		return 0, "", pass, true
	}
	switch {
	case strings.EqualFold(v, "passthrough"):
		m = modePassthrough
	case strings.EqualFold(v, "enqueue"):
		m = modeEnqueue
	case strings.EqualFold(v, "wait"):
		m = modeWait
	default:
		return 0, "", fail(engine.Errorf(engine.KindInvalidRequest, "%s must be passthrough, enqueue or wait", n.cfg.mode)), true
	}
	tenant, single := tenantOf(h, n.cfg.tenant, n.cfg.tenantAlias)
	if !single {
		return 0, "", fail(engine.Errorf(engine.KindInvalidRequest, "%s was sent more than once (or with its alias %s): the tenant scopes results, send exactly one", n.cfg.tenant, n.cfg.tenantAlias)), true
	}
	if tenant == "" {
		tenant = "default"
	}
	if !validTenant(tenant) {
		return 0, "", fail(engine.Errorf(engine.KindInvalidRequest, "%s must match [A-Za-z0-9._-]{1,64}", n.cfg.tenant)), true
	}
	if m == modePassthrough {
		_, tier := n.cfg.pick(x.Run.Req.Model, tenant)
		leg.OwnedHeaders.Set(x.Run, n.cfg.legHeader(tier, tenant, n.overflow(ctx, tenant)))
		return m, tenant, pass, true
	}
	return m, tenant, engine.Result{}, false
}

type mode uint8

const (
	modePassthrough mode = iota + 1
	modeEnqueue
	modeWait
)

// overflow classifies the tenant against its quota: limit requests
// admitted in the sliding window already is overflow (and, as in
// llm-d-async's gate, an overflow request is not counted). No quota, no limit for the tenant, no Redis counter,
// or a Redis error (fail open) is reserved.
func (n *Node) overflow(ctx context.Context, tenant string) bool {
	q := n.cfg.quota
	if q == nil || n.rt == nil {
		return false
	}
	limit, ok := q.Limits[tenant]
	if !ok {
		if limit, ok = q.Limits["*"]; !ok {
			return false
		}
	}
	qc, ok := n.rt.Backend.(async.QuotaCounter)
	if !ok {
		return false
	}
	reserved, err := qc.TakeQuota(ctx, q.Prefix+q.Attribute+":"+tenant, limit, time.Duration(q.WindowSeconds)*time.Second)
	return err == nil && !reserved
}

func fail(e *engine.Error) engine.Result { return engine.Result{Err: e} }

var _ engine.Node = (*Node)(nil)
