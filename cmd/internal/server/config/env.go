package config

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/celflow/celflow/schema"
)

// applyEnv writes every non-empty CELFLOW_* variable into the document
// before validation, so that env values are checked exactly like file
// values (and keys absent from the file can be set). The text is parsed by
// the key's schema type; text that does not parse stays a string, which the
// schema then rejects under the variable's name.
func (c *Config) applyEnv(getenv func(string) string) schema.Diagnostics {
	if getenv == nil {
		return nil
	}
	root, ok := c.doc.Root.(map[string]any)
	if !ok {
		return nil // the schema reports the document's own type
	}
	var ds schema.Diagnostics
	for _, k := range keys {
		text := getenv(k.Env)
		if text == "" {
			continue // unset and empty are alike
		}
		if !set(root, k.Ptr, parseEnv(k.Kind, text)) {
			ds = append(ds, schema.Diagnostic{File: k.Env,
				Msg: "cannot set " + k.Path + ": the config file gives one of its parents a non-object value"})
			continue
		}
		if c.fromEnv == nil {
			c.fromEnv = map[string]string{}
		}
		c.fromEnv[k.Ptr] = k.Env
	}
	return ds
}

// parseEnv turns a variable's text into a JSON value of the key's kind.
func parseEnv(k Kind, text string) any {
	t := strings.TrimSpace(text)
	switch k {
	case KindInteger:
		// Numbers read as YAML reads them: 5.0 is 5; 4.5 and 1e19 stay
		// numbers that the integer and int64 rules reject; other text stays
		// a string the type rule rejects.
		if i, err := strconv.ParseInt(t, 10, 64); err == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		if f, err := strconv.ParseFloat(t, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			if f == math.Trunc(f) && math.Abs(f) < 9.2e18 {
				return json.Number(strconv.FormatInt(int64(f), 10))
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
	case KindBoolean:
		switch t {
		case "true":
			return true
		case "false":
			return false
		}
	case KindList:
		var out []any
		for _, s := range strings.Split(t, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return text
}

// set stores v at ptr, creating missing parent objects. It fails when a
// parent exists and is not an object.
func set(root map[string]any, ptr string, v any) bool {
	segs := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	m := root
	for _, s := range segs[:len(segs)-1] {
		next, ok := m[s]
		if !ok || next == nil {
			child := map[string]any{}
			m[s] = child
			m = child
			continue
		}
		if m, ok = next.(map[string]any); !ok {
			return false
		}
	}
	m[segs[len(segs)-1]] = v
	return true
}

// envDiags re-attributes diagnostics about env-set values to their
// variable: "CELFLOW_SERVER_LISTEN: server.listen: message".
func (c *Config) envDiags(ds schema.Diagnostics) schema.Diagnostics {
	if len(c.fromEnv) == 0 {
		return ds
	}
	for i := range ds {
		if env := c.envFor(ds[i].Path); env != "" {
			ds[i].File, ds[i].Line, ds[i].Col = env, 0, 0
		}
	}
	return ds
}

// envFor returns the variable that set the value at a dotted path (or one
// of its parents), "" when the file did.
func (c *Config) envFor(path string) string {
	for ptr, env := range c.fromEnv {
		p := c.doc.Path(ptr)
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return env
		}
	}
	return ""
}
