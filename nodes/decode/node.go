// Package decode is the `decode` node type: the terminal leg that generates
// the reply and relays it to the client (docs/protocol.md, Decode and
// Streaming).
package decode

import (
	_ "embed"
	"encoding/json"
	"time"

	"github.com/celflow/celflow/connectors/kv"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/replay"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "decode"

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "terminal decode leg; carries the KV handoff and relays the reply (JSON or SSE)",
		Build:  Build,
	})
}

type params struct {
	TTFBTimeout       string         `json:"ttfb_timeout"`
	StreamIdleTimeout string         `json:"stream_idle_timeout"`
	Aggregated        bool           `json:"aggregated"`
	KVConnector       string         `json:"kv_connector"`
	Failover          *replay.Params `json:"failover"`
}

// Decode is a built decode node; immutable and safe for concurrent use.
type Decode struct {
	client       *upstream.Client
	ttfb, idle   time.Duration
	writeTimeout time.Duration
	aggregated   bool
	sglang       bool          // kv-sglang: bootstrap fields instead of kv_transfer_params
	port         int           // kv-sglang bootstrap port
	fo           replay.Policy // the failover: block (failover.go)
}

// Build validates params and the decode target.
func Build(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream)
	n := &Decode{client: up, aggregated: p.Aggregated, writeTimeout: b.WriteTimeout}
	var errs engine.ParamErrors
	add := func(err error) {
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
		} else if err != nil {
			errs = append(errs, &engine.ParamError{Msg: err.Error()})
		}
	}
	var err error
	n.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, 0)
	add(err)
	n.idle, err = leg.Duration("/stream_idle_timeout", p.StreamIdleTimeout, 0)
	add(err)
	name, path := p.KVConnector, "/kv_connector"
	if name == "" {
		name, path = b.Defaults.KVConnector, ""
	}
	if c, err := kv.Lookup(name); err != nil {
		add(&engine.ParamError{Path: path, Msg: err.Error()})
	} else if c.Bootstrap() && !p.Aggregated {
		n.sglang = true
		if n.port, err = kv.BootstrapPort(); err != nil {
			add(&engine.ParamError{Path: path, Msg: err.Error()})
		}
	}
	if pol, pe := replay.Build(p.Failover); pe != nil {
		add(pe)
	} else {
		n.fo = pol
	}
	add(leg.RequireRole(b, upstream.RoleDecode))
	switch len(errs) {
	case 0:
		return n, nil
	case 1:
		return nil, errs[0]
	}
	return nil, errs
}

// Contract: decode answers the client whenever it succeeds (terminal: no
// node may follow it) and ends the run. It needs nothing:
// without a prefill the body simply carries no kv_transfer_params, and
// without T no tokens (docs/protocol.md, Decode). Its outputs feed
// metrics (nothing can read them in CEL: nothing follows decode).
func (n *Decode) Contract() engine.Contract {
	c := engine.Contract{Role: string(upstream.RoleDecode), Responds: true, Terminal: true, Outputs: decodeOutputs}
	if n.fo.Enabled() {
		c.Failover = n.fo.String()
	}
	if n.sglang {
		// A kv-sglang decode meets a concurrent prefill in the run's SGLang
		// session (either may make it): declared so the compiler sees the
		// coupling.
		c.Provides = []engine.AnyKey{leg.SGLangSession}
	}
	return c
}

var decodeOutputs = []engine.Output{{Name: "aggregated", Type: "bool"}, {Name: "handover", Type: "duration"}}

var _ engine.Node = (*Decode)(nil)
