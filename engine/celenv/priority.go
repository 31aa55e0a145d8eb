package celenv

import (
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// The admission priority (config key admission.priority) is evaluated
// before the request body is read, so its environment is a small one of
// its own: `request` only, the same celflow.Request object as in guards,
// of which only the fields known from the request line and headers may be
// read (id, format, path, headers). model and stream come from the body
// and are refused at load rather than silently read as "" and false.

var (
	prioOnce sync.Once
	prioEnv  *cel.Env
	prioErr  error
)

// PriorityFields are the request fields a priority expression may read.
var PriorityFields = []string{"id", "format", "path", "headers"}

func priorityEnv() (*cel.Env, error) {
	prioOnce.Do(func() {
		p, err := newProvider(nil)
		if err != nil {
			prioErr = err
			return
		}
		prioEnv, prioErr = cel.NewEnv(
			cel.CustomTypeProvider(p),
			cel.CustomTypeAdapter(p),
			ext.Strings(),
			hashLib(),
			cel.Variable("request", types.NewObjectType(RequestType)),
		)
	})
	return prioEnv, prioErr
}

// Priority is a compiled admission priority: an int expression over the
// request's headers. Immutable and safe for concurrent use.
type Priority struct {
	Src  string
	prog cel.Program
	// Log rate-limits the log of its run-time errors (one config
	// generation's, like the expression).
	Log *ErrorLog

	env *cel.Env // for the load-time search (priosearch.go)
	ast *cel.Ast
}

// CompilePriority parses, type-checks (the result must be an int) and
// plans src. Issues are located inside the expression as Compile's are.
func CompilePriority(src string) (*Priority, []Issue) {
	env, err := priorityEnv()
	if err != nil {
		return nil, []Issue{{Line: 1, Col: 0, Msg: "internal: CEL environment: " + err.Error()}}
	}
	compiles.Add(1)
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var out []Issue
		for _, er := range iss.Errors() {
			msg := er.Message
			if name, ok := between(msg, "undeclared reference to '", "'"); ok {
				msg = fmt.Sprintf("undeclared reference to %q (a priority reads only request.headers, request.format, request.path and request.id)", name)
			}
			out = append(out, Issue{Line: er.Location.Line(), Col: er.Location.Column(), Msg: msg})
		}
		return nil, out
	}
	if t := ast.OutputType(); t.Kind() != types.IntKind {
		return nil, []Issue{{Line: 1, Col: 0, Msg: fmt.Sprintf("a priority must be an int expression, got %s (wrap a header in int(...) or use a conditional: request.headers[\"x-tier\"] == \"gold\" ? 10 : 0)", typeName(t))}}
	}
	if out := bodyReads(ast); len(out) > 0 {
		return nil, out
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, []Issue{{Line: 1, Col: 0, Msg: err.Error()}}
	}
	return &Priority{Src: src, prog: prg, Log: &ErrorLog{}, env: env, ast: ast}, nil
}

// bodyReads refuses request fields that come from the body.
func bodyReads(a *cel.Ast) []Issue {
	nat := a.NativeRep()
	info := nat.SourceInfo()
	var out []Issue
	celast.PreOrderVisit(nat.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.SelectKind {
			return
		}
		s := e.AsSelect()
		op := s.Operand()
		if op.Kind() != celast.IdentKind || op.AsIdent() != "request" {
			return
		}
		switch s.FieldName() {
		case "id", "format", "path", "headers":
			return
		}
		loc := info.GetStartLocation(op.ID())
		out = append(out, Issue{Line: loc.Line(), Col: loc.Column(), Msg: fmt.Sprintf(
			"request.%s is not known at admission: the body is not read yet (a priority reads only request.headers, request.format, request.path and request.id)", s.FieldName())})
	}))
	return out
}

// Eval computes the priority of r. An evaluation error (a header absent
// from request.headers read without `in`, an int() of a non-number) is
// returned; the caller decides the fallback.
func (p *Priority) Eval(r *Request) (int64, error) {
	v, _, err := p.prog.Eval(prioActivation{r})
	if err != nil {
		return 0, err
	}
	i, ok := v.(types.Int)
	if !ok {
		return 0, fmt.Errorf("priority %q evaluated to %s, not an int", p.Src, v.Type().TypeName())
	}
	return int64(i), nil
}

// prioActivation resolves `request` only.
type prioActivation struct{ r *Request }

var _ interpreter.Activation = prioActivation{}

func (a prioActivation) ResolveName(name string) (any, bool) {
	if name == "request" {
		return a.r, true
	}
	return nil, false
}

func (a prioActivation) Parent() interpreter.Activation { return nil }
