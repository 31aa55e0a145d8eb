// Package conditionaldecode is the `conditional-decode` node type: a decode
// leg with `Prefer: if-available` that either serves the request from the
// decode worker's cache (a hit, relayed to the client) or answers 412 (a
// miss, an outcome edges route on) (PROTOCOL 5).
package conditionaldecode

import (
	_ "embed"
	"encoding/json"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/upstream"
	"github.com/celflow/celflow/nodes/internal/leg"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "conditional-decode"

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "decode with Prefer: if-available: relays a hit, 412 on a miss (route on response.status == 412)",
		Build:  Build,
	})
}

type params struct {
	TTFBTimeout       string `json:"ttfb_timeout"`
	StreamIdleTimeout string `json:"stream_idle_timeout"`
	leg.BodyParams           // the 412 and error bodies celflow reads; a hit is relayed
}

// ConditionalDecode is a built node; immutable and safe for concurrent use.
type ConditionalDecode struct {
	client       *upstream.Client
	ttfb, idle   time.Duration
	body         leg.BodyBounds // idle_timeout, body_timeout of non-relayed replies
	writeTimeout time.Duration
}

// Build validates params and the decode target.
func Build(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	n := &ConditionalDecode{client: b.Upstream, writeTimeout: b.WriteTimeout}
	var errs engine.ParamErrors
	add := func(err error) {
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
		}
	}
	var err error
	n.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, 60*time.Second)
	add(err)
	n.idle, err = leg.Duration("/stream_idle_timeout", p.StreamIdleTimeout, 0)
	add(err)
	var berrs []error
	n.body, berrs = p.BodyParams.Parse(leg.DefaultIdleTimeout, leg.DefaultBodyTimeout)
	for _, err := range berrs {
		add(err)
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

// Contract: the node may answer the client (a hit ends the run).
func (n *ConditionalDecode) Contract() engine.Contract {
	return engine.Contract{Role: string(upstream.RoleDecode), Responds: true}
}

var _ engine.Node = (*ConditionalDecode)(nil)
