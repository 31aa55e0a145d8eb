package demo

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/celflow/celflow/workflows"
)

// Overrides are the deployment details a shipped workflow leaves to its
// operator, set for a stack on 127.0.0.1.
type Overrides struct {
	// RenderAddress replaces params.address of every render node.
	RenderAddress string
	// AllowLoopback sets params.allow_loopback on every fetch-media node, so
	// that media served from 127.0.0.1 can be fetched (tests and the demo
	// only: fetch-media blocks loopback by default).
	AllowLoopback bool
	// Params sets params of nodes by id: {"decode": {"ttfb_timeout": "1s"}}
	// (tests shorten timeouts this way). An id the workflow lacks is an error.
	Params map[string]map[string]any
}

// Workflow returns the shipped workflow name ("epd.yaml") with o applied.
// The document is edited as a YAML tree, so everything else (comments,
// tests: block) stays as shipped.
func Workflow(name string, o Overrides) ([]byte, error) {
	src, err := workflows.FS.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("shipped workflow %q: %w", name, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("%s: not a YAML document", name)
	}
	nodes := mapValue(doc.Content[0], "nodes")
	if nodes == nil || nodes.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: no nodes list", name)
	}
	seen := map[string]bool{}
	for _, n := range nodes.Content {
		if id := mapValue(n, "id"); id != nil {
			for k, v := range o.Params[id.Value] {
				var val yaml.Node
				if err := val.Encode(v); err != nil {
					return nil, fmt.Errorf("param %s.%s: %w", id.Value, k, err)
				}
				setParam(n, k, &val)
			}
			seen[id.Value] = true
		}
		typ := mapValue(n, "type")
		if typ == nil {
			continue
		}
		switch typ.Value {
		case "render":
			if o.RenderAddress != "" {
				setParam(n, "address", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: o.RenderAddress})
			}
		case "fetch-media":
			if o.AllowLoopback {
				setParam(n, "allow_loopback", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
			}
		}
	}
	for id := range o.Params {
		if !seen[id] {
			return nil, fmt.Errorf("%s has no node %q to set params on", name, id)
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// mapValue returns the value of key in mapping m, nil when absent.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setParam sets params.<key> of a workflow node, creating params if needed.
func setParam(node *yaml.Node, key string, val *yaml.Node) {
	params := mapValue(node, "params")
	if params == nil {
		params = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "params"}, params)
	}
	if params.Kind != yaml.MappingNode {
		return // the loader will report it; nothing sensible to edit
	}
	if v := mapValue(params, key); v != nil {
		*v = *val
		return
	}
	params.Content = append(params.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, val)
}
