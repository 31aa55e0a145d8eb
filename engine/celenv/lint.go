package celenv

import (
	"fmt"
	"slices"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// OutcomeWords are the values of NodeState.status.
var OutcomeWords = []string{"pending", "succeeded", "failed", "skipped", "omitted", "timed_out", "cancelled"}

// StatusCompare is one comparison of a node's response.status with an int
// literal. Node is the node id for nodes.<id>.response.status, "" for
// `response.status` / `outcome.response.status` (the edge's predecessor,
// or the retried node).
type StatusCompare struct {
	Node      string
	Status    int64
	Line, Col int
}

// lintOutputs checks nodes.X.outputs.Y against X's declared outputs on the
// parsed (unchecked) expression, so the message can name the node and its
// outputs; the checker's own "undefined field" at the same place is then
// dropped.
func (e *Env) lintOutputs(root celast.Expr, info *celast.SourceInfo) []Issue {
	var out []Issue
	celast.PreOrderVisit(root, celast.NewExprVisitor(func(x celast.Expr) {
		if x.Kind() != celast.SelectKind {
			return
		}
		s := x.AsSelect()
		p := path(s.Operand())
		parts := strings.Split(p, ".")
		if len(parts) != 3 || parts[0] != "nodes" || parts[2] != "outputs" {
			return
		}
		id := parts[1]
		i, ok := e.nodeIndex[id]
		if !ok {
			return // the checker reports the unknown node
		}
		have := slices.Sorted(slices.Values(e.outputsOf[id]))
		if slices.Contains(have, s.FieldName()) {
			return
		}
		loc := info.GetStartLocation(x.ID())
		msg := fmt.Sprintf("node %s (type %s) has no output %q", quote(id), e.decls[i].Type, s.FieldName())
		if c := closest(s.FieldName(), have); c != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", c)
		}
		if len(have) == 0 {
			msg += "; its type declares no outputs"
		} else {
			msg += "; its outputs: " + strings.Join(have, ", ")
		}
		hint := "read one of its outputs, or the node state (status, reason, response, duration, attempt)"
		if len(have) == 0 {
			hint = "read the node state (status, reason, response, duration, attempt) or the run's data (tokens.count is the prompt length)"
		}
		out = append(out, Issue{Line: loc.Line(), Col: loc.Column(), Msg: msg, Rule: "cel/unknown-output", Hint: hint})
	}))
	return out
}

// lint runs the checks that need the checked types: outcome words and HTTP
// statuses where they are compared, header names and header lookups that
// may fail. It also collects the status comparisons for the engine.
func (e *Env) lint(a *celast.AST) ([]Issue, []StatusCompare) {
	info := a.SourceInfo()
	var iss []Issue
	var cmps []StatusCompare
	at := func(x celast.Expr) (int, int) {
		l := info.GetStartLocation(x.ID())
		return l.Line(), l.Column()
	}
	typeName := func(x celast.Expr) string { return a.GetType(x.ID()).TypeName() }
	isState := func(x celast.Expr) bool {
		n := typeName(x)
		return n == NodeStateType || strings.HasPrefix(n, NodeStateType+".")
	}
	// statusOf classifies x as NodeState.status ("word") or Response.status ("http").
	statusOf := func(x celast.Expr) string {
		if x.Kind() != celast.SelectKind || x.AsSelect().IsTestOnly() || x.AsSelect().FieldName() != "status" {
			return ""
		}
		op := x.AsSelect().Operand()
		switch {
		case isState(op):
			return "word"
		case typeName(op) == ResponseType:
			return "http"
		}
		return ""
	}
	checkLit := func(kind string, status, lit celast.Expr) {
		line, col := at(lit)
		switch kind {
		case "word":
			s, ok := lit.AsLiteral().(types.String)
			if ok && !slices.Contains(OutcomeWords, string(s)) {
				msg := fmt.Sprintf("%q is not an outcome status", string(s))
				if c := closest(string(s), OutcomeWords); c != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", c)
				}
				iss = append(iss, Issue{Line: line, Col: col, Rule: "cel/outcome-word",
					Msg:  msg + "; the outcome words are " + strings.Join(OutcomeWords, ", "),
					Hint: "compare with one of " + strings.Join(OutcomeWords, ", ")})
			}
		case "http":
			n, ok := lit.AsLiteral().(types.Int)
			if !ok {
				return
			}
			if n != 0 && (n < 100 || n > 599) {
				iss = append(iss, Issue{Line: line, Col: col, Rule: "cel/http-status",
					Msg:  fmt.Sprintf("%d is not an HTTP status (100-599, or 0 when no call was made)", int64(n)),
					Hint: "compare with a real status such as 412 or 503"})
				return
			}
			node := ""
			if p := strings.Split(path(status), "."); len(p) == 4 && p[0] == "nodes" {
				node = p[1]
			}
			cmps = append(cmps, StatusCompare{Node: node, Status: int64(n), Line: line, Col: col})
		}
	}
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(x celast.Expr) {
		if x.Kind() != celast.CallKind {
			return
		}
		c := x.AsCall()
		args := c.Args()
		switch c.FunctionName() {
		case operators.Equals, operators.NotEquals, operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
			for _, pair := range [][2]celast.Expr{{args[0], args[1]}, {args[1], args[0]}} {
				if k := statusOf(pair[0]); k != "" && pair[1].Kind() == celast.LiteralKind {
					checkLit(k, pair[0], pair[1])
				}
			}
		case operators.In:
			if k := statusOf(args[0]); k != "" && args[1].Kind() == celast.ListKind {
				for _, el := range args[1].AsList().Elements() {
					if el.Kind() == celast.LiteralKind {
						checkLit(k, args[0], el)
					}
				}
			}
		}
	}))
	iss = append(iss, e.lintHeaders(a, at)...)
	return iss, cmps
}

// headersOf reports whether x is request.headers or a Response's headers
// (a map(string, string) a request may lack keys of).
func headersOf(a *celast.AST, x celast.Expr) bool {
	if x.Kind() != celast.SelectKind || x.AsSelect().IsTestOnly() || x.AsSelect().FieldName() != "headers" {
		return false
	}
	t := a.GetType(x.AsSelect().Operand().ID()).TypeName()
	return t == RequestType || t == ResponseType
}

// lintHeaders: a header name with capitals never matches (names are
// lowercased); `headers["k"]` (or headers.k) fails when the header is
// absent unless a test of the same key guards it on the way (`"k" in
// headers && ...`, `has(headers.k) ? ... : ...`).
func (e *Env) lintHeaders(a *celast.AST, at func(celast.Expr) (int, int)) []Issue {
	var iss []Issue
	caps := func(key string, lit celast.Expr) {
		if key != strings.ToLower(key) {
			line, col := at(lit)
			iss = append(iss, Issue{Line: line, Col: col, Rule: "cel/header-name-case",
				Msg:  fmt.Sprintf("header name %q has capitals: names are lowercased, so it never matches", key),
				Hint: fmt.Sprintf("write %q", strings.ToLower(key))})
		}
	}
	var walk func(x celast.Expr, proven []string)
	walk = func(x celast.Expr, proven []string) {
		switch x.Kind() {
		case celast.SelectKind:
			s := x.AsSelect()
			if headersOf(a, s.Operand()) {
				caps(s.FieldName(), x)
				if !s.IsTestOnly() && !slices.Contains(proven, s.FieldName()) {
					iss = append(iss, lookupIssue(at, x, s.Operand(), s.FieldName()))
				}
			}
			walk(s.Operand(), proven)
			return
		case celast.CallKind:
			c := x.AsCall()
			args := c.Args()
			switch c.FunctionName() {
			case operators.Index:
				if headersOf(a, args[0]) {
					key, isLit := strLit(args[1])
					if isLit {
						caps(key, args[1])
					}
					// headers.all(k, headers[k] ...): the iteration variable is a key.
					iterKey := args[1].Kind() == celast.IdentKind && slices.Contains(proven, iterMark+args[1].AsIdent())
					if !iterKey && (!isLit || !slices.Contains(proven, key)) {
						iss = append(iss, lookupIssue(at, x, args[0], key))
					}
				}
			case operators.OptIndex, operators.In:
				h, k := args[0], args[1]
				if c.FunctionName() == operators.In {
					h, k = args[1], args[0]
				}
				if key, ok := strLit(k); ok && headersOf(a, h) {
					caps(key, k)
				}
			case operators.LogicalAnd:
				walk(args[0], proven)
				walk(args[1], append(slices.Clone(proven), provenKeys(a, args[0])...))
				return
			case operators.Conditional:
				walk(args[0], proven)
				walk(args[1], append(slices.Clone(proven), provenKeys(a, args[0])...))
				walk(args[2], proven)
				return
			}
			if c.IsMemberFunction() {
				walk(c.Target(), proven)
			}
			for _, arg := range args {
				walk(arg, proven)
			}
			return
		case celast.ListKind:
			for _, el := range x.AsList().Elements() {
				walk(el, proven)
			}
		case celast.MapKind:
			for _, en := range x.AsMap().Entries() {
				walk(en.AsMapEntry().Key(), proven)
				walk(en.AsMapEntry().Value(), proven)
			}
		case celast.ComprehensionKind:
			cp := x.AsComprehension()
			walk(cp.IterRange(), proven)
			walk(cp.AccuInit(), proven)
			inner := proven
			if headersOf(a, cp.IterRange()) {
				inner = append(slices.Clone(proven), iterMark+cp.IterVar())
			}
			walk(cp.LoopCondition(), inner)
			walk(cp.LoopStep(), inner)
			walk(cp.Result(), proven)
		}
	}
	walk(a.Expr(), nil)
	return iss
}

// iterMark prefixes, in the proven list, an iteration variable ranging over
// a headers map (a key that surely exists; never a header name itself).
const iterMark = "\x00iter:"

// provenKeys are the header keys a true cond proves present.
func provenKeys(a *celast.AST, cond celast.Expr) []string {
	switch cond.Kind() {
	case celast.SelectKind:
		s := cond.AsSelect()
		if s.IsTestOnly() && headersOf(a, s.Operand()) {
			return []string{s.FieldName()}
		}
	case celast.CallKind:
		c := cond.AsCall()
		args := c.Args()
		switch c.FunctionName() {
		case operators.In:
			if key, ok := strLit(args[0]); ok && headersOf(a, args[1]) {
				return []string{key}
			}
		case operators.LogicalAnd:
			return append(provenKeys(a, args[0]), provenKeys(a, args[1])...)
		}
	}
	return nil
}

func lookupIssue(at func(celast.Expr) (int, int), x, headers celast.Expr, key string) Issue {
	line, col := at(x)
	h := path(headers)
	if h == "" {
		h = "headers"
	}
	if key == "" {
		return Issue{Line: line, Col: col, Rule: "cel/header-may-be-absent",
			Msg:  fmt.Sprintf("a lookup in %s with a computed key fails the request (500) when the header is absent", h),
			Hint: fmt.Sprintf("write %s[?key].orValue(\"\")", h)}
	}
	msg := fmt.Sprintf("%s[%q] fails the request (500) when the header is absent", h, key)
	key = strings.ToLower(key) // the hint also fixes the case
	return Issue{Line: line, Col: col, Rule: "cel/header-may-be-absent",
		Msg: msg,
		Hint: fmt.Sprintf("write %s[?%q].orValue(\"\"), or test it first: %q in %s && %s[%q] == ...",
			h, key, key, h, h, key)}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
