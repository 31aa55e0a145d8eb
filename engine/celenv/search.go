package celenv

import (
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
	"cel.dev/cel-go/parser"
)

// What the engine's load-time checks (engine/search.go, engine/loadlit.go)
// need of a compiled expression: its checked AST, a second evaluation that
// says which sub-expression failed, and the evaluation of the parts that
// read only vars and literals.

// Checked is the expression's checked AST: every sub-expression with its
// type and position.
func (x *Expr) Checked() *celast.AST { return x.ast.NativeRep() }

// tracked is the expression's program with state tracking, built on the
// first failure the search finds (never on the serve path).
type tracked struct {
	once sync.Once
	prog cel.Program
	err  error
}

// Locate evaluates x again against a, recording every sub-expression's
// value, and returns the innermost sub-expression whose value is an error
// (its children are not): the place a caret should point at, as a 1-based
// line and a 0-based column in runes, like Issue. ok is false when the
// evaluation does not fail.
func (x *Expr) Locate(a *Activation) (line, col int, node celast.Expr, ok bool) {
	t := x.track
	t.once.Do(func() {
		opts := []cel.ProgramOption{cel.EvalOptions(cel.OptTrackState)}
		if x.CostLimited {
			opts = append(opts, cel.CostLimit(CostLimit), cel.CostTracking(runtimeCost{}))
		}
		t.prog, t.err = x.env.Program(x.ast, opts...)
	})
	if t.err != nil {
		return 0, 0, nil, false
	}
	line, col, node, ok = locate(t.prog, x.Checked(), a)
	return line, col, node, ok
}

// locate evaluates prog (built with state tracking) against a and finds
// the innermost sub-expression of ast whose value is an error.
func locate(prog cel.Program, ast *celast.AST, a interpreter.Activation) (line, col int, node celast.Expr, ok bool) {
	_, det, err := prog.Eval(a)
	if err == nil || det == nil {
		return 0, 0, nil, false
	}
	st := det.State()
	isErr := func(e celast.Expr) bool {
		val, found := st.Value(e.ID())
		return found && types.IsError(val)
	}
	root := ast.Expr()
	if !isErr(root) {
		return 0, 0, nil, false
	}
	n := root
	for {
		next := celast.Expr(nil)
		for _, c := range Children(n) {
			if isErr(c) {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	loc := ast.SourceInfo().GetStartLocation(n.ID())
	return loc.Line(), loc.Column(), n, true
}

// Children lists a node's direct sub-expressions, in source order.
func Children(e celast.Expr) []celast.Expr {
	switch e.Kind() {
	case celast.CallKind:
		c := e.AsCall()
		var out []celast.Expr
		if c.IsMemberFunction() {
			out = append(out, c.Target())
		}
		return append(out, c.Args()...)
	case celast.SelectKind:
		return []celast.Expr{e.AsSelect().Operand()}
	case celast.ListKind:
		return e.AsList().Elements()
	case celast.MapKind:
		var out []celast.Expr
		for _, en := range e.AsMap().Entries() {
			out = append(out, en.AsMapEntry().Key(), en.AsMapEntry().Value())
		}
		return out
	case celast.StructKind:
		var out []celast.Expr
		for _, f := range e.AsStruct().Fields() {
			out = append(out, f.AsStructField().Value())
		}
		return out
	case celast.ComprehensionKind:
		cp := e.AsComprehension()
		return []celast.Expr{cp.IterRange(), cp.AccuInit(), cp.LoopCondition(), cp.LoopStep(), cp.Result()}
	}
	return nil
}

// Source is the text of a sub-expression of x, as CEL would print it.
func (x *Expr) Source(e celast.Expr) string {
	s, err := parser.Unparse(e, x.Checked().SourceInfo())
	if err != nil {
		return x.Src
	}
	return s
}

// EvalConst evaluates src, an expression that reads only `config` and
// literals, against the workflow's vars (the load-time check of a var used
// as a duration, a timestamp, an int, a regex or a map).
func (e *Env) EvalConst(src string) (ref.Val, error) {
	ast, iss := e.guard.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := e.guard.Program(ast)
	if err != nil {
		return nil, err
	}
	v, _, err := prg.Eval(constActivation{e.config})
	return v, err
}

type constActivation struct{ c *Config }

func (a constActivation) ResolveName(name string) (any, bool) {
	if name == "config" && a.c != nil {
		return a.c, true
	}
	return nil, false
}

func (a constActivation) Parent() interpreter.Activation { return nil }

// Describe prints a value for a message: strings quoted, others as CEL.
func Describe(v ref.Val) string {
	if s, ok := v.(types.String); ok {
		return fmt.Sprintf("%q", string(s))
	}
	return fmt.Sprint(v.Value())
}

// ConfigValues are the vars as CEL reads them (int64, float64, string,
// bool, []any, map[string]any), in the order of their sorted names.
func (e *Env) ConfigValues() []any { return e.config.Values }
