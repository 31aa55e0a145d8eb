// Package fetchmedia is the fetch-media node type: it finds the media parts
// of a chat body, validates inline data, downloads remote URLs under the
// SSRF guard, and rewrites them to data: URIs (docs/protocol.md, fetch-media).
package fetchmedia

import (
	_ "embed"
	"encoding/json"

	"github.com/celflow/celflow/engine"
)

//go:embed schema.json
var schemaJSON []byte

// TypeName is the node type's registered name.
const TypeName = "fetch-media"

func init() {
	engine.Register(engine.NodeType{
		Name:   TypeName,
		Schema: schemaJSON,
		Doc:    "downloads and validates the request's media and rewrites remote URLs to data: URIs",
		Build: func(_ *engine.BuildContext, params json.RawMessage) (engine.Node, error) {
			return New(params, nil)
		},
	})
}

// Node is a built fetch-media node. It is immutable apart from its cache
// and safe for concurrent requests.
type Node struct {
	cfg   *config
	fetch *fetcher
	cache *cache // nil when the cache is off (the default)
}

// New builds a node from its params. lookup replaces DNS resolution (tests
// map names such as "localhost" deterministically); nil uses the system
// resolver.
func New(params json.RawMessage, lookup LookupFunc) (*Node, error) {
	cfg, err := parseParams(params)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, fetch: newFetcher(cfg, lookup)}
	if cfg.cacheBytes > 0 {
		n.cache = newCache(cfg.cacheBytes, cfg.cacheTTL)
	}
	return n, nil
}

// Close releases the node's transport: its idle connections to media hosts
// (and to the media proxy) close now rather than at their idle timeout, so
// a retired workflow keeps no sockets open. A request still running the
// node goes on (its connection closes when it is done); Close is
// idempotent. It implements engine.Closer.
func (n *Node) Close() error {
	n.fetch.close()
	return nil
}

// Contract: fetch-media provides the media items; it calls no worker role.
func (n *Node) Contract() engine.Contract {
	return engine.Contract{Provides: []engine.AnyKey{engine.KeyMedia}}
}

var (
	_ engine.Node   = (*Node)(nil)
	_ engine.Closer = (*Node)(nil)
)
