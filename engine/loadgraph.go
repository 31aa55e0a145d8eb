package engine

import (
	"fmt"
	"strings"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/engine/graph"
	"github.com/celflow/celflow/schema"
)

// graph resolves needs into edges and runs the structural checks: unknown
// needs, cycles, nodes after a terminal responder, dead edges after a
// responder, fan-out declarations, unreachable nodes, no responder, reads
// of nodes that do not precede the reader, and then the dataflow check.
func (c *compiler) graph() {
	nodes := c.w.nodes
	g := &graph.Graph{Preds: make([][]int, len(nodes))}
	brokenNeed := make([]bool, len(nodes)) // an unknown need: not reported unreachable too
	c.needSpecIdx = make([][]int, len(nodes))
	for i, sp := range c.specs {
		n := nodes[i]
		seen := map[int]bool{}
		for si, ns := range sp.needs {
			j, ok := c.ids[ns.node]
			if !ok {
				brokenNeed[i] = true
				msg := "unknown node " + quote(ns.node) + " in needs"
				if s := closestName(ns.node, keys(c.ids)); s != "" {
					msg += " (did you mean " + quote(s) + "?)"
				}
				c.errf(RuleUnknownNeed, ns.ptr, "%s", msg)
				continue
			}
			if seen[j] {
				c.errf(RuleDuplicateNeed, ns.ptr, "%s is needed twice", quote(ns.node))
				continue
			}
			seen[j] = true
			label := ns.node
			if ns.cond != "" {
				label += "[" + ns.cond + "]"
			}
			n.needs = append(n.needs, cedge{from: j, cond: ns.expr, hasIf: ns.cond != "", label: label})
			c.needSpecIdx[i] = append(c.needSpecIdx[i], si)
			g.Preds[i] = append(g.Preds[i], j)
		}
	}
	if cyc := g.Cycle(); cyc != nil {
		names := make([]string, 0, len(cyc)+1)
		for _, i := range cyc {
			names = append(names, nodes[i].id)
		}
		names = append(names, nodes[cyc[0]].id)
		c.errf(RuleCycle, c.specs[cyc[0]].ptr+"/id", "cycle: %s (each node needs the one before it)", strings.Join(names, " → "))
		return
	}
	order, _ := g.Topo()
	anc := g.Ancestors(order)
	c.structure(g, order, brokenNeed)
	c.reads(anc)
	c.checks(anc)
	if c.ds.HasErrors() {
		return // dataflow over a broken graph would only add noise
	}
	c.dataflow(g, order, anc)
	if !c.ds.HasErrors() {
		c.paths(order, anc)
	}
	c.edges()
}

// structure checks responders, fan-out declarations and reachability.
func (c *compiler) structure(g *graph.Graph, order []int, brokenNeed []bool) {
	nodes := c.w.nodes
	afterTerminal := make([]bool, len(nodes))
	for i, n := range nodes {
		sp := c.specs[i]
		for k, e := range n.needs {
			p := nodes[e.from]
			if !p.contract.Responds {
				continue
			}
			ptr := c.needPtr(i, k)
			switch {
			case p.contract.Terminal:
				afterTerminal[i] = true
				c.errf(RuleAfterTerminal, ptr, "node %s is after a terminal responder: %s answers the client whenever it succeeds, which ends the run", quote(n.id), quote(p.id))
			case !e.hasIf && p.when == nil:
				c.errf(RuleResponderEdge, ptr, "an edge from responder %s needs an if: condition (when it succeeds it has answered the client and the run ends, so this edge could never fire)", quote(p.id))
			}
		}
		if sp.hasType {
			switch {
			case sp.fanOut && n.foreach == nil && sp.foreach == "":
				c.errf(RuleForEachRequired, sp.ptr+"/type", "node type %s runs once per item: set foreach (for example foreach: media)", quote(n.typ))
			case !sp.fanOut && sp.foreach != "":
				c.errf(RuleForEachForbidden, sp.ptr+"/foreach", "node type %s does not fan out; remove foreach", quote(n.typ))
			}
		}
	}
	// An edge whose condition can never hold when it is evaluated (a route
	// the workflow does not serve, a 2xx out of conditional-decode) is a
	// warning at the condition (deadEdges): the node it leads to is
	// omitted, which every request survives, unlike a literal false, which
	// says at the graph's level that the author cut the node off.
	c.deadEdges()
	live := func(i, k int) bool {
		e := nodes[i].needs[k]
		if nodes[e.from].contract.Terminal {
			return false
		}
		return e.cond == nil || e.cond.Const == nil || *e.cond.Const
	}
	anyJoin := make([]bool, len(nodes))
	for i, n := range nodes {
		anyJoin[i] = n.joinAny
	}
	reach := g.Reachable(order, live, anyJoin)
	responder := false
	for i, n := range nodes {
		// Report where reachability is lost, not every node downstream of it.
		cause := !reach[i] && !brokenNeed[i] && !afterTerminal[i]
		for _, p := range g.Preds[i] {
			cause = cause && reach[p]
		}
		if cause {
			c.errf(RuleUnreachable, c.specs[i].ptr+"/id", "node %s is unreachable: no path from the request reaches it (every path into it crosses an edge that can never fire)", quote(n.id))
		}
		if reach[i] && n.contract.Responds {
			responder = true
		}
	}
	if !responder && !c.ds.HasErrors() {
		c.errf(RuleNoResponder, "/nodes", "no path can answer the client: no reachable node responds (add a decode node)")
	}
}

func (c *compiler) needPtr(i, k int) string { return c.specs[i].needs[c.needSpecIdx[i][k]].ptr }

func (c *compiler) needIfPtr(i, k int) string {
	return c.specs[i].needs[c.needSpecIdx[i][k]].ifPtr
}

// reads checks every `nodes.X` in an expression: X must precede the
// expression's node on every path (be among its needs, transitively). Guards,
// foreach lists and retry predicates belong to their node (a retry
// predicate may also read the node itself); an edge condition is evaluated
// when its predecessor is decided, so it belongs to the predecessor.
// Expressions that read media or tokens must also be ordered with every
// node that writes them, or they would race with a running writer.
func (c *compiler) reads(anc []graph.Set) {
	nodes := c.w.nodes
	check := func(x *celenv.Expr, ptr string, reader int, self bool) {
		if x == nil {
			return
		}
		for _, r := range x.NodeReads {
			line, col := c.doc.ScalarPos(ptr, r.Line, r.Col)
			at := schema.Diagnostic{File: c.doc.File, Line: line, Col: col, Path: c.doc.Path(ptr), Rule: RuleCELNotPreceding}
			j, ok := c.ids[r.Name]
			switch {
			case r.Name == "":
				at.Msg, at.Rule = "read nodes.<id>, not nodes as a whole", RuleCELWholeNodes
			case !ok:
				continue // the type checker reported it
			case j == reader && self:
				continue
			case !anc[reader].Has(j):
				at.Msg = fmt.Sprintf("a read of nodes.%s, which does not precede %s on every path (list it in needs, directly or through a predecessor)", r.Name, quote(nodes[reader].id))
			default:
				continue
			}
			c.ds = append(c.ds, at)
		}
		for _, k := range []struct {
			on   bool
			keys []AnyKey
			name string
		}{{x.ReadsMedia, []AnyKey{KeyMedia, KeyFeatures}, "media"}, {x.ReadsTokens, []AnyKey{KeyTokens}, "tokens"}} {
			if !k.on {
				continue
			}
			for j, w := range nodes {
				if j == reader || anc[reader].Has(j) || anc[j].Has(reader) || !providesAny(w.contract, k.keys) {
					continue
				}
				c.errf(RuleCELRace, ptr, "reads %s while %s, which writes it, may be running (make one need the other)", k.name, quote(w.id))
			}
		}
	}
	for i, n := range nodes {
		sp := c.specs[i]
		check(n.when, sp.ptr+"/when", i, false)
		for k, t := range n.targets {
			check(t.cond, schema.Ptr(sp.ptr, "target", k, "if"), i, false)
		}
		check(n.foreach, sp.ptr+"/foreach", i, false)
		check(n.retry.cond, n.retry.condPtr, i, true)
		for k, e := range n.needs {
			check(e.cond, c.needIfPtr(i, k), e.from, true)
		}
	}
}

func providesAny(ct Contract, ks []AnyKey) bool {
	for _, p := range ct.Provides {
		for _, k := range ks {
			if sameKey(p, k) {
				return true
			}
		}
	}
	return false
}

// edges numbers every edge and indexes them by source for the scheduler.
func (c *compiler) edges() {
	w := c.w
	w.succ = make([][]edgeRef, len(w.nodes))
	for i, n := range w.nodes {
		for k := range n.needs {
			n.needs[k].gidx = w.nedge
			w.nedge++
			w.succ[n.needs[k].from] = append(w.succ[n.needs[k].from], edgeRef{to: i, k: k})
		}
	}
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
