package celenv

import (
	celast "cel.dev/cel-go/common/ast"
)

// SizeFact is the Facts key of a list's size: Facts{SizeFact("media"): int64(0)}
// says the request's media list is empty (a chat route with no fetch-media
// before the expression's node), so `size(media) > 0`, `media.size() > 0`
// and `media.exists(...)` decide false there.
func SizeFact(p string) string { return "size(" + p + ")" }

// evalSize decides size(x) and x.size() of a path whose size is a fact.
func evalSize(c celast.CallExpr, f Facts) (any, bool) {
	var arg celast.Expr
	switch {
	case c.IsMemberFunction() && len(c.Args()) == 0:
		arg = c.Target()
	case !c.IsMemberFunction() && len(c.Args()) == 1:
		arg = c.Args()[0]
	default:
		return nil, false
	}
	p := path(arg)
	if p == "" {
		return nil, false
	}
	v, ok := f[SizeFact(p)]
	return v, ok
}

// evalComprehension decides a macro over a list known to be empty: its
// result is then its accumulator's initial value when the result is the
// accumulator itself (exists: false, all: true). Other macros over an
// empty list, and any over a list not known empty, stay unknown.
func evalComprehension(e celast.Expr, f Facts) (any, bool) {
	cp := e.AsComprehension()
	p := path(cp.IterRange())
	if p == "" {
		return nil, false
	}
	if n, ok := f[SizeFact(p)].(int64); !ok || n != 0 {
		return nil, false
	}
	if r := cp.Result(); r.Kind() != celast.IdentKind || r.AsIdent() != cp.AccuVar() {
		return nil, false
	}
	if cp.AccuInit().Kind() != celast.LiteralKind {
		return nil, false
	}
	return literal(cp.AccuInit().AsLiteral())
}
