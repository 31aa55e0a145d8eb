package celenv

import (
	"cmp"
	"slices"
	"strings"
	"time"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Facts are values known at load for a static question ("does this edge
// fire when its predecessor failed with 412?"), by dotted path:
// "response.status", "outcome.status", "outcome.response.status",
// "nodes.try_decode.status", "request.format". Values are int64, string or
// bool.
type Facts map[string]any

// Decide evaluates the expression three-valued under facts: True or False
// when its value follows from them through literals, ==, !=, <, <=, >, >=,
// `in` a list literal, &&, || and !; Unknown otherwise. A nil Expr (no
// condition) is True.
func (x *Expr) Decide(f Facts) Tri {
	if x == nil {
		return True
	}
	v, ok := eval3(x.root, f)
	if b, isBool := v.(bool); ok && isBool {
		return fromBool(b)
	}
	return Unknown
}

// path renders a select chain rooted at an identifier ("response.status");
// "" when e is not one.
func path(e celast.Expr) string { return SelectPath(e) }

// SelectPath is the dotted path of a select chain rooted at an identifier
// ("request.headers", "nodes.probe.response.status"); "" when e is not one
// (a has() test included).
func SelectPath(e celast.Expr) string {
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent()
	case celast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() {
			return ""
		}
		if p := SelectPath(s.Operand()); p != "" {
			return p + "." + s.FieldName()
		}
	}
	return ""
}

// eval3 returns (value, true) when e's value is known under f.
func eval3(e celast.Expr, f Facts) (any, bool) {
	switch e.Kind() {
	case celast.LiteralKind:
		return literal(e.AsLiteral())
	case celast.IdentKind, celast.SelectKind:
		v, ok := f[path(e)]
		return v, ok
	case celast.ComprehensionKind:
		return evalComprehension(e, f)
	case celast.CallKind:
		c := e.AsCall()
		args := c.Args()
		switch c.FunctionName() {
		case operators.LogicalAnd, operators.LogicalOr:
			l, lok := eval3(args[0], f)
			r, rok := eval3(args[1], f)
			lb, lIs := l.(bool)
			rb, rIs := r.(bool)
			and := c.FunctionName() == operators.LogicalAnd
			// A known short-circuit value decides whatever the other side is.
			if (lok && lIs && lb != and) || (rok && rIs && rb != and) {
				return !and, true
			}
			if lok && rok && lIs && rIs {
				return and, true
			}
			return nil, false
		case operators.LogicalNot:
			if v, ok := eval3(args[0], f); ok {
				if b, isBool := v.(bool); isBool {
					return !b, true
				}
			}
			return nil, false
		case operators.Equals, operators.NotEquals, operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
			l, lok := eval3(args[0], f)
			r, rok := eval3(args[1], f)
			if !lok || !rok {
				return nil, false
			}
			return compare(c.FunctionName(), l, r)
		case overloads.Size:
			return evalSize(c, f)
		case "duration":
			// duration("1s") of a literal: the ending proof compares
			// outcome.duration with it (edges split on how long a node took).
			if len(args) == 1 && args[0].Kind() == celast.LiteralKind {
				if str, ok := args[0].AsLiteral().(types.String); ok {
					if d, err := time.ParseDuration(string(str)); err == nil {
						return d, true
					}
				}
			}
			return nil, false
		case operators.In:
			l, lok := eval3(args[0], f)
			if !lok || args[1].Kind() != celast.ListKind {
				return nil, false
			}
			var vals []any
			for _, el := range args[1].AsList().Elements() {
				v, ok := eval3(el, f)
				if !ok {
					return nil, false
				}
				vals = append(vals, v)
			}
			return slices.Contains(vals, l), true
		}
	}
	return nil, false
}

func literal(v ref.Val) (any, bool) {
	switch x := v.(type) {
	case types.Bool:
		return bool(x), true
	case types.Int:
		return int64(x), true
	case types.String:
		return string(x), true
	}
	return nil, false
}

func compare(op string, l, r any) (any, bool) {
	switch a := l.(type) {
	case int64:
		return order(op, a, r)
	case time.Duration:
		return order(op, a, r)
	case string:
		b, ok := r.(string)
		if !ok {
			return nil, false
		}
		return equality(op, a, b)
	case bool:
		b, ok := r.(bool)
		if !ok {
			return nil, false
		}
		return equality(op, a, b)
	}
	return nil, false
}

// order decides the ordering and equality operators between a and r when r
// has a's type.
func order[T cmp.Ordered](op string, a T, r any) (any, bool) {
	b, ok := r.(T)
	if !ok {
		return nil, false
	}
	switch op {
	case operators.Less:
		return a < b, true
	case operators.LessEquals:
		return a <= b, true
	case operators.Greater:
		return a > b, true
	case operators.GreaterEquals:
		return a >= b, true
	}
	return equality(op, a, b)
}

// equality decides == and != between two values of one type.
func equality[T comparable](op string, a, b T) (any, bool) {
	switch op {
	case operators.Equals:
		return a == b, true
	case operators.NotEquals:
		return a != b, true
	}
	return nil, false
}

// IntLiterals lists the int literals the expression compares something
// with (the statuses an edge condition distinguishes).
func (x *Expr) IntLiterals() []int64 {
	if x == nil {
		return nil
	}
	var out []int64
	celast.PreOrderVisit(x.root, celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.LiteralKind {
			if i, ok := e.AsLiteral().(types.Int); ok {
				out = append(out, int64(i))
			}
		}
	}))
	return out
}

// DurationLiterals lists the durations the expression compares something
// with (duration("1s")): the ending proof tries outcome.duration on each
// side of them, so edges that split on it are seen to be exclusive.
func (x *Expr) DurationLiterals() []time.Duration {
	if x == nil {
		return nil
	}
	var out []time.Duration
	celast.PreOrderVisit(x.root, celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.CallKind && e.AsCall().FunctionName() == "duration" {
			if v, ok := eval3(e, nil); ok {
				out = append(out, v.(time.Duration))
			}
		}
	}))
	return out
}

// Atoms lists, for each request-data path the expression compares with a
// value known under f (a literal, or a config var in f), the values worth
// trying to decide it: each compared value, its neighbours for ints, and
// Other for strings (a value equal to none of them). Bool paths read bare
// (request.stream, tokens.known) get true and false. The ending proof tries
// combinations of them, so guards such as `tokens.count > config.long` and
// `tokens.count <= config.long` are seen to be exclusive.
func (x *Expr) Atoms(f Facts) map[string][]any {
	if x == nil {
		return nil
	}
	out := map[string][]any{}
	add := func(p string, vs ...any) {
		for _, v := range vs {
			if !slices.Contains(out[p], v) {
				out[p] = append(out[p], v)
			}
		}
	}
	data := func(p string) bool {
		return strings.HasPrefix(p, "request.") || strings.HasPrefix(p, "tokens.")
	}
	value := func(p string, v any) {
		switch t := v.(type) {
		case int64:
			add(p, t-1, t, t+1)
		case string:
			add(p, t, Other)
		case bool:
			add(p, true, false)
		}
	}
	celast.PreOrderVisit(x.root, celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			if p := path(e); p == "request.stream" || p == "tokens.known" {
				add(p, true, false)
			}
		case celast.CallKind:
			c := e.AsCall()
			args := c.Args()
			switch c.FunctionName() {
			case operators.Equals, operators.NotEquals, operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
				for _, pair := range [][2]celast.Expr{{args[0], args[1]}, {args[1], args[0]}} {
					if p := path(pair[0]); data(p) {
						if v, ok := eval3(pair[1], f); ok {
							value(p, v)
						}
					}
				}
			case operators.In:
				if p := path(args[0]); data(p) && args[1].Kind() == celast.ListKind {
					for _, el := range args[1].AsList().Elements() {
						if v, ok := eval3(el, f); ok {
							value(p, v)
						}
					}
				}
			}
		}
	}))
	return out
}

// Other stands for a string equal to none of the literals an expression
// compares with.
const Other = "\x00other"
