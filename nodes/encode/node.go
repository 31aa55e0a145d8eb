// Package encode is the encode node type: a fan-out over the request's media
// items, one encoder leg per item, whose ec_transfer_params are merged in item
// order through the EC connector (docs/protocol.md, Encode and EC connectors).
// Each leg names its item's hash (the part's uuid) and a reply must answer for
// that hash only (reply.go, issue 10).
package encode

import (
	_ "embed"
	"encoding/json"
	"time"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "encode"

const (
	defaultTTFB = 60 * time.Second
	replyLimit  = 16 << 20 // an encoder reply: one token and the EC descriptors
)

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "encodes each media item on an encode worker (fan-out) and merges the ec_transfer_params",
		FanOut: true,
		Build:  build,
	})
}

type params struct {
	TTFBTimeout string `json:"ttfb_timeout"`
	ECConnector string `json:"ec_connector"`
	Format      string `json:"format"`
	leg.BodyParams
}

// Node is a built encode node: immutable, safe for concurrent requests.
type Node struct {
	client   *upstream.Client // nil in validate-only builds
	ttfb     time.Duration
	body     leg.BodyBounds // idle_timeout, body_timeout
	tokensIn bool
	ec       ec.Connector
}

func build(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	var errs engine.ParamErrors
	add := func(err error) {
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
		}
	}
	up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream)
	n := &Node{client: up}
	var err error
	n.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, defaultTTFB)
	add(err)
	var berrs []error
	n.body, berrs = p.BodyParams.Parse(leg.DefaultIdleTimeout, leg.DefaultBodyTimeout)
	for _, err := range berrs {
		add(err)
	}
	n.tokensIn, err = leg.TokensIn(p.Format, b)
	add(err)
	name, path := p.ECConnector, "/ec_connector"
	if name == "" {
		name, path = b.Defaults.ECConnector, ""
	}
	if n.ec, err = ec.Lookup(name); err != nil {
		add(&engine.ParamError{Path: path, Msg: err.Error()})
	}
	add(leg.RequireRole(b, upstream.RoleEncode))
	if len(errs) > 0 {
		return nil, errs
	}
	return n, nil
}

// Contract: encode needs the items' features (render, or the generate
// entry) and provides the merged EC params.
func (n *Node) Contract() engine.Contract {
	return engine.Contract{
		Needs:    []engine.Need{{Key: engine.KeyFeatures}},
		Provides: []engine.AnyKey{handoff.EC},
		Role:     string(upstream.RoleEncode),
	}
}

var (
	_ engine.Node   = (*Node)(nil)
	_ engine.Merger = (*Node)(nil)
)
