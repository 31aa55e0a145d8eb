package schema

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// EditorBundle builds one self-contained JSON Schema of a workflow for
// editors (`celflow schema editor`): the workflow schema with the shared
// definitions (defs.json) and every node type's params schema embedded, and
// the node definition extended so that `type` completes from the known type
// names and `params` is checked against that type's schema. params maps a
// node type name to its params schema (nil or empty: an empty object).
//
// Embedded schemas lose their $id and $schema, and their references are
// rewritten to JSON pointers inside the bundle, so an editor that resolves
// only local references (most YAML language servers) follows them all.
// The loader never uses the bundle: it validates the workflow and each
// node's params separately, with positions (docs/workflow-reference.md,
// Load-time checks).
func EditorBundle(params map[string][]byte) ([]byte, error) {
	root, err := sourceMap(WorkflowID)
	if err != nil {
		return nil, err
	}
	defs, err := sourceMap(DefsID)
	if err != nil {
		return nil, err
	}
	bdefs, _ := root["$defs"].(map[string]any)
	if bdefs == nil {
		return nil, fmt.Errorf("schema: %s has no $defs", WorkflowID)
	}
	node, _ := bdefs["node"].(map[string]any)
	nodeProps, _ := node["properties"].(map[string]any)
	if nodeProps == nil {
		return nil, fmt.Errorf("schema: %s has no $defs/node properties", WorkflowID)
	}
	const sharedKey = "shared"
	if _, clash := bdefs[sharedKey]; clash {
		return nil, fmt.Errorf("schema: %s already defines $defs/%s", WorkflowID, sharedKey)
	}
	// Where each embedded resource now lives in the bundle.
	homes := map[string]string{DefsID: "#/$defs/" + sharedKey, WorkflowID: "#"}
	if err := rebase(defs, DefsID, homes); err != nil {
		return nil, err
	}
	bdefs[sharedKey] = defs
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	var branches []any
	for _, name := range names {
		key := "params." + name
		if _, clash := bdefs[key]; clash {
			return nil, fmt.Errorf("schema: %s already defines $defs/%s", WorkflowID, key)
		}
		ps := map[string]any{"type": "object", "additionalProperties": false}
		if src := params[name]; len(src) > 0 {
			ps = map[string]any{}
			if err := json.Unmarshal(src, &ps); err != nil {
				return nil, fmt.Errorf("schema: params of node type %s: %w", name, err)
			}
		}
		id, _ := ps["$id"].(string)
		if id == "" {
			id = NodeSchemaID(name)
		}
		h := map[string]string{id: "#/$defs/" + key}
		for k, v := range homes {
			h[k] = v
		}
		if err := rebase(ps, id, h); err != nil {
			return nil, fmt.Errorf("schema: params of node type %s: %w", name, err)
		}
		bdefs[key] = ps
		branches = append(branches, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"const": name}}, "required": []any{"type"}},
			"then": map[string]any{"properties": map[string]any{"params": map[string]any{"$ref": "#/$defs/" + key}}},
		})
	}
	if err := rebase(root, WorkflowID, homes); err != nil {
		return nil, err
	}
	if len(names) > 0 {
		typ, _ := nodeProps["type"].(map[string]any)
		if typ == nil {
			typ = map[string]any{}
		}
		enum := make([]any, len(names))
		for i, n := range names {
			enum[i] = n
		}
		typ["enum"] = enum
		nodeProps["type"] = typ
		node["allOf"] = append(asList(node["allOf"]), branches...)
	}
	root["$id"] = Base + "workflow.editor.json"
	root["description"] = "celflow workflow, bundled for editors with every node type's params (celflow schema editor)"
	return json.MarshalIndent(root, "", "  ")
}

func sourceMap(id string) (map[string]any, error) {
	src, ok := Source(id)
	if !ok {
		return nil, fmt.Errorf("schema: %s is not registered", id)
	}
	var m map[string]any
	if err := json.Unmarshal(src, &m); err != nil {
		return nil, fmt.Errorf("schema: %s: %w", id, err)
	}
	return m, nil
}

// rebase makes an embedded schema resource (whose $id is id) part of the
// bundle: it drops $id and $schema and rewrites every $ref, resolved
// against id, to a local pointer at the referenced resource's home in the
// bundle. A reference to a resource the bundle does not hold is an error.
// Nested resources (a subschema with its own $id) are not used by celflow's
// schemas and are refused.
func rebase(s map[string]any, id string, homes map[string]string) error {
	base, err := url.Parse(id)
	if err != nil {
		return fmt.Errorf("schema: bad $id %q: %w", id, err)
	}
	delete(s, "$id")
	delete(s, "$schema")
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case map[string]any:
			if x["format"] == "duration" {
				// JSON Schema's own "duration" format is ISO 8601 (P1D):
				// an editor would flag "100ms". celflow's is a Go duration.
				delete(x, "format")
				if _, has := x["pattern"]; !has {
					x["pattern"] = goDurationPattern
				}
			}
			if _, nested := x["$id"]; nested {
				return fmt.Errorf("schema: %s: nested $id is not supported in the editor bundle", id)
			}
			for k, e := range x {
				if ref, ok := e.(string); ok && k == "$ref" {
					u, err := url.Parse(ref)
					if err != nil {
						return fmt.Errorf("schema: %s: bad $ref %q", id, ref)
					}
					abs := base.ResolveReference(u)
					frag := abs.Fragment
					abs.Fragment = ""
					home, ok := homes[abs.String()]
					if !ok || (frag != "" && !strings.HasPrefix(frag, "/")) {
						return fmt.Errorf("schema: %s: $ref %q leaves the bundle", id, ref)
					}
					if home == "#" {
						x[k] = "#" + frag
					} else {
						x[k] = home + frag
					}
					continue
				}
				if err := walk(e); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(s)
}

// goDurationPattern matches what time.ParseDuration accepts.
const goDurationPattern = `^[+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
