package engine

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// Load-time checks of what is known at load: the vars' values (no null
// inside a list or map, no list or map mixing types, every conversion, map
// lookup and regex of a var evaluated), and the literals expressions
// compare request fields with (paths, formats, media types, modalities,
// numbers written as strings). The workflow's `allow:` list accepts
// findings of the search and of these checks at a path.

const (
	RuleVarMixed       = "vars/mixed-types"
	RuleVarUse         = "vars/invalid-use"
	RuleCELPath        = "cel/unknown-path"
	RuleCELFormat      = "cel/unknown-format"
	RuleCELMediaType   = "cel/media-type"
	RuleCELModality    = "cel/modality-word"
	RuleCELStringOrder = "cel/string-order"
	RuleAllowUnused    = "allow/unused"
)

func init() {
	schema.DefineRules(
		schema.Rule{ID: RuleCELMayFail, Summary: "an expression that fails at run time for some request the workflow can receive (a division by zero, an index past the end, a missing map key, .value() of an empty optional, a conversion of malformed text): the load-time search found one and prints it; an error under on_cel_error: fail (the request would be answered 500), a warning under safe (it reads as false), an error for a foreach list", Fix: "guard the failing part (has(), [?…] with orValue, a size, divisor or presence test first), give it a default, or accept it in allow: with a reason"},
		schema.Rule{ID: RuleVarMixed, Summary: "a vars: list or map whose values have different types (\"512\" beside 4096), which comparisons and arithmetic fail on at run time", Fix: "write every value in one type (4096, not \"4096\")"},
		schema.Rule{ID: RuleVarUse, Summary: "a var an expression converts or looks up in a way that fails on every request: duration(config.x) of \"5\", timestamp() or int() of malformed text, a regex that does not compile, a missing map key, an index past the end", Fix: "fix the var's value (a Go duration with a unit, an RFC 3339 timestamp, an integer, a valid RE2 regex, the missing key)"},
		schema.Rule{ID: RuleCELPath, Summary: "request.path compared with a path no route has (an error), or with the path of a route the workflow does not serve (a warning): the comparison never holds", Fix: "compare with a served route's path: /v1/chat/completions, /v1/completions or /inference/v1/generate"},
		schema.Rule{ID: RuleCELFormat, Summary: "request.format compared with a word that is not a format (an error), or with a format the workflow does not serve (a warning): the comparison never holds", Fix: "compare with chat, completions or generate, one the workflow's routes: serve"},
		schema.Rule{ID: RuleCELMediaType, Summary: "a media item's type compared with a value that is not a MIME type (\"image_url\", \"image\"): type holds the item's media type, image/png", Fix: "compare type with a MIME type (m.type == \"image/png\", m.type.startsWith(\"image/\")), or compare m.modality with image, video or audio"},
		schema.Rule{ID: RuleCELModality, Summary: "a media item's modality compared with a word that is not a modality (\"images\", \"image_url\")", Fix: "compare with image, video or audio"},
		schema.Rule{ID: RuleCELStringOrder, Summary: "warning: strings ordered with <, <=, > or >= against a number written as a string (\"10\" < \"9\": strings compare letter by letter)", Fix: "convert first: int(x) >= 10"},
		schema.Rule{ID: RuleAllowUnused, Summary: "warning: an allow: entry that no finding matches (the finding went away or the path is wrong)", Fix: "remove the entry, or give the path the diagnostic prints"},
	)
}

// allowable are the rules an allow: entry may accept.
var allowable = []string{RuleCELMayFail, RuleVarUse, RuleCELStringOrder}

// exprAt is one compiled expression with its document pointer.
type exprAt struct {
	x   *celenv.Expr
	ptr string
}

// allExprs lists every compiled expression once, in document order.
func (c *compiler) allExprs() []exprAt {
	var out []exprAt
	seen := map[*celenv.Expr]bool{}
	add := func(x *celenv.Expr, ptr string) {
		if x != nil && !seen[x] {
			seen[x] = true
			out = append(out, exprAt{x, ptr})
		}
	}
	for i, n := range c.w.nodes {
		add(n.when, c.specs[i].ptr+"/when")
		add(n.foreach, c.specs[i].ptr+"/foreach")
		for k := range n.targets {
			add(n.targets[k].cond, c.specs[i].targets[k].ptr+"/if")
		}
		for k := range c.specs[i].needs {
			add(c.specs[i].needs[k].expr, c.specs[i].needs[k].ifPtr)
		}
		add(n.retry.cond, n.retry.condPtr)
	}
	return out
}

// loadChecks runs the var and literal checks (before the search).
func (c *compiler) loadChecks() {
	if c.w == nil || c.w.env == nil {
		return
	}
	c.checkVars()
	for _, e := range c.allExprs() {
		c.constUses(e)
		c.literals(e)
	}
}

// checkVars: no null inside a list or map (a null var is RuleVarNull at
// the key), no list or map mixing types.
func (c *compiler) checkVars() {
	names := make([]string, 0, len(c.vars))
	for k := range c.vars {
		names = append(names, k)
	}
	sort.Strings(names)
	var walk func(ptr, name string, v any)
	walk = func(ptr, name string, v any) {
		var kinds []string
		var keys []string
		var elems []any
		switch x := v.(type) {
		case []any:
			for i, el := range x {
				keys = append(keys, strconv.Itoa(i))
				elems = append(elems, el)
			}
		case map[string]any:
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				elems = append(elems, x[k])
			}
		default:
			return
		}
		byKind := map[string][]string{}
		for i, el := range elems {
			p := ptr + "/" + escapePtr(keys[i])
			if el == nil {
				c.ds = append(c.ds, c.doc.Diag(p, schema.Error,
					"var "+name+" has a null value at "+strconv.Quote(keys[i])+": every expression that reads it fails").
					R(RuleVarNull).H("give it a value: a number, a quoted string, a list [..] or a map {..}, or remove it"))
				continue
			}
			k := jsonKind(el)
			if _, ok := byKind[k]; !ok {
				kinds = append(kinds, k)
			}
			byKind[k] = append(byKind[k], keys[i])
			walk(p, name, el)
		}
		if len(kinds) > 1 {
			var parts []string
			for _, k := range kinds {
				parts = append(parts, k+" at "+strings.Join(quoteAll(byKind[k]), ", "))
			}
			hint := "write every value in one type: 4096, not \"4096\""
			c.ds = append(c.ds, c.doc.Diag(ptr, schema.Error,
				"var "+name+" mixes types ("+strings.Join(parts, "; ")+"): a comparison or arithmetic on a value of the other type fails at run time").
				R(RuleVarMixed).H(hint))
		}
	}
	for _, n := range names {
		walk("/vars/"+escapePtr(n), n, c.vars[n])
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

func escapePtr(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// jsonKind names a decoded JSON value's type as CEL reads it.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case []any:
		return "list"
	case map[string]any:
		return "map"
	default:
		// Ints and doubles are one kind here: YAML's 1.0 is an int var
		// (an integral number), so {a: 0.5, b: 1} cannot be written
		// otherwise; arithmetic that mixes them is the search's and the
		// var-use check's to find.
		return "number"
	}
}

// constUses evaluates at load the parts of e that read only vars and
// literals (a conversion, a lookup, an index: the largest such part, so a
// guard inside it, has(config.m.k) && config.m.k > 1, still guards), and
// the regex of every matches() whose pattern is a var; a failure is
// reported at the var, at the innermost part that fails on its own.
func (c *compiler) constUses(e exprAt) {
	x := e.x
	evalErr := func(n celast.Expr) error {
		_, err := c.w.env.EvalConst(x.Source(n))
		return err
	}
	evaluable := func(n celast.Expr) bool {
		return constOnly(n) && !isConfigField(n) && (n.Kind() == celast.CallKind || n.Kind() == celast.SelectKind)
	}
	// innermost: n fails; report the deepest failing part under it.
	var innermost func(n celast.Expr) (celast.Expr, error)
	innermost = func(n celast.Expr) (celast.Expr, error) {
		err := evalErr(n)
		for _, ch := range celenv.Children(n) {
			if evaluable(ch) && evalErr(ch) != nil {
				return innermost(ch)
			}
		}
		return n, err
	}
	var walk func(n celast.Expr)
	walk = func(n celast.Expr) {
		if evaluable(n) {
			if evalErr(n) != nil {
				m, err := innermost(n)
				c.varUse(e, m, "fails: "+err.Error(), varHint(m))
			}
			return
		}
		if n.Kind() == celast.CallKind && n.AsCall().FunctionName() == "matches" {
			call := n.AsCall()
			pat := call.Args()[len(call.Args())-1]
			if constOnly(pat) {
				if v, err := c.w.env.EvalConst(x.Source(pat)); err == nil {
					if s, ok := v.(types.String); ok {
						if _, rerr := regexp.Compile(string(s)); rerr != nil {
							c.varUse(e, pat, fmt.Sprintf("is not a valid regular expression (%v)", rerr), "write a valid RE2 regular expression")
						}
					}
				}
			}
		}
		for _, ch := range celenv.Children(n) {
			walk(ch)
		}
	}
	walk(x.Checked().Expr())
}

// isConfigField: config.<name>, which always reads.
func isConfigField(n celast.Expr) bool {
	return n.Kind() == celast.SelectKind && !n.AsSelect().IsTestOnly() && celenv.SelectPath(n.AsSelect().Operand()) == "config"
}

// varUse reports a failing use of a var at the var's value.
func (c *compiler) varUse(e exprAt, n celast.Expr, what, hint string) {
	name := ""
	var find func(m celast.Expr)
	find = func(m celast.Expr) {
		if name != "" {
			return
		}
		if isConfigField(m) {
			name = m.AsSelect().FieldName()
			return
		}
		for _, ch := range celenv.Children(m) {
			find(ch)
		}
	}
	find(n)
	if name == "" {
		return
	}
	src := e.x.Source(n)
	msg := fmt.Sprintf("%s %s, so %s fails on every request that evaluates it", src, what, c.doc.Path(e.ptr))
	for _, d := range c.ds {
		if d.Rule == RuleVarUse && strings.HasPrefix(d.Msg, src+" ") {
			return // once per use
		}
	}
	c.ds = append(c.ds, c.doc.Diag("/vars/"+escapePtr(name), schema.Error, msg).R(RuleVarUse).H(hint))
}

func varHint(n celast.Expr) string {
	if n.Kind() == celast.CallKind {
		switch n.AsCall().FunctionName() {
		case "duration":
			return "write a Go duration with a unit: 500ms, 30s, 1m30s"
		case "timestamp":
			return "write an RFC 3339 timestamp: 2026-01-01T00:00:00Z"
		case "int", "uint", "double":
			return "write the number without quotes, or as digits only"
		case operators.Index:
			return "add the missing key or element to the var, or read it with [?key].orValue(…)"
		case "value":
			return "add the value to the var, or read it with .orValue(…)"
		}
	}
	if n.Kind() == celast.SelectKind {
		return "add the missing key to the var, or test has(…) first"
	}
	return "fix the var's value so the expression can evaluate it"
}

// Known words and types.
var (
	modalityWords = []string{"image", "video", "audio"}
	mimeTops      = []string{"application", "audio", "font", "image", "message", "model", "multipart", "text", "video"}
)

// literals checks the string literals (and string vars) e compares request
// fields with.
func (c *compiler) literals(e exprAt) {
	x := e.x
	a := x.Checked()
	at := func(n celast.Expr) (int, int) {
		loc := a.SourceInfo().GetStartLocation(n.ID())
		return c.doc.ScalarPos(e.ptr, loc.Line(), loc.Column())
	}
	// A whole expression already reported as never holding (cel/never-holds,
	// graph/edge-never-fires) says more than a warning about one of its
	// route words; the error for a word no route has still shows.
	path := c.doc.Path(e.ptr)
	covered := slices.ContainsFunc(c.ds, func(d schema.Diagnostic) bool {
		return d.Path == path && (d.Rule == "cel/never-holds" || d.Rule == "graph/edge-never-fires")
	})
	add := func(n celast.Expr, sev schema.Severity, rule, msg, hint string) {
		if covered && sev == schema.Warning && (rule == RuleCELPath || rule == RuleCELFormat) {
			return
		}
		line, col := at(n)
		c.ds = append(c.ds, schema.Diagnostic{File: c.doc.File, Line: line, Col: col, Path: c.doc.Path(e.ptr),
			Severity: sev, Rule: rule, Msg: msg, Hint: hint})
	}
	// constStr is a literal's or a var's string value.
	constStr := func(n celast.Expr) (string, bool) {
		if n.Kind() == celast.LiteralKind {
			s, ok := n.AsLiteral().(types.String)
			return string(s), ok
		}
		if constOnly(n) {
			if v, err := c.w.env.EvalConst(x.Source(n)); err == nil {
				if s, ok := v.(types.String); ok {
					return string(s), true
				}
			}
		}
		return "", false
	}
	mediaField := func(n celast.Expr) string {
		if n.Kind() != celast.SelectKind || n.AsSelect().IsTestOnly() {
			return ""
		}
		if a.GetType(n.AsSelect().Operand().ID()).TypeName() != celenv.MediaType {
			return ""
		}
		return n.AsSelect().FieldName()
	}
	// check one (field, value) pair; prefix: the value is a startsWith
	// prefix; negated: an inequality (a route not served then always
	// differs: nothing to warn about, only an unknown word).
	check := func(field, lit celast.Expr, prefix, negated bool) {
		s, ok := constStr(lit)
		if !ok {
			return
		}
		switch celenv.SelectPath(field) {
		case "request.path":
			if prefix {
				return
			}
			c.routeWord(add, lit, s, "path", func(r Route) string { return r.Path() }, RuleCELPath, negated)
			return
		case "request.format":
			if prefix {
				return
			}
			c.routeWord(add, lit, s, "format", func(r Route) string { return r.String() }, RuleCELFormat, negated)
			return
		}
		switch mediaField(field) {
		case "type":
			if s == "" && !prefix || validMIME(s, prefix) {
				return
			}
			msg := fmt.Sprintf("%q is not a media (MIME) type: a media item's type holds one, such as image/png (\"\" on generate)", s)
			if slices.Contains(modalityWords, strings.TrimSuffix(strings.TrimSuffix(s, "_url"), "s")) {
				msg += "; the modality word is in m.modality"
			}
			add(lit, schema.Error, RuleCELMediaType, msg, "compare type with a MIME type (m.type == \"image/png\", m.type.startsWith(\"image/\")), or m.modality with image, video or audio")
		case "modality":
			if prefix || slices.Contains(modalityWords, s) {
				return
			}
			msg := fmt.Sprintf("%q is not a modality: a media item's modality is image, video or audio", s)
			if w := closestWord(s); w != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", w)
			}
			add(lit, schema.Error, RuleCELModality, msg, "compare with image, video or audio")
		}
	}
	isStr := func(n celast.Expr) bool { return a.GetType(n.ID()).Kind() == types.StringKind }
	var walk func(n celast.Expr)
	walk = func(n celast.Expr) {
		for _, ch := range celenv.Children(n) {
			walk(ch)
		}
		if n.Kind() != celast.CallKind {
			return
		}
		call := n.AsCall()
		args := call.Args()
		switch fn := call.FunctionName(); fn {
		case operators.Equals, operators.NotEquals:
			neg := fn == operators.NotEquals
			check(args[0], args[1], false, neg)
			check(args[1], args[0], false, neg)
		case operators.Less, operators.LessEquals, operators.Greater, operators.GreaterEquals:
			if !isStr(args[0]) || !isStr(args[1]) {
				return
			}
			for _, p := range [][2]celast.Expr{{args[0], args[1]}, {args[1], args[0]}} {
				if s, ok := constStr(p[1]); ok {
					if _, err := strconv.ParseFloat(s, 64); err == nil {
						add(p[1], schema.Warning, RuleCELStringOrder,
							fmt.Sprintf("%s orders strings: %q is compared letter by letter (\"10\" < \"9\"), not as a number", x.Source(n), s),
							fmt.Sprintf("convert both sides: int(%s) %s %s", x.Source(p[0]), opText(fn, p[0] == args[0]), s))
						return
					}
				}
			}
		case operators.In:
			if args[1].Kind() == celast.ListKind {
				for _, el := range args[1].AsList().Elements() {
					check(args[0], el, false, false)
				}
			}
		case "startsWith":
			if call.IsMemberFunction() && len(args) == 1 {
				check(call.Target(), args[0], true, false)
			}
		}
	}
	walk(a.Expr())
}

func opText(fn string, leftFirst bool) string {
	ops := map[string][2]string{
		operators.Less: {"<", ">"}, operators.LessEquals: {"<=", ">="},
		operators.Greater: {">", "<"}, operators.GreaterEquals: {">=", "<="},
	}
	if leftFirst {
		return ops[fn][0]
	}
	return ops[fn][1]
}

// routeWord checks a path or format literal against the routes.
func (c *compiler) routeWord(add func(celast.Expr, schema.Severity, string, string, string), lit celast.Expr, s, what string, word func(Route) string, rule string, negated bool) {
	var all, served []string
	for _, r := range Routes {
		all = append(all, word(r))
		if c.w.routes[r] {
			served = append(served, word(r))
		}
	}
	switch {
	case slices.Contains(served, s):
	case slices.Contains(all, s) && negated:
	case slices.Contains(all, s):
		add(lit, schema.Warning, rule, fmt.Sprintf("%q is the %s of a route this workflow does not serve (routes: %s), so the comparison never holds", s, what, strings.Join(served, ", ")),
			"compare with a served route's "+what+" ("+strings.Join(served, ", ")+"), or add the route to routes:")
	default:
		msg := fmt.Sprintf("%q is not a request %s", s, what)
		if w := closestOf(s, all); w != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", w)
		}
		add(lit, schema.Error, rule, msg+"; the "+what+"s are "+strings.Join(all, ", "), "compare with one of "+strings.Join(served, ", "))
	}
}

func validMIME(s string, prefix bool) bool {
	top, sub, ok := strings.Cut(s, "/")
	if !ok {
		if !prefix {
			return false
		}
		for _, t := range mimeTops {
			if strings.HasPrefix(t+"/", s) {
				return true
			}
		}
		return false
	}
	return slices.Contains(mimeTops, top) && (prefix || sub != "" && !strings.ContainsAny(sub, " /"))
}

func closestWord(s string) string {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "_url"), "s")
	if slices.Contains(modalityWords, t) {
		return t
	}
	return closestOf(s, modalityWords)
}

func closestOf(s string, words []string) string {
	best, bd := "", 1<<30
	for _, w := range words {
		if d := celenv.Distance(s, w); d <= max(1, len(s)/3) && d < bd {
			best, bd = w, d
		}
	}
	return best
}

// applyAllow drops the findings the workflow's allow: list accepts, and
// warns about entries that accept nothing.
// applyAllow drops the findings the workflow's allow: list accepts; with
// final, it warns about entries that accepted nothing (only once the
// search ran: a workflow with errors is not searched).
func (c *compiler) applyAllow(final bool) {
	if len(c.allow) == 0 {
		return
	}
	if c.allowUsed == nil {
		c.allowUsed = make([]bool, len(c.allow))
	}
	out := c.ds[:0:0]
	for _, d := range c.ds {
		drop := false
		if slices.Contains(allowable, d.Rule) {
			for i, e := range c.allow {
				if e.Rule.V == d.Rule && e.At.V == d.Path {
					c.allowUsed[i], drop = true, true
				}
			}
		}
		if !drop {
			out = append(out, d)
		}
	}
	c.ds = out
	if !final {
		return
	}
	for i, u := range c.allowUsed {
		if !u {
			c.ds = append(c.ds, c.doc.Diag(c.allow[i].Ptr, schema.Warning,
				"this allow: entry matches no finding (fix the path, or remove the entry if the finding went away)").R(RuleAllowUnused).
				H("remove the entry, or give the path the diagnostic prints (nodes[0].when)"))
		}
	}
}
