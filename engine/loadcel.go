package engine

import (
	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/schema"
)

// cel builds the workflow's CEL environment and compiles every guard,
// foreach list, edge condition and retry predicate, reporting errors at
// the file position of the offending character.
func (c *compiler) cel() {
	var ids []string
	for _, sp := range c.specs {
		if sp.idOK {
			ids = append(ids, sp.id)
		}
	}
	env, err := celenv.NewEnv(ids, c.vars)
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
		for k := range sp.needs {
			if ns := &sp.needs[k]; ns.cond != "" {
				ns.expr = c.expr(ns.ifPtr, ns.cond, celenv.Edge)
			}
		}
		n.retry = defRetry
		if sp.retry != nil {
			n.retry = c.compileRetry(sp.retry, sp.ptr+"/retry", defRetry)
		}
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
	x, iss := c.w.env.Compile(src, kind)
	for _, is := range iss {
		line, col := c.doc.ScalarPos(ptr, is.Line, is.Col)
		c.ds = append(c.ds, schema.Diagnostic{File: c.doc.File, Line: line, Col: col,
			Path: c.doc.Path(ptr), Msg: is.Msg, Severity: schema.Error, Rule: is.Rule, Hint: is.Hint})
	}
	return x
}
