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
		c.ds.Errorf(c.doc, "", "internal: CEL environment: %v", err)
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
			}
		}
		n.retry = defRetry
		if sp.retry != nil {
			n.retry = c.compileRetry(sp.retry, sp.ptr+"/retry", defRetry)
		}
	}
}

// compileRetry overlays a retry block on base, field by field.
func (c *compiler) compileRetry(m map[string]any, ptr string, base retryPolicy) retryPolicy {
	if m == nil {
		return base
	}
	r := base
	if v, ok := integer(m["attempts"]); ok {
		r.attempts = v
	}
	if _, ok := m["backoff"]; ok {
		r.backoff = duration(m["backoff"])
	}
	if _, ok := m["max_backoff"]; ok {
		r.maxBackoff = duration(m["max_backoff"])
	}
	if b, ok := m["jitter"].(bool); ok {
		r.jitter = b
	}
	if s, ok := m["if"].(string); ok {
		r.cond, r.condPtr = c.expr(ptr+"/if", s, celenv.Retry), ptr+"/if"
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
			Path: c.doc.Path(ptr), Msg: is.Msg, Severity: schema.Error})
	}
	return x
}
