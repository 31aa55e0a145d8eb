package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// cel builds the workflow's CEL environment and compiles every guard,
// foreach list, edge condition and retry predicate, reporting errors at
// the file position of the offending character.
func (c *compiler) cel() {
	var decls []celenv.NodeDecl
	for i, sp := range c.specs {
		if sp.idOK {
			d := celenv.NodeDecl{ID: sp.id, Type: sp.typ}
			for _, o := range c.w.nodes[i].contract.Outputs {
				d.Outputs = append(d.Outputs, celenv.Output{Name: o.Name, Type: o.Type})
			}
			decls = append(decls, d)
		}
	}
	env, err := celenv.NewEnvNodes(decls, c.vars)
	if err != nil {
		c.errf(schema.RuleInternal, "", "internal: CEL environment: %v", err)
		return
	}
	c.w.env = env
	defRetry := c.compileRetry(c.defs.retry, "/defaults/retry", retryPolicy{attempts: 1, backoff: DefaultBackoff, maxBackoff: DefaultMaxBackoff, jitter: true})
	for i := range c.specs {
		sp := &c.specs[i]
		n := c.w.nodes[i]
		if sp.when != "" {
			n.when = c.expr(sp.ptr+"/when", sp.when, celenv.Guard)
		}
		if sp.foreach != "" {
			n.foreach = c.expr(sp.ptr+"/foreach", sp.foreach, celenv.ForEach)
		}
		n.targets = c.compileTargets(i, sp.targets)
		for k := range sp.needs {
			if ns := &sp.needs[k]; ns.cond != "" {
				ns.expr = c.expr(ns.ifPtr, ns.cond, celenv.Edge)
				c.statuses(ns.expr, ns.ifPtr, ns.node)
			}
		}
		n.retry = defRetry
		if sp.retry != nil {
			n.retry = c.compileRetry(sp.retry, sp.ptr+"/retry", defRetry)
		}
		if n.retry.cond != nil {
			c.statuses(n.retry.cond, n.retry.condPtr, sp.id)
		}
		c.statuses(n.when, sp.ptr+"/when", "")
		c.statuses(n.foreach, sp.ptr+"/foreach", "")
	}
}

// compileRetry overlays a retry block on base, field by field.
func (c *compiler) compileRetry(rd *retryDoc, ptr string, base retryPolicy) retryPolicy {
	if rd == nil {
		return base
	}
	r := base
	if rd.Attempts.Set {
		r.attempts = rd.Attempts.V
	}
	if rd.Backoff.Set {
		r.backoff = rd.Backoff.V
	}
	if rd.MaxBackoff.Set {
		r.maxBackoff = rd.MaxBackoff.V
	}
	if rd.Jitter.Set {
		r.jitter = rd.Jitter.V
	}
	if rd.If.Set {
		r.cond, r.condPtr = c.expr(rd.If.Ptr, rd.If.V, celenv.Retry), rd.If.Ptr
	}
	if r.maxBackoff < r.backoff {
		r.maxBackoff = r.backoff
	}
	return r
}

// expr compiles one expression found at ptr.
func (c *compiler) expr(ptr, src string, kind celenv.Kind) *celenv.Expr {
	for _, v := range c.nullVars {
		if readsVar(src, v) {
			return nil // the var's own error says why (RuleVarNull)
		}
	}
	x, iss := c.w.env.Compile(src, kind)
	for _, is := range iss {
		line, col := c.doc.ScalarPos(ptr, is.Line, is.Col)
		c.ds = append(c.ds, schema.Diagnostic{File: c.doc.File, Line: line, Col: col,
			Path: c.doc.Path(ptr), Msg: is.Msg, Severity: schema.Error, Rule: is.Rule, Hint: is.Hint})
	}
	return x
}

// readsVar reports whether src reads config.name (or config["name"]).
func readsVar(src, name string) bool {
	for _, pre := range []string{"config." + name, `config["` + name + `"]`, `config['` + name + `']`} {
		for i := 0; ; {
			j := strings.Index(src[i:], pre)
			if j < 0 {
				break
			}
			end := i + j + len(pre)
			if end == len(src) || strings.HasSuffix(pre, "]") || !isIdentRune(rune(src[end])) {
				return true
			}
			i = end
		}
	}
	return false
}

func isIdentRune(r rune) bool {
	return r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

// statuses warns about a comparison of a node's response.status with a
// status that has a meaning of its own for some node type of the workflow
// (a Contract.Statuses entry, and always 412, the conditional-decode miss)
// when the compared node's type does not declare it: that node never
// produces it, so the condition never holds. self names the node that
// `response`/`outcome` stand for ("" where they are not in scope).
func (c *compiler) statuses(x *celenv.Expr, ptr, self string) {
	if x == nil {
		return
	}
	special := map[int64]bool{412: true}
	for _, n := range c.w.nodes {
		for _, s := range n.contract.Statuses {
			special[int64(s)] = true
		}
	}
	for _, sc := range x.StatusCompares {
		id := sc.Node
		if id == "" {
			id = self
		}
		i, ok := c.ids[id]
		if !ok || !special[sc.Status] || c.w.nodes[i].node == nil || slices.Contains(c.w.nodes[i].contract.Statuses, int(sc.Status)) {
			continue
		}
		var by []string
		for _, n := range c.w.nodes {
			if slices.Contains(n.contract.Statuses, int(sc.Status)) && !slices.Contains(by, n.typ) {
				by = append(by, n.typ)
			}
		}
		who := "conditional-decode's miss"
		if len(by) > 0 {
			who = strings.Join(by, ", ")
		}
		line, col := c.doc.ScalarPos(ptr, sc.Line, sc.Col)
		c.ds = append(c.ds, schema.Diagnostic{File: c.doc.File, Line: line, Col: col, Path: c.doc.Path(ptr),
			Severity: schema.Warning, Rule: RuleCELStatusNever,
			Msg: fmt.Sprintf("node %s (type %s) never fails with %d (only %s does), so this comparison never holds",
				quote(id), c.w.nodes[i].typ, sc.Status, who),
			Hint: "compare with a status the node can produce, or read the conditional-decode node's status"})
	}
}
