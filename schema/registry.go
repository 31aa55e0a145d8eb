package schema

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v5"
)

// Base is the prefix of every celflow schema $id.
const Base = "https://celflow.dev/schema/"

// Well-known schema ids.
const (
	WorkflowID = Base + "workflow.json"
	DefsID     = Base + "defs.json"
)

// NodeSchemaID is the id under which a node type's params schema is registered.
func NodeSchemaID(nodeType string) string { return Base + "node/" + nodeType + ".json" }

//go:embed workflow.json defs.json
var embedded embed.FS

var (
	mu       sync.Mutex
	sources  = map[string][]byte{}
	compiled = map[string]*jsonschema.Schema{}
	compiler *jsonschema.Compiler
	compiles atomic.Int64
)

func init() {
	for id, name := range map[string]string{WorkflowID: "workflow.json", DefsID: "defs.json"} {
		b, err := embedded.ReadFile(name)
		if err != nil {
			panic(err)
		}
		if err := Register(id, b); err != nil {
			panic(err)
		}
	}
}

// CompileCount is how many schemas have been compiled since start. Schemas
// compile once, on first use; tests assert this does not move per request.
func CompileCount() int64 { return compiles.Load() }

// Register adds a schema document under id. Registering the same bytes twice
// is a no-op; different bytes under one id is an error.
func Register(id string, src []byte) error {
	mu.Lock()
	defer mu.Unlock()
	if old, ok := sources[id]; ok {
		if bytes.Equal(old, src) {
			return nil
		}
		return fmt.Errorf("schema %s registered twice with different content", id)
	}
	if !json.Valid(src) {
		return fmt.Errorf("schema %s is not valid JSON", id)
	}
	if compiler == nil {
		compiler = newCompiler()
	}
	if err := compiler.AddResource(id, bytes.NewReader(src)); err != nil {
		return fmt.Errorf("schema %s: %w", id, err)
	}
	sources[id] = src
	return nil
}

// Source returns a registered schema's bytes (for `celflow schema`).
func Source(id string) ([]byte, bool) {
	mu.Lock()
	defer mu.Unlock()
	b, ok := sources[id]
	return b, ok
}

// Compiled returns the compiled schema for id, compiling it on first use.
func Compiled(id string) (*jsonschema.Schema, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := compiled[id]; ok {
		return s, nil
	}
	if _, ok := sources[id]; !ok {
		return nil, fmt.Errorf("schema %s is not registered", id)
	}
	s, err := compiler.Compile(id)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", id, err)
	}
	compiles.Add(1)
	compiled[id] = s
	return s, nil
}

func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	// In celflow schemas "duration" is a Go duration ("30s", "1m30s"), the
	// spelling every timeout in our YAML uses, not ISO 8601.
	c.Formats["duration"] = isGoDuration
	c.Formats["go-duration"] = isGoDuration
	c.RegisterExtension("celflow-int64", jsonschema.MustCompileString("int64-meta.json", `{}`), int64Ext{})
	// Refuse to fetch anything: every $ref must point at a registered schema.
	c.LoadURL = func(u string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("schema %s is not registered", u)
	}
	return c
}

func isGoDuration(v any) bool {
	s, ok := v.(string)
	if !ok {
		return true // format applies to strings only; "type" rejects the rest
	}
	d, err := time.ParseDuration(s)
	return err == nil && d >= 0 // no celflow duration means anything below zero
}

// int64Ext makes every `"type": "integer"` also mean "fits in int64", so a
// YAML 1e19 is rejected wherever an integer is expected.
type int64Ext struct{}

type int64Check struct{}

var (
	minInt64 = new(big.Rat).SetInt64(-1 << 63)
	maxInt64 = new(big.Rat).SetInt64(1<<63 - 1)
)

func (int64Ext) Compile(_ jsonschema.CompilerContext, m map[string]any) (jsonschema.ExtSchema, error) {
	switch t := m["type"].(type) {
	case string:
		if t == "integer" {
			return int64Check{}, nil
		}
	case []any:
		for _, x := range t {
			if x == "integer" {
				return int64Check{}, nil
			}
		}
	}
	return nil, nil
}

func (int64Check) Validate(ctx jsonschema.ValidationContext, v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return nil // "type" reports non-integers
	}
	if r.Cmp(minInt64) < 0 || r.Cmp(maxInt64) > 0 {
		return ctx.Error("type", "expected integer, got %s (out of the 64-bit range)", n)
	}
	return nil
}

// Validate checks the value at ptr of doc against the registered schema id
// and returns one diagnostic per problem, at the YAML position of the
// offending value (or key, for unknown fields).
func Validate(doc *Doc, id string, ptr string) Diagnostics {
	v, ok := doc.Value(ptr)
	if !ok {
		return nil
	}
	return ValidateValue(doc, id, ptr, v)
}

// ValidateValue is Validate for a value that stands at ptr but may not be
// in the document (a defaulted `params: {}`): problems inside it are
// placed at ptr's nearest existing ancestor.
func ValidateValue(doc *Doc, id string, ptr string, v any) Diagnostics {
	s, err := Compiled(id)
	if err != nil {
		return Diagnostics{doc.Diag(ptr, Error, "internal: "+err.Error()).R(RuleInternal)}
	}
	err = s.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return Diagnostics{doc.Diag(ptr, Error, err.Error()).R(RuleSchema)}
	}
	var ds Diagnostics
	for _, p := range expandUnknown(leaves(ve), doc, ptr) {
		ds = append(ds, p.diag(doc, ptr))
	}
	return ds.Sort()
}

// problem is one validation failure, in instance terms.
type problem struct {
	inst, keyword, msg string
	v                  any
	format             string // the failing schema's format ("duration"), for a type problem
}

// leaves flattens a validation error tree into its most specific causes.
// For oneOf/anyOf, branches that failed only on "type" are dropped when a
// branch of the right type exists; otherwise one summary is reported.
func leaves(ve *jsonschema.ValidationError) []problem {
	kw := lastSeg(ve.KeywordLocation)
	if len(ve.Causes) == 0 {
		p := problem{inst: ve.InstanceLocation, keyword: kw, msg: ve.Message}
		if kw == "type" {
			p.format = formatAt(ve.AbsoluteKeywordLocation)
		}
		return []problem{p}
	}
	if kw == "oneOf" || kw == "anyOf" {
		var keep []*jsonschema.ValidationError
		for _, c := range ve.Causes {
			if !(len(c.Causes) == 0 && lastSeg(c.KeywordLocation) == "type") {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			return []problem{{inst: ve.InstanceLocation, keyword: "type", msg: "expected " + branchTypes(ve.Causes)}}
		}
		if len(keep) == 1 {
			return leaves(keep[0])
		}
		return []problem{{inst: ve.InstanceLocation, keyword: kw, msg: "matches none of the allowed forms"}}
	}
	var out []problem
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

func branchTypes(cs []*jsonschema.ValidationError) string {
	var ts []string
	for _, c := range cs {
		m := strings.TrimPrefix(c.Message, "expected ")
		if i := strings.Index(m, ", but got"); i >= 0 {
			m = m[:i]
		}
		ts = append(ts, m)
	}
	sort.Strings(ts)
	return strings.Join(ts, " or ")
}

func lastSeg(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// formatAt returns the "format" beside the keyword at an absolute keyword
// location (id#/pointer/type): a number where a duration string belongs is
// then reported as the duration it fails to be (schema/duration), as the
// rules table says, not as a wrong type.
func formatAt(loc string) string {
	id, ptr, ok := strings.Cut(loc, "#")
	if !ok {
		return ""
	}
	src, ok := Source(id)
	if !ok {
		return ""
	}
	var v any
	if json.Unmarshal(src, &v) != nil {
		return ""
	}
	segs := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	if len(segs) == 0 {
		return ""
	}
	for _, seg := range segs[:len(segs)-1] { // up to the keyword's schema object
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		switch x := v.(type) {
		case map[string]any:
			v = x[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return ""
			}
			v = x[i]
		default:
			return ""
		}
	}
	m, _ := v.(map[string]any)
	f, _ := m["format"].(string)
	return f
}
