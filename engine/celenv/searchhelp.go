package celenv

import (
	"fmt"
	"strconv"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/parser"
)

// Helpers of the load-time counterexample searches: the workflow's
// (engine/search.go) and the admission priority's (priosearch.go).

// Enumerate calls try with the index of every dimension, simplest first:
// all defaults, then each set of k dimensions off their default for
// k = 1, 2, ..., each set in a fixed order; it stops when try says so.
func Enumerate(ns []int, try func([]int) bool) {
	idx := make([]int, len(ns))
	if !try(idx) {
		return
	}
	var subsets func(start, k int, chosen []int) bool
	product := func(chosen []int) bool {
		for _, d := range chosen {
			idx[d] = 1
		}
		defer func() {
			for _, d := range chosen {
				idx[d] = 0
			}
		}()
		for {
			if !try(idx) {
				return false
			}
			j := len(chosen) - 1
			for ; j >= 0; j-- {
				d := chosen[j]
				if idx[d]+1 < ns[d] {
					idx[d]++
					break
				}
				idx[d] = 1
			}
			if j < 0 {
				return true
			}
		}
	}
	subsets = func(start, k int, chosen []int) bool {
		if k == 0 {
			return product(chosen)
		}
		for d := start; d < len(ns); d++ {
			if ns[d] < 2 {
				continue
			}
			if !subsets(d+1, k-1, append(chosen, d)) {
				return false
			}
		}
		return true
	}
	for k := 1; k <= len(ns); k++ {
		if !subsets(0, k, nil) {
			return
		}
	}
}

// FixHint names a fix for n, the sub-expression of a whose evaluation
// failed (Locate), for the load-time search's diagnostics.
func FixHint(a *celast.AST, n celast.Expr) string {
	src := func(e celast.Expr) string {
		s, err := parser.Unparse(e, a.SourceInfo())
		if err != nil {
			return "…"
		}
		return s
	}
	const general = "guard the failing part (has(), [?…] with orValue, a size or presence test first), or give it a default"
	if n == nil {
		return general
	}
	switch n.Kind() {
	case celast.SelectKind:
		return "test the key first (has(" + src(n) + ")), or read it as " + src(n.AsSelect().Operand()) + "[?" + strconv.Quote(n.AsSelect().FieldName()) + "].orValue(…)"
	case celast.CallKind:
	default:
		return general
	}
	call := n.AsCall()
	args := call.Args()
	switch fn := call.FunctionName(); fn {
	case operators.Divide, operators.Modulo:
		d := src(args[1])
		return fmt.Sprintf("test the divisor first: %s != 0 && …, or %s == 0 ? 0 : %s", d, d, src(n))
	case operators.Index:
		on, key := src(args[0]), src(args[1])
		if a.GetType(args[0].ID()).Kind() == types.ListKind {
			return fmt.Sprintf("check the size first: size(%s) > %s && …, or write %s[?%s].orValue(…)", on, key, on, key)
		}
		return fmt.Sprintf("write %s[?%s].orValue(…) (a default for a missing key), or test %s in %s first", on, key, key, on)
	case "value":
		t := src(call.Target())
		return fmt.Sprintf("write %s.orValue(…) (a default when it is empty), or test %s.hasValue() first", t, t)
	case "int", "uint", "double", "duration", "timestamp", "bool":
		arg := src(args[0])
		return fmt.Sprintf("convert only well-formed text: test it first (%s.matches(…) ? %s(%s) : …), and give an absent value a default that converts", arg, fn, arg)
	case "matches":
		return "make the pattern a valid RE2 regular expression (a literal or a var: both are checked at load)"
	}
	return general
}
