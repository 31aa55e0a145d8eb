// Package celenv is celflow's CEL environment: one cached base environment
// with typed variables (request, media, tokens), a per-workflow extension
// (nodes, config, and for edges outcome/response), compilation with result
// type checks and readable errors, and the per-run Activation.
//
// Every expression is compiled once, at load; CompileCount lets tests prove
// that nothing compiles per request.
package celenv

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
)

var compiles atomic.Int64

// CompileCount is the number of CEL expressions compiled since start.
func CompileCount() int64 { return compiles.Load() }

// Variables declared in every expression, and the extra ones of edge
// conditions and retry predicates (for did-you-mean hints and docs).
var (
	BaseVars = []string{"request", "media", "tokens", "nodes", "config"}
	EdgeVars = []string{"outcome", "response"}
)

var (
	baseOnce sync.Once
	baseEnv  *cel.Env
	baseErr  error
)

// base is the cached environment every workflow extends.
func base() (*cel.Env, error) {
	baseOnce.Do(func() {
		p, err := newProvider(nil)
		if err != nil {
			baseErr = err
			return
		}
		baseEnv, baseErr = cel.NewEnv(
			cel.CustomTypeProvider(p),
			cel.CustomTypeAdapter(p),
			ext.Strings(),
			hashLib(),
			cel.Variable("request", types.NewObjectType(RequestType)),
			cel.Variable("media", types.NewListType(types.NewObjectType(MediaType))),
			cel.Variable("tokens", types.NewObjectType(TokensType)),
			// request.headers[?"x-tenant"].orValue(""): a lookup that cannot fail.
			cel.OptionalTypes(),
		)
	})
	return baseEnv, baseErr
}

// Env is one workflow's environment: the base plus `nodes` (whose fields
// are the workflow's node ids) and `config` (its vars). It is immutable and
// safe for concurrent use once built.
type Env struct {
	guard, edge *cel.Env
	prov        *provider
	config      *Config
	fieldNames  []string // every field name of every type, for hints
	nodeIndex   map[string]int
	decls       []NodeDecl
	outputsOf   map[string][]string // node id → declared output names
}

// NodeDecl is one node as the environment sees it: its id and the outputs
// its type declares (readable, typed, as nodes.<id>.outputs.<name>).
type NodeDecl struct {
	ID      string
	Type    string // the node type, for messages
	Outputs []Output
}

// Output is one declared output of a node type. Type is a CEL type name:
// bool, int, double, string, duration or dyn.
type Output struct {
	Name, Type string
}

var outputTypes = map[string]*types.Type{
	"bool": types.BoolType, "int": types.IntType, "double": types.DoubleType,
	"string": types.StringType, "duration": types.DurationType, "dyn": types.DynType,
}

// outputZero is what an output reads as when the node did not produce it
// (it did not run, failed, or the type omits it on this path).
var outputZero = map[string]any{
	"bool": false, "int": int64(0), "double": 0.0, "string": "", "duration": time.Duration(0), "dyn": nil,
}

// NewEnv builds a workflow environment for nodes without declared outputs
// (tests and tools); see NewEnvNodes.
func NewEnv(nodeIDs []string, vars map[string]any) (*Env, error) {
	ds := make([]NodeDecl, len(nodeIDs))
	for i, id := range nodeIDs {
		ds[i].ID = id
	}
	return NewEnvNodes(ds, vars)
}

// NewEnvNodes builds a workflow environment. vars holds the workflow's vars
// as decoded JSON (json.Number for numbers); names must be CEL identifiers.
// Each node gets its own state type (celflow.NodeState.<id>) whose outputs
// field is an object with the node's declared outputs, so
// nodes.render.outputs.token_count is a load error when render declares no
// such output.
func NewEnvNodes(decls []NodeDecl, vars map[string]any) (*Env, error) {
	b, err := base()
	if err != nil {
		return nil, err
	}
	nodes := make([]field, len(decls))
	idx := make(map[string]int, len(decls))
	extra := map[string]*structDecl{}
	outputsOf := map[string][]string{}
	for i, nd := range decls {
		i := i
		idx[nd.ID] = i
		outName := OutputsType + "." + nd.ID
		stName := NodeStateType + "." + nd.ID
		var ofs []field
		for _, o := range nd.Outputs {
			t, ok := outputTypes[o.Type]
			if !ok {
				return nil, fmt.Errorf("node %s: output %s has unknown type %q", nd.ID, o.Name, o.Type)
			}
			name, zero := o.Name, outputZero[o.Type]
			ofs = append(ofs, field{name: name, typ: t,
				get: func(v any) any {
					if x, ok := v.(*nodeOutputs).Outputs[name]; ok {
						return x
					}
					return zero
				},
				isSet: func(v any) bool { _, ok := v.(*nodeOutputs).Outputs[name]; return ok }})
			outputsOf[nd.ID] = append(outputsOf[nd.ID], o.Name)
		}
		extra[outName] = newDecl(outName, ofs)
		extra[stName] = newDecl(stName, nodeStateFields(types.NewObjectType(outName),
			func(v any) any { return (*nodeOutputs)(v.(*NodeState)) }))
		nodes[i] = field{name: nd.ID, typ: types.NewObjectType(stName), get: func(v any) any { return &v.(*Nodes).States[i] }}
	}
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	cfg := &Config{Values: make([]any, len(names))}
	cfgFields := make([]field, len(names))
	for i, k := range names {
		i := i
		v, t := nativeVar(vars[k])
		cfg.Values[i] = v
		cfgFields[i] = field{name: k, typ: t, get: func(c any) any { return c.(*Config).Values[i] }}
	}
	extra[NodesType] = newDecl(NodesType, nodes)
	extra[ConfigType] = newDecl(ConfigType, cfgFields)
	p, err := newProvider(extra)
	if err != nil {
		return nil, err
	}
	g, err := b.Extend(
		cel.CustomTypeProvider(p),
		cel.CustomTypeAdapter(p),
		cel.Variable("nodes", types.NewObjectType(NodesType)),
		cel.Variable("config", types.NewObjectType(ConfigType)),
	)
	if err != nil {
		return nil, err
	}
	e, err := g.Extend(
		cel.Variable("outcome", types.NewObjectType(NodeStateType)),
		cel.Variable("response", types.NewObjectType(ResponseType)),
	)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var fields []string
	for _, d := range p.decls {
		for _, n := range d.names {
			if !seen[n] {
				seen[n] = true
				fields = append(fields, n)
			}
		}
	}
	sort.Strings(fields)
	return &Env{guard: g, edge: e, prov: p, config: cfg, fieldNames: fields, nodeIndex: idx, decls: decls, outputsOf: outputsOf}, nil
}

// nativeVar converts a JSON var to the Go value CEL reads and its CEL type:
// integral numbers are int, other numbers double.
func nativeVar(v any) (any, *types.Type) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, types.IntType
		}
		f, _ := x.Float64()
		return f, types.DoubleType
	case string:
		return x, types.StringType
	case bool:
		return x, types.BoolType
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i], _ = nativeVar(e)
		}
		return out, types.NewListType(types.DynType)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k], _ = nativeVar(e)
		}
		return out, types.NewMapType(types.StringType, types.DynType)
	}
	return nil, types.DynType
}

// Kind is what an expression is for; it decides the variables in scope and
// the result type required.
type Kind uint8

const (
	Guard   Kind = iota // when: bool, no outcome
	Edge                // needs[].if: bool, with outcome/response of the predecessor
	Retry               // retry.if: bool, with outcome/response of the node's last attempt
	ForEach             // foreach: a list
)

func (k Kind) String() string {
	return [...]string{"guard", "edge condition", "retry predicate", "foreach list"}[k]
}

// Issue is one compile problem, located inside the expression: Line is
// 1-based, Col 0-based in runes (as CEL reports them).
type Issue struct {
	Line, Col int
	Msg       string
	Rule      string // the rule id (engine.RuleCEL*), e.g. "cel/syntax"
	Hint      string // a fix, when one is known
}

// Compile parses, type-checks and plans src. It never returns a nil Expr
// without issues.
func (e *Env) Compile(src string, kind Kind) (*Expr, []Issue) {
	env := e.guard
	if kind == Edge || kind == Retry {
		env = e.edge
	}
	compiles.Add(1)
	parsed, iss := env.Parse(src)
	if iss != nil && iss.Err() != nil {
		if line, col, ok := loneAssign(src); ok {
			// One issue for the likely cause, not the parser's cascade.
			return nil, []Issue{{Line: line, Col: col, Rule: "cel/syntax",
				Msg:  "`=` is not an operator in CEL: did you mean `==`?",
				Hint: "compare with == (response.status == 412); CEL has no assignment"}}
		}
		return nil, e.issues(iss.Errors(), kind, nil)
	}
	pre := e.lintOutputs(parsed.NativeRep().Expr(), parsed.NativeRep().SourceInfo())
	ast, iss := env.Check(parsed)
	if iss != nil && iss.Err() != nil {
		return nil, e.issues(iss.Errors(), kind, pre)
	}
	if len(pre) > 0 {
		return nil, pre
	}
	t := ast.OutputType()
	switch {
	case t.Kind() == types.DynKind:
		want := "a bool"
		if kind == ForEach {
			want = "a list"
		}
		return nil, []Issue{{Line: 1, Col: 0, Rule: "cel/dyn-result",
			Msg:  fmt.Sprintf("%s must be %s, but its type is only known at run time (dyn)", withArticle(kind.String()), want),
			Hint: "compare or convert the value so its type is known at load (x == \"...\", bool(x), size(x) > 0)"}}
	case kind == ForEach:
		if t.Kind() != types.ListKind {
			return nil, []Issue{{Line: 1, Col: 0, Msg: fmt.Sprintf("a foreach list must be a list, got %s", typeName(t)), Rule: "cel/result-type"}}
		}
	default:
		if t.Kind() != types.BoolKind {
			return nil, []Issue{{Line: 1, Col: 0, Msg: fmt.Sprintf("%s must be a bool expression, got %s", withArticle(kind.String()), typeName(t)), Rule: "cel/result-type"}}
		}
	}
	lints, cmps := e.lint(ast.NativeRep())
	if len(lints) > 0 {
		return nil, lints
	}
	est, err := env.EstimateCost(ast, sizeEstimator{})
	if err != nil {
		return nil, []Issue{{Line: 1, Col: 0, Msg: "cost estimate: " + err.Error(), Rule: "internal/error"}}
	}
	if est.Max > CostLimit {
		return nil, []Issue{costIssue(est.Max)}
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	limited := est.Max > RuntimeLimitAbove || iterates(ast.NativeRep().Expr())
	if limited {
		opts = append(opts, cel.CostLimit(CostLimit), cel.CostTracking(runtimeCost{}))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, []Issue{{Line: 1, Col: 0, Msg: err.Error(), Rule: "internal/error"}}
	}
	x := &Expr{Src: src, Kind: kind, prog: prg, StatusCompares: cmps, CostMax: est.Max, CostLimited: limited, env: env, ast: ast, track: &tracked{}}
	x.analyze(ast, e.nodeIndex)
	return x, nil
}

// loneAssign finds a single = outside string literals (not ==, !=, <=,
// >=): the usual cause of a parse error in a condition written like an
// assignment. line is 1-based, col 0-based in runes, as cel-go reports.
func loneAssign(src string) (line, col int, ok bool) {
	rs := []rune(src)
	line, lineStart := 1, 0
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\n':
			line, lineStart = line+1, i+1
		case c == '"' || c == '\'':
			raw := i > 0 && (rs[i-1] == 'r' || rs[i-1] == 'R')
			triple := i+2 < len(rs) && rs[i+1] == c && rs[i+2] == c
			j := i + 1
			if triple {
				j = i + 3
			}
			for ; j < len(rs); j++ {
				if rs[j] == '\\' && !raw {
					j++
					continue
				}
				if rs[j] == '\n' {
					line, lineStart = line+1, j+1
				}
				if rs[j] == c && (!triple || j+2 < len(rs) && rs[j+1] == c && rs[j+2] == c) {
					if triple {
						j += 2
					}
					break
				}
			}
			i = j
		case c == '=':
			if i+1 < len(rs) && rs[i+1] == '=' {
				i++ // ==
				continue
			}
			if i > 0 && strings.ContainsRune("!<>=", rs[i-1]) {
				continue // !=, <=, >=
			}
			// Beside another operator (== = x) it is a typo of another kind.
			p, n := i-1, i+1
			for p >= 0 && unicode.IsSpace(rs[p]) {
				p--
			}
			for n < len(rs) && unicode.IsSpace(rs[n]) {
				n++
			}
			if p < 0 || n >= len(rs) || strings.ContainsRune("=!<>&|", rs[p]) || rs[n] == '=' {
				continue
			}
			return line, i - lineStart, true
		}
	}
	return 0, 0, false
}

// ruleOf classifies a cel-go checker or parser message.
func ruleOf(msg string) string {
	switch {
	case strings.Contains(msg, "undeclared reference"):
		return "cel/undeclared-reference"
	case strings.Contains(msg, "undefined field"):
		return "cel/undefined-field"
	case strings.HasPrefix(msg, "Syntax error") || strings.Contains(msg, "mismatched input") || strings.Contains(msg, "token recognition"):
		return "cel/syntax"
	}
	return "cel/type-mismatch"
}

// issues converts cel-go errors, skipping those at a place pre already
// reports better.
func (e *Env) issues(errs []*common.Error, kind Kind, pre []Issue) []Issue {
	out := pre
	for _, er := range errs {
		line, col := er.Location.Line(), er.Location.Column()
		if slices.ContainsFunc(pre, func(p Issue) bool { return p.Line == line && p.Col == col }) {
			continue
		}
		out = append(out, Issue{Line: line, Col: col, Msg: e.improve(er.Message, kind), Rule: ruleOf(er.Message)})
	}
	return out
}

func typeName(t *types.Type) string {
	if t == nil {
		return "unknown"
	}
	return t.String()
}

// improve rewrites cel-go's messages into celflow's voice, adding
// did-you-mean hints for undeclared names and unknown fields.
func (e *Env) improve(msg string, kind Kind) string {
	if name, ok := between(msg, "undeclared reference to '", "'"); ok {
		cands := append([]string(nil), BaseVars...)
		if kind == Edge || kind == Retry {
			cands = append(cands, EdgeVars...)
		}
		out := fmt.Sprintf("undeclared reference to %q", name)
		if s := closest(name, cands); s != "" {
			out += fmt.Sprintf(" (did you mean %q?)", s)
		} else if kind == Guard || kind == ForEach {
			if closest(name, EdgeVars) != "" {
				out += " (outcome and response exist only in edge conditions and retry predicates)"
			}
		}
		return out
	}
	if name, ok := between(msg, "undefined field '", "'"); ok {
		out := fmt.Sprintf("undefined field %q", name)
		if s := closest(name, e.fieldNames); s != "" {
			out += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return out
	}
	return msg
}

func between(s, pre, post string) (string, bool) {
	i := strings.Index(s, pre)
	if i < 0 {
		return "", false
	}
	s = s[i+len(pre):]
	j := strings.Index(s, post)
	if j < 0 {
		return "", false
	}
	return s[:j], true
}

// closest returns the candidate within edit distance max(1, len/3) of
// name, or "" when none is close.
func closest(name string, cands []string) string {
	best, bestD := "", 1<<30
	limit := max(1, len(name)/3)
	for _, c := range cands {
		if d := Distance(name, c); d <= limit && d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" && len(name) >= 4 {
		for _, c := range cands { // "failure" → "failed": same stem
			if strings.HasPrefix(c, name[:4]) {
				return c
			}
		}
	}
	return best
}

// Distance is the Damerau-Levenshtein (optimal string alignment) distance,
// so a swapped pair of letters ("requets") costs one.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// withArticle puts "a" or "an" before a noun phrase.
func withArticle(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}
