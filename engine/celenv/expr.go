package celenv

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/traits"
)

// Expr is one compiled, checked and planned expression. It is immutable
// and safe for concurrent use; evaluation takes the run's Activation.
type Expr struct {
	Src  string
	Kind Kind
	prog cel.Program

	// NodeReads lists every `nodes.<id>` in the expression (Name "" for a
	// bare `nodes`), with its position, for the "must precede" check.
	NodeReads []Read
	// ReadsMedia / ReadsTokens: the expression reads run data that nodes
	// write, so its providers must be ordered with the reader.
	ReadsMedia, ReadsTokens bool
	// Const is set when the expression is a bool literal.
	Const *bool
	// StatusCompares lists the comparisons of a response.status with an
	// int literal (for the engine's "a status the node never produces").
	StatusCompares []StatusCompare
	// CostMax is the load-time worst-case cost estimate; CostLimited says
	// the program also stops at run time past CostLimit (cost.go).
	CostMax     uint64
	CostLimited bool

	root celast.Expr
	// env and ast are kept for the load-time search (search.go): it
	// evaluates the expression again with state tracking to point at the
	// sub-expression that failed, and reads the checked types.
	env   *cel.Env
	ast   *cel.Ast
	track *tracked
}

// Read is one `nodes.<id>` reference inside an expression.
type Read struct {
	Name      string
	Line, Col int
}

func (x *Expr) analyze(a *cel.Ast, nodeIndex map[string]int) {
	nat := a.NativeRep()
	info := nat.SourceInfo()
	x.root = nat.Expr()
	operands := map[int64]bool{}
	celast.PreOrderVisit(x.root, celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			s := e.AsSelect()
			op := s.Operand()
			if op.Kind() == celast.IdentKind && op.AsIdent() == "nodes" {
				operands[op.ID()] = true
				loc := info.GetStartLocation(op.ID())
				x.NodeReads = append(x.NodeReads, Read{Name: s.FieldName(), Line: loc.Line(), Col: loc.Column()})
			}
		case celast.IdentKind:
			switch e.AsIdent() {
			case "media":
				x.ReadsMedia = true
			case "tokens":
				x.ReadsTokens = true
			}
		case celast.LiteralKind:
			if b, ok := e.AsLiteral().(types.Bool); ok && e.ID() == x.root.ID() {
				v := bool(b)
				x.Const = &v
			}
		}
	}))
	celast.PreOrderVisit(x.root, celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.IdentKind && e.AsIdent() == "nodes" && !operands[e.ID()] {
			loc := info.GetStartLocation(e.ID())
			x.NodeReads = append(x.NodeReads, Read{Line: loc.Line(), Col: loc.Column()})
		}
	}))
	_ = nodeIndex
}

// Bool evaluates a guard, edge condition or retry predicate. An evaluation
// error (a missing map key, a bad index) is returned, never read as false.
func (x *Expr) Bool(a *Activation) (bool, error) {
	v, _, err := x.prog.Eval(a)
	if err != nil {
		return false, x.costErr(err)
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%s %q evaluated to %s, not a bool", x.Kind, x.Src, v.Type().TypeName())
	}
	return bool(b), nil
}

// List evaluates a foreach expression.
func (x *Expr) List(a *Activation) (traits.Lister, error) {
	v, _, err := x.prog.Eval(a)
	if err != nil {
		return nil, x.costErr(err)
	}
	l, ok := v.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("foreach %q evaluated to %s, not a list", x.Src, v.Type().TypeName())
	}
	return l, nil
}

// costErr names the limit when an evaluation stopped on it.
func (x *Expr) costErr(err error) error {
	if x.CostLimited && strings.Contains(err.Error(), "cost limit exceeded") {
		return fmt.Errorf("%s %q exceeded the CEL cost limit of %d: %w", x.Kind, x.Src, CostLimit, err)
	}
	return err
}

// Tri is a three-valued truth.
type Tri uint8

const (
	Unknown Tri = iota
	True
	False
)

// OnRoute decides a guard statically for a request format ("chat",
// "completions", "generate") when the guard's value depends only on
// request.format: literals, ==, != and `in` against string literals,
// combined with &&, || and !. Anything else is Unknown. The compiler uses
// it to know which nodes surely run, or never run, on a route.
func (x *Expr) OnRoute(format string) Tri {
	if x == nil {
		return True
	}
	return tri(x.root, format)
}

func tri(e celast.Expr, format string) Tri {
	switch e.Kind() {
	case celast.LiteralKind:
		if b, ok := e.AsLiteral().(types.Bool); ok {
			return fromBool(bool(b))
		}
	case celast.CallKind:
		c := e.AsCall()
		args := c.Args()
		switch c.FunctionName() {
		case operators.LogicalAnd:
			l, r := tri(args[0], format), tri(args[1], format)
			switch {
			case l == False || r == False:
				return False
			case l == True && r == True:
				return True
			}
		case operators.LogicalOr:
			l, r := tri(args[0], format), tri(args[1], format)
			switch {
			case l == True || r == True:
				return True
			case l == False && r == False:
				return False
			}
		case operators.LogicalNot:
			switch tri(args[0], format) {
			case True:
				return False
			case False:
				return True
			}
		case operators.Equals, operators.NotEquals:
			s, ok := formatCompare(args[0], args[1])
			if !ok {
				s, ok = formatCompare(args[1], args[0])
			}
			if ok {
				eq := s == format
				if c.FunctionName() == operators.NotEquals {
					eq = !eq
				}
				return fromBool(eq)
			}
		case operators.In:
			if isFormat(args[0]) && args[1].Kind() == celast.ListKind {
				found := false
				for _, el := range args[1].AsList().Elements() {
					s, ok := strLit(el)
					if !ok {
						return Unknown
					}
					found = found || s == format
				}
				return fromBool(found)
			}
		}
	}
	return Unknown
}

func fromBool(b bool) Tri {
	if b {
		return True
	}
	return False
}

func formatCompare(a, b celast.Expr) (string, bool) {
	if !isFormat(a) {
		return "", false
	}
	return strLit(b)
}

func isFormat(e celast.Expr) bool {
	if e.Kind() != celast.SelectKind {
		return false
	}
	s := e.AsSelect()
	op := s.Operand()
	return s.FieldName() == "format" && !s.IsTestOnly() && op.Kind() == celast.IdentKind && op.AsIdent() == "request"
}

func strLit(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}
