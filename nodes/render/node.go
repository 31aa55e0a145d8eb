// Package render is the render node type: it turns the request into the
// prompt's token ids T and per-item hashes, placeholders and kwargs, by
// calling the render service (chat, string-prompt completions) or by reading
// the request itself (token-array prompts, generate) (docs/protocol.md, render).
package render

import (
	_ "embed"
	"encoding/json"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "render"

// The render service's paths (docs/protocol.md, Set by celflow).
const (
	ChatPath        = "/v1/chat/completions/render"
	CompletionsPath = "/v1/completions/render"
)

// replyLimit bounds a render reply: generate-format kwargs grow with pixel
// count (about 20 MB per clamped image: docs/protocol.md,
// Chat or generate for media), so the cap is generous.
const replyLimit = 512 << 20

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "renders the prompt into token ids and per-item media features (render service, or the request itself)",
		Build:  build,
	})
}

// Node is a built render node: immutable, safe for concurrent requests.
type Node struct {
	cfg    *config
	client *upstream.Client // nil in validate-only builds
}

func build(b *engine.BuildContext, params json.RawMessage) (engine.Node, error) {
	fallback := ""
	up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream)
	if up != nil {
		fallback = up.Render()
	}
	cfg, err := parseParams(params, fallback, up != nil)
	if err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, client: up}, nil
}

// Contract: render provides T and the items' features on every route; it
// calls its own service, not a worker role.
func (n *Node) Contract() engine.Contract {
	return engine.Contract{Provides: []engine.AnyKey{engine.KeyTokens, engine.KeyFeatures}}
}

var _ engine.Node = (*Node)(nil)
