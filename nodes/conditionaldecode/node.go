// Package conditionaldecode is the `conditional-decode` node type: a decode
// leg with `Prefer: if-available` that either serves the request from the
// decode worker's cache (a hit, relayed to the client) or answers 412 (a
// miss, an outcome edges route on) (docs/protocol.md, Conditional decode).
package conditionaldecode

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
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
		Doc:    "decode with Prefer: if-available (mode worker: and cache_hit_threshold): relays a hit, 412 on a miss (route on response.status == 412)",
		Build:  Build,
	})
}

type params struct {
	TTFBTimeout       string   `json:"ttfb_timeout"`
	StreamIdleTimeout string   `json:"stream_idle_timeout"`
	Mode              string   `json:"mode"`
	CacheHitThreshold *float64 `json:"cache_hit_threshold"`
	leg.BodyParams             // the 412 and error bodies celflow reads; a hit is relayed
}

// Modes: who decides a hit (README "Modes").
const (
	modePredicted = "predicted" // the endpoint picker: the gateway's EPP, or celflow's prefix index in direct mode
	modeWorker    = "worker"    // the decode worker, from cache_hit_threshold (vLLM RFC #24256)
)

// ConditionalDecode is a built node; immutable and safe for concurrent use.
type ConditionalDecode struct {
	client       *upstream.Client
	ttfb, idle   time.Duration
	body         leg.BodyBounds // idle_timeout, body_timeout of non-relayed replies
	writeTimeout time.Duration
	// threshold is cache_hit_threshold as JSON, formatted once at build;
	// nil in predicted mode.
	threshold []byte
}

// Build validates params and the decode target.
func Build(b *engine.BuildContext, raw json.RawMessage) (engine.Node, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream)
	n := &ConditionalDecode{client: up, writeTimeout: b.WriteTimeout}
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
	switch p.Mode {
	case "", modePredicted:
		if p.CacheHitThreshold != nil {
			add(&engine.ParamError{Path: "/cache_hit_threshold", Msg: `only with mode: worker`})
		}
	case modeWorker:
		switch t := p.CacheHitThreshold; {
		case t == nil:
			add(&engine.ParamError{Path: "/cache_hit_threshold", Msg: "required with mode: worker (a number from 0 to 1, e.g. 0.8)"})
		case *t < 0 || *t > 1 || math.IsNaN(*t):
			add(&engine.ParamError{Path: "/cache_hit_threshold", Msg: fmt.Sprintf("must be from 0 to 1, got %v", *t)})
		default:
			n.threshold = strconv.AppendFloat(nil, *t, 'g', -1, 64)
		}
	default:
		add(&engine.ParamError{Path: "/mode", Msg: fmt.Sprintf(`must be "predicted" or "worker", got %q`, p.Mode)})
	}
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
	c := engine.Contract{Role: string(upstream.RoleDecode), Responds: true, Statuses: []int{412}}
	if n.client != nil && n.client.Direct() && n.threshold == nil {
		// Predicted mode, direct: celflow's prefix index decides from T.
		// Generate brings T at entry; chat and completions need a render.
		c.Wants = []engine.Need{{Key: engine.KeyTokens, Routes: []engine.Route{engine.RouteChat, engine.RouteCompletions}}}
		c.Why = "in direct mode celflow predicts a hit from the prompt's tokens; without them every request is a predicted miss and the node never sends its leg (render before it, or use mode: worker and let the decode worker decide)"
	}
	return c
}

var _ engine.Node = (*ConditionalDecode)(nil)
