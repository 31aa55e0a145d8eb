package config

import (
	"encoding/json"
	"sort"
	"strings"
)

// Kind is how an environment variable's text becomes a value.
type Kind uint8

const (
	KindString  Kind = iota // as is (durations, enums and paths too)
	KindInteger             // a JSON number when it parses as one, else a string the schema rejects
	KindBoolean             // "true" / "false", else a string the schema rejects
	KindList                // comma-separated strings
)

func (k Kind) String() string {
	return [...]string{"string", "integer", "boolean", "list"}[k]
}

// Key is one settable leaf of the config.
type Key struct {
	Ptr  string // JSON pointer, e.g. /server/listen
	Path string // dotted, e.g. server.listen
	Env  string // CELFLOW_SERVER_LISTEN
	Kind Kind
	Doc  string // the schema's description
}

// keys lists every leaf of the embedded schema, sorted by pointer. Objects
// with declared properties are walked; anything else is a leaf.
var keys = func() []Key {
	var root map[string]any
	if err := json.Unmarshal(schemaJSON, &root); err != nil {
		panic("config: embedded schema: " + err.Error())
	}
	var out []Key
	walk(root, root, "", &out)
	sort.Slice(out, func(i, j int) bool { return out[i].Ptr < out[j].Ptr })
	return out
}()

// Keys returns every key of the serve config (docs, tests, env overrides).
func Keys() []Key { return append([]Key(nil), keys...) }

func walk(root, s map[string]any, ptr string, out *[]Key) {
	props, _ := s["properties"].(map[string]any)
	if len(props) > 0 {
		for name, p := range props {
			walk(root, p.(map[string]any), ptr+"/"+name, out)
		}
		return
	}
	path := strings.ReplaceAll(strings.TrimPrefix(ptr, "/"), "/", ".")
	doc, _ := s["description"].(string)
	*out = append(*out, Key{
		Ptr:  ptr,
		Path: path,
		Env:  "CELFLOW_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_")),
		Kind: kindOf(root, s),
		Doc:  doc,
	})
}

// kindOf reads the leaf's type, following local and shared $refs.
func kindOf(root, s map[string]any) Kind {
	if ref, ok := s["$ref"].(string); ok {
		switch {
		case strings.HasPrefix(ref, "#/$defs/"):
			defs, _ := root["$defs"].(map[string]any)
			if d, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any); ok {
				return kindOf(root, d)
			}
		case strings.HasSuffix(ref, "_int"):
			return KindInteger
		}
		return KindString // defs.json durations
	}
	switch t := s["type"].(type) {
	case string:
		switch t {
		case "integer", "number": // a number's text parses the same way
			return KindInteger
		case "boolean":
			return KindBoolean
		case "array":
			return KindList
		}
	}
	return KindString // strings, enums, string-or-object (workflow)
}
