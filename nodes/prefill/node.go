// Package prefill is the `prefill` node type: the single-token prefill leg
// of disaggregated serving, with the KV handoff to decode (docs/protocol.md:
// Prefill, KV connectors, EC connectors).
package prefill

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/connectors/kv"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "prefill"

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "single-token prefill leg; hands the KV transfer params to decode",
		Build:  Build,
	})
}

// params is the node's params object (schema.json).
type params struct {
	TTFBTimeout string `json:"ttfb_timeout"`
	KVConnector string `json:"kv_connector"`
	ECConnector string `json:"ec_connector"`
	Format      string `json:"format"`
	Shape       string `json:"shape"`
	leg.BodyParams
}

// Shapes of the kv-sglang handoff (docs/protocol.md, kv-sglang).
const (
	ShapeSequential = "sequential"
	ShapeConcurrent = "concurrent"
)

// replyLimit bounds a prefill reply: one token and the handoff.
const replyLimit = 16 << 20

// Prefill is a built prefill node; immutable and safe for concurrent use.
type Prefill struct {
	client     *upstream.Client
	ttfb       time.Duration
	body       leg.BodyBounds // idle_timeout, body_timeout
	kv         kv.Connector
	ec         ec.Connector
	tokensIn   bool
	concurrent bool // kv-sglang concurrent shape
	port       int  // kv-sglang bootstrap port
}

// Build validates params against what the schema cannot check: connector
// names, format and connector compatibility, the bootstrap port, the target.
func Build(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream)
	n := &Prefill{client: up}
	var errs engine.ParamErrors
	add := func(err error) {
		if err == nil {
			return
		}
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
			return
		}
		errs = append(errs, &engine.ParamError{Msg: err.Error()})
	}
	var err error
	n.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, 60*time.Second)
	add(err)
	var berrs []error
	n.body, berrs = p.BodyParams.Parse(leg.DefaultIdleTimeout, leg.DefaultBodyTimeout)
	for _, err := range berrs {
		add(err)
	}
	n.tokensIn, err = leg.TokensIn(p.Format, b)
	add(err)
	kvName, kvPath := pick(p.KVConnector, b.Defaults.KVConnector, "/kv_connector")
	if n.kv, err = kv.Lookup(kvName); err != nil {
		add(&engine.ParamError{Path: kvPath, Msg: err.Error()})
	}
	ecName, ecPath := pick(p.ECConnector, b.Defaults.ECConnector, "/ec_connector")
	if n.ec, err = ec.Lookup(ecName); err != nil {
		add(&engine.ParamError{Path: ecPath, Msg: err.Error()})
	}
	add(n.buildSGLang(b, p, kvPath))
	add(leg.RequireRole(b, upstream.RolePrefill))
	if len(errs) > 0 {
		if len(errs) == 1 {
			return nil, errs[0]
		}
		return nil, errs
	}
	return n, nil
}

// pick chooses the node's value over the workflow default, and the params
// path an error about it points at ("" for a default).
func pick(own, def, path string) (string, string) {
	if own != "" {
		return own, path
	}
	return def, ""
}

func (n *Prefill) buildSGLang(b *engine.BuildContext, p params, kvPath string) error {
	if n.kv == nil || !n.kv.Bootstrap() {
		if p.Shape != "" {
			return &engine.ParamError{Path: "/shape", Msg: "shape applies to kv-sglang only"}
		}
		return nil
	}
	if n.tokensIn {
		path := "/format"
		if p.Format == "" {
			path = kvPath
		}
		return &engine.ParamError{Path: path, Msg: "kv-sglang cannot be combined with tokens-in: SGLang serves no /inference/v1/generate"}
	}
	port, err := kv.BootstrapPort()
	if err != nil {
		return &engine.ParamError{Path: kvPath, Msg: err.Error()}
	}
	n.port = port
	switch p.Shape {
	case ShapeConcurrent:
		n.concurrent = true
		if up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream); up != nil && !(up.Direct() && up.HasRole(upstream.RolePrefill)) {
			return &engine.ParamError{Path: "/shape", Msg: "the concurrent kv-sglang shape needs a direct prefill pool: celflow must pick the prefill worker, a gateway cannot"}
		}
	case "", ShapeSequential:
		if b.Warn != nil {
			b.Warn("/shape", "the sequential kv-sglang shape stalls against a stock SGLang prefill server (it waits for decode to join); prefer shape: concurrent with a direct prefill pool")
		}
	default:
		return &engine.ParamError{Path: "/shape", Msg: fmt.Sprintf("unknown shape %q (want sequential or concurrent)", p.Shape)}
	}
	return nil
}

// Contract: prefill provides the KV handoff; a tokens-in prefill needs T on
// chat (its body is built from T and the features); the concurrent kv-sglang
// shape provides the SGLang session it meets decode in (decode runs beside it) and survives the run's end.
func (n *Prefill) Contract() engine.Contract {
	c := engine.Contract{Role: string(upstream.RolePrefill)}
	if n.tokensIn {
		c.Needs = []engine.Need{{Key: engine.KeyTokens, Routes: []engine.Route{engine.RouteChat}}}
	}
	if n.concurrent {
		c.SurvivesEnd, c.SharedEndpoint = true, true
		c.Provides = []engine.AnyKey{leg.SGLangSession}
	} else {
		c.Provides = []engine.AnyKey{handoff.KV}
	}
	return c
}

var _ engine.Node = (*Prefill)(nil)
