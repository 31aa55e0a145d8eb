package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/engine/graph"
	"github.com/celflow/celflow/schema"
)

// Route-impossibility and cross-node consistency checks: workflows that
// every earlier check accepts but that, under serve, never take a branch
// their author wrote (a guard false on every route the workflow serves, an
// edge that can never fire) or take it in a way that defeats it (two legs
// of one KV hand-off under two models, a retry of the miss the workflow
// routes, a node timeout that cuts the client's stream).
//
// Severity follows what serve does with such a workflow. Where every
// request is still answered as the workflow says, only a branch of it is
// dead or wasteful, the finding is a warning (`validate --strict` fails
// CI on it): a skipped node is transparent, a dead edge omits its
// target. Where the field can have no effect or the shape makes serve do
// the work twice, it is an error: `retry.if` with one attempt, a gate (the
// async broker) with nodes before or beside it.
const (
	RuleNeverHolds   = "cel/never-holds"
	RuleEdgeNever    = "graph/edge-never-fires"
	RuleGateFirst    = "graph/gate-not-first"
	RuleModelSplit   = "target/model-split"
	RulePoolSplit    = "target/pool-split"
	RuleRetryOnce    = "retry/if-without-attempts"
	RuleRetryRouted  = "retry/catches-routed-status"
	RuleTimeoutReply = "node/timeout-cuts-reply"
)

func init() {
	schema.DefineRules(
		schema.Rule{ID: RuleNeverHolds, Summary: "warning: a guard or target rule condition that is false for every request on the routes the workflow serves (it compares request.format or request.path with another route's, or reads media or tokens.known where no node before it provides them)", Fix: "compare with a route the workflow serves, add the route to routes:, or put fetch-media (media) or render (tokens) before the node"},
		schema.Rule{ID: RuleEdgeNever, Summary: "warning: an edge condition that can never hold when it is evaluated (a 2xx out of conditional-decode, which answers the client when it succeeds; a route the workflow does not serve)", Fix: "route a failure (response.status == 412 for the miss, >= 500 for an error), or remove the edge"},
		schema.Rule{ID: RuleGateFirst, Summary: "an async-broker that is not the first node: a queued request is run again from the workflow's start, so the nodes before or beside the broker run twice", Fix: "make the async-broker the one node without needs and have every other node need it, directly or transitively"},
		schema.Rule{ID: RuleModelSplit, Summary: "warning: prefill and decode legs of one KV hand-off under two models (a target model rewrite on one of them only)", Fix: "give the decode node the same model rules as the prefill node (same if:, same model)"},
		schema.Rule{ID: RulePoolSplit, Summary: "warning: a pool rule on the conditional-decode probe that its decode node does not share, or the reverse (the probe predicts hits in one pool, decode serves in another)", Fix: "give the decode node the same pool rules as the conditional-decode node (same if:, same pool)"},
		schema.Rule{ID: RuleRetryOnce, Summary: "retry.if with one attempt (attempts unset or 1): the node never retries, so the condition is never used", Fix: "set attempts (for example attempts: 3) beside if, or remove if"},
		schema.Rule{ID: RuleRetryRouted, Summary: "warning: a retry rule that also holds for a status the workflow routes (conditional-decode's 412 miss): every miss is retried before its edge fires", Fix: "exclude the routed status from retry.if (response.status >= 500), or drop retry.if to retry only timeouts, 5xx and transport failures"},
		schema.Rule{ID: RuleTimeoutReply, Summary: "warning: a node timeout (its own, defaults.timeout or a target rule's) on a node that relays the client's reply (decode, conditional-decode): it cuts a long reply after the client got HTTP 200, a stream without [DONE]", Fix: "set timeout: 0s on that node and bound it with its ttfb_timeout and stream_idle_timeout params"},
	)
}

// routeFacts are the facts every expression of a request on route r can be
// decided with: its format and path, and the workflow's vars.
func (c *compiler) routeFacts(r Route) celenv.Facts {
	f := c.configFacts()
	f["request.format"] = r.String()
	f["request.path"] = r.Path()
	return f
}

// servedRoutes lists the routes the workflow serves, in order.
func (c *compiler) servedRoutes() []Route {
	var out []Route
	for _, r := range Routes {
		if c.w.routes[r] {
			out = append(out, r)
		}
	}
	return out
}

// deadEdges decides, for every edge, whether its condition can hold when
// the scheduler evaluates it, and warns about those that cannot. An edge is
// evaluated when its predecessor succeeded or failed; out of a
// responder that answers when it succeeds (conditional-decode, not the
// gate that lets requests through), only after a failure.
func (c *compiler) deadEdges() {
	nodes := c.w.nodes
	routes := c.servedRoutes()
	for i, n := range nodes {
		dead := make([]string, len(n.needs))
		hints := make([]string, len(n.needs))
		for k, e := range n.needs {
			if e.cond == nil || e.cond.Const != nil || len(routes) == 0 {
				continue // a literal is graph/unreachable's; no condition always fires
			}
			p := nodes[e.from]
			// A skipped predecessor fires its edges without evaluating them:
			// one that may be skipped (a guard not surely true, a fan-out
			// over no items) keeps every edge alive.
			if p.foreach != nil || !allRoutes(routes, func(r Route) bool { return p.when.Decide(c.routeFacts(r)) == celenv.True }) {
				continue
			}
			why := ""
			if allRoutes(routes, func(r Route) bool { return e.cond.Decide(c.routeFacts(r)) == celenv.False }) {
				why = fmt.Sprintf("its condition is false on every route the workflow serves (%s)", routeNames(routes))
				hints[k] = "compare with a route the workflow serves (request.format is chat, completions or generate), or remove the edge"
			} else if p.contract.Responds && !p.contract.Terminal && !p.contract.Gate {
				fails := failureFacts(p, e.cond)
				if allRoutes(routes, func(r Route) bool {
					base := c.routeFacts(r)
					for _, f := range fails {
						g := maps.Clone(base)
						maps.Copy(g, f)
						if e.cond.Decide(g) != celenv.False {
							return false
						}
					}
					return true
				}) {
					why = fmt.Sprintf("%s answers the client when it succeeds, which ends the run, so this edge is evaluated only after %s failed, and its condition holds for no failure (a 2xx never reaches it)", quote(p.id), quote(p.id))
					hints[k] = "route a failure (response.status == 412 for the miss, response.status >= 500 for an error), or remove the edge"
				}
			}
			dead[k] = why
		}
		// join all needs every edge, join any one: name the node that the
		// dead edges keep from ever running.
		never := !n.joinAny && slices.ContainsFunc(dead, func(s string) bool { return s != "" })
		never = never || (n.joinAny && !slices.Contains(dead, ""))
		for k, why := range dead {
			if why == "" {
				continue
			}
			msg := "this edge never fires: " + why
			if never {
				msg += "; " + quote(n.id) + " never runs"
			}
			d := c.warnf(RuleEdgeNever, c.needIfPtr(i, k), "%s", msg)
			d.Hint = hints[k]
		}
	}
}

// failureFacts are the outcomes a failed node p is decided under: timed
// out, failed without an answer, and failed with each generic status,
// each status p's type declares and each status cond compares with.
func failureFacts(p *cnode, cond *celenv.Expr) []celenv.Facts {
	statuses := slices.Clone(genericStatuses)
	for _, s := range p.contract.Statuses {
		statuses = append(statuses, int64(s))
	}
	for _, l := range cond.IntLiterals() {
		statuses = append(statuses, l-1, l, l+1)
	}
	slices.Sort(statuses)
	statuses = slices.Compact(statuses)
	mk := func(status string, http int64) celenv.Facts {
		return celenv.Facts{"outcome.status": status, "response.status": http, "outcome.response.status": http,
			"nodes." + p.id + ".status": status, "nodes." + p.id + ".response.status": http}
	}
	out := []celenv.Facts{mk("timed_out", 0)}
	for _, s := range statuses {
		if s == 0 || (s >= 300 && s <= 599) {
			out = append(out, mk("failed", s))
		}
	}
	return out
}

func allRoutes(rs []Route, f func(Route) bool) bool {
	for _, r := range rs {
		if !f(r) {
			return false
		}
	}
	return len(rs) > 0
}

func routeNames(rs []Route) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// checks runs the route-impossibility and consistency checks that need
// the resolved graph (anc: ancestors per node).
func (c *compiler) checks(anc []graph.Set) {
	c.neverHolds(anc)
	c.gateFirst(anc)
	c.splits(anc)
	c.retryChecks()
	c.timeoutChecks()
}

// dataFacts adds to f what the graph decides about what x reads on node
// i's route r: on chat and completions, with no node that may provide them
// before i, the tokens are unknown (tokens.known is false); media is empty
// on completions (it has none) and on chat when no node that may provide
// it (fetch-media, render) precedes i. On generate the front parses both,
// and what a guard then does with them is routing, not a missing
// provider. It returns what it assumed, for messages.
func (c *compiler) dataFacts(f celenv.Facts, x *celenv.Expr, i int, r Route, anc []graph.Set) []string {
	var why []string
	mayPrecede := func(keys ...AnyKey) bool {
		for j, p := range c.w.nodes {
			if anc[i].Has(j) && providesAny(p.contract, keys) && p.when.OnRoute(r.String()) != celenv.False {
				return true
			}
		}
		return false
	}
	if x.ReadsTokens && r != RouteGenerate && !mayPrecede(KeyTokens) {
		f["tokens.known"] = false
		why = append(why, "tokens.known is false (no render before "+quote(c.w.nodes[i].id)+")")
	}
	if x.ReadsMedia {
		switch {
		case r == RouteCompletions:
			f[celenv.SizeFact("media")] = int64(0)
			why = append(why, "media is empty (a completions request carries none)")
		case r == RouteChat && !mayPrecede(KeyMedia, KeyFeatures):
			f[celenv.SizeFact("media")] = int64(0)
			why = append(why, "media is empty (no fetch-media or render before "+quote(c.w.nodes[i].id)+")")
		}
	}
	return why
}

// neverHolds warns about guards and target rule conditions that are false
// for every request the workflow serves, and (dataflow/never-provided)
// about those false on some route only because what they read is not
// provided there.
func (c *compiler) neverHolds(anc []graph.Set) {
	routes := c.servedRoutes()
	if len(routes) == 0 {
		return
	}
	for i, n := range c.w.nodes {
		type cond struct {
			x    *celenv.Expr
			ptr  string
			what string
		}
		conds := []cond{{n.when, c.specs[i].ptr + "/when", "node " + quote(n.id) + " never runs: its guard"}}
		for k, t := range n.targets {
			conds = append(conds, cond{t.cond, schema.Ptr(c.specs[i].ptr, "target", k, "if"), fmt.Sprintf("target[%d] of %s is never chosen: its condition", k, quote(n.id))})
		}
		for _, cd := range conds {
			if cd.x == nil || cd.x.Const != nil {
				continue
			}
			var byRoute, byData, dataRoutes []string
			allFalse := true
			for _, r := range routes {
				fr := c.routeFacts(r)
				if cd.x.Decide(fr) == celenv.False {
					byRoute = append(byRoute, fmt.Sprintf("on %s, request.format is %s and request.path %s", r, quote(r.String()), quote(r.Path())))
					continue
				}
				fd := maps.Clone(fr)
				why := c.dataFacts(fd, cd.x, i, r, anc)
				if len(why) > 0 && cd.x.Decide(fd) == celenv.False {
					byData = append(byData, fmt.Sprintf("on %s, %s", r, strings.Join(why, " and ")))
					dataRoutes = append(dataRoutes, r.String())
					continue
				}
				allFalse = false
			}
			switch {
			case allFalse && len(byData) == 0:
				d := c.warnf(RuleNeverHolds, cd.ptr, "%s is false for every request on the routes this workflow serves (%s)", cd.what, strings.Join(byRoute, "; "))
				d.Hint = "compare with a route the workflow serves (request.format is chat, completions or generate), or add the route it names to routes:"
			case allFalse:
				d := c.warnf(RuleNeverHolds, cd.ptr, "%s is false for every request on the routes this workflow serves (%s)", cd.what, strings.Join(append(byRoute, byData...), "; "))
				d.Hint = "put the node that provides what it reads before this node, as a need (fetch-media or render for media, render for tokens)"
			case len(byData) > 0:
				route := strings.Join(dataRoutes, " and ") + " route"
				if len(dataRoutes) > 1 {
					route += "s"
				}
				d := c.warnf(RuleWanted, cd.ptr, "this condition never holds on the %s (%s)", route, strings.Join(byData, "; "))
				d.Hint = "put the node that provides what it reads before this node on that route (fetch-media or render for media, render for tokens), or restrict the condition to the routes where it is known"
			}
		}
	}
}

// gateFirst requires a gate (the async broker) to come before every other
// node: a request it queues is run again, from the workflow's start, by
// the dispatcher, so a node before or beside it would run twice (a render
// twice per queued request, a fetch-media downloading twice).
func (c *compiler) gateFirst(anc []graph.Set) {
	for g, n := range c.w.nodes {
		if !n.contract.Gate {
			continue
		}
		var before []string
		for j, m := range c.w.nodes {
			if j != g && !anc[j].Has(g) {
				before = append(before, quote(m.id))
			}
		}
		if len(before) == 0 {
			continue
		}
		d := c.errf(RuleGateFirst, c.specs[g].ptr+"/id", "%s (type %s) must be the first node: a request it queues is run again from the workflow's start when it is dispatched, so %s, which run before or beside it, would run twice for every queued request",
			quote(n.id), n.typ, strings.Join(before, ", "))
		d.Hint = fmt.Sprintf("remove the needs of %s and make %s need it, directly or through another node", quote(n.id), strings.Join(before, ", "))
	}
}

// splits compares target rules across nodes that must agree for one
// request: the model of a prefill and of the decode that reads its KV
// hand-off, and the pool of a conditional-decode probe and of the decode
// it falls back to. Each request the rules can tell apart is tried (the
// values their conditions compare with, as the ending proof does); a
// request on which both nodes may run and their rules choose differently
// is the counterexample the warning names.
func (c *compiler) splits(anc []graph.Set) {
	nodes := c.w.nodes
	for pi, p := range nodes {
		for di, d := range nodes {
			if pi == di || d.contract.Role != "decode" || !d.contract.Terminal {
				continue
			}
			related := anc[di].Has(pi)
			for _, need := range d.contract.Needs {
				related = related || hasKey(p.contract.Provides, need.Key)
			}
			if !related {
				continue
			}
			switch {
			case p.contract.Role == "prefill":
				c.split(pi, di, RuleModelSplit, "model", func(t *targetRule) string {
					if t.sel.Model == nil {
						return ""
					}
					return string(t.sel.Model)
				})
			case p.contract.Role == "decode" && p.contract.Responds && !p.contract.Terminal && !p.contract.Gate:
				c.split(pi, di, RulePoolSplit, "pool", func(t *targetRule) string { return t.sel.Pool })
			}
		}
	}
}

// split warns when nodes a and b choose a different value of one target
// field (what) for some request both may run on.
func (c *compiler) split(a, b int, rule, what string, field func(*targetRule) string) {
	na, nb := c.w.nodes[a], c.w.nodes[b]
	sets := func(n *cnode) bool {
		for k := range n.targets {
			if field(&n.targets[k]) != "" {
				return true
			}
		}
		return false
	}
	if !sets(na) && !sets(nb) {
		return
	}
	// choose is the value n's rules give under f: "" the node's default,
	// ok false when a condition cannot be decided there.
	choose := func(n *cnode, f celenv.Facts) (string, int, bool) {
		for k := range n.targets {
			switch n.targets[k].cond.Decide(f) {
			case celenv.True:
				return field(&n.targets[k]), k, true
			case celenv.Unknown:
				return "", -1, false
			}
		}
		return "", -1, true
	}
	for _, r := range c.servedRoutes() {
		base := c.routeFacts(r)
		exprs := []*celenv.Expr{na.when, nb.when}
		for _, n := range []*cnode{na, nb} {
			for k := range n.targets {
				exprs = append(exprs, n.targets[k].cond)
			}
		}
		for _, f := range scenarioFacts(base, exprs, 256) {
			if na.when.Decide(f) == celenv.False || nb.when.Decide(f) == celenv.False {
				continue
			}
			va, ka, oka := choose(na, f)
			vb, kb, okb := choose(nb, f)
			if !oka || !okb || va == vb {
				continue
			}
			// Point at the rule that sets the value (b's when both do).
			ptr := schema.Ptr(c.specs[b].ptr, "target", kb, what)
			if vb == "" {
				ptr = schema.Ptr(c.specs[a].ptr, "target", ka, what)
			}
			show := func(n *cnode, v string, k int) string {
				if v == "" {
					return quote(n.id) + " keeps its default"
				}
				return fmt.Sprintf("%s sets %s %s (target[%d])", quote(n.id), what, v, k)
			}
			msg := fmt.Sprintf("for a request%s on %s, %s but %s", describeFacts(f, base), r, show(na, va, ka), show(nb, vb, kb))
			var d *schema.Diagnostic
			if rule == RuleModelSplit {
				d = c.warnf(rule, ptr, "%s: the decode leg would read a KV hand-off computed under another model (one hand-off, two models)", msg)
				d.Hint = fmt.Sprintf("give %s the same model rules as %s (same if:, same model)", quote(nb.id), quote(na.id))
			} else {
				d = c.warnf(rule, ptr, "%s: the probe predicts and serves hits in one pool while a miss is decoded in another, whose cache it never sees", msg)
				d.Hint = fmt.Sprintf("give %s the same pool rules as %s (same if:, same pool)", quote(nb.id), quote(na.id))
			}
			return
		}
	}
}

// scenarioFacts returns base extended with every combination of the values
// the expressions compare request fields with (celenv.Expr.Atoms), at most
// limit of them (a larger product is cut, in a deterministic order).
func scenarioFacts(base celenv.Facts, exprs []*celenv.Expr, limit int) []celenv.Facts {
	atoms := map[string][]any{}
	for _, x := range exprs {
		for p, vs := range x.Atoms(base) {
			for _, v := range vs {
				if !slices.Contains(atoms[p], v) {
					atoms[p] = append(atoms[p], v)
				}
			}
		}
	}
	paths := make([]string, 0, len(atoms))
	for p := range atoms {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := []celenv.Facts{maps.Clone(base)}
	for _, p := range paths {
		var next []celenv.Facts
		for _, f := range out {
			for _, v := range atoms[p] {
				if len(next) >= limit {
					break
				}
				g := maps.Clone(f)
				if v != celenv.Other {
					g[p] = v
				}
				next = append(next, g)
			}
		}
		out = next
	}
	return out
}

// describeFacts names the request fields f fixes beyond base.
func describeFacts(f, base celenv.Facts) string {
	var parts []string
	for k, v := range f {
		if _, ok := base[k]; ok || strings.HasPrefix(k, "config.") {
			continue
		}
		switch x := v.(type) {
		case string:
			parts = append(parts, k+" "+quote(x))
		case int64:
			parts = append(parts, k+" "+strconv.FormatInt(x, 10))
		default:
			parts = append(parts, fmt.Sprintf("%s %v", k, x))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, " and ")
}

// retryChecks finds retry rules that cannot work as written: an if: with
// one attempt never retries; an if: that holds for a status the node's type
// gives a meaning of its own (conditional-decode's 412 miss) retries every
// miss before the edge that routes it fires.
func (c *compiler) retryChecks() {
	reported := map[string]bool{}
	// One attempt: report each retry.if once, at its own position, naming
	// the nodes it reaches (a defaults' if reaches those without attempts).
	var once []string
	onceNodes := map[string][]string{}
	for i, n := range c.w.nodes {
		rp := n.retry
		if rp.cond == nil || n.node == nil || rp.attempts > 1 {
			continue
		}
		if _, ok := onceNodes[rp.condPtr]; !ok {
			once = append(once, rp.condPtr)
		}
		onceNodes[rp.condPtr] = append(onceNodes[rp.condPtr], quote(c.specs[i].id))
	}
	for _, ptr := range once {
		who := "this node makes"
		if !strings.HasPrefix(ptr, "/nodes/") {
			who = strings.Join(onceNodes[ptr], ", ") + ", which set no attempts of their own, make"
			if len(onceNodes[ptr]) == 1 {
				who = onceNodes[ptr][0] + ", which sets no attempts of its own, makes"
			}
		}
		d := c.errf(RuleRetryOnce, ptr, "retry.if without attempts: %s one attempt (attempts defaults to 1), so it never retries and this condition is never evaluated", who)
		d.Hint = "set attempts beside if (for example retry: {attempts: 3, if: ...}), or remove if"
	}
	for _, n := range c.w.nodes {
		rp := n.retry
		if rp.cond == nil || n.node == nil || rp.attempts <= 1 {
			continue
		}
		for _, s := range n.contract.Statuses {
			f := celenv.Facts{"outcome.status": "failed", "response.status": int64(s), "outcome.response.status": int64(s),
				"nodes." + n.id + ".status": "failed", "nodes." + n.id + ".response.status": int64(s)}
			maps.Copy(f, c.configFacts())
			if rp.cond.Decide(f) != celenv.True {
				continue
			}
			key := rp.condPtr + "\x00" + strconv.Itoa(s)
			if reported[key] {
				continue
			}
			reported[key] = true
			d := c.warnf(RuleRetryRouted, rp.condPtr, "this retry rule holds for %d, which %s (type %s) answers with a meaning of its own (the miss its edges route): every %d takes up to %d attempts before it is routed",
				s, quote(n.id), n.typ, s, rp.attempts)
			d.Hint = fmt.Sprintf("exclude %d (for example if: response.status >= 500), or drop if to retry only timeouts, 5xx and transport failures", s)
		}
	}
}

// timeoutChecks warns about a per-attempt timeout on a node that relays
// the client's reply: the scheduler runs the whole attempt, relay
// included, under it, so a reply that outlasts it is cut after the client
// got HTTP 200 (the front aborts the stream: no [DONE], no error body).
func (c *compiler) timeoutChecks() {
	var fromDefaults []string
	for i, n := range c.w.nodes {
		if n.node == nil || !n.contract.Responds || n.contract.Gate || n.contract.Role == "" {
			continue
		}
		ptr := c.specs[i].ptr + "/timeout"
		switch {
		case c.doc.Has(ptr):
			if n.timeout > 0 {
				d := c.warnf(RuleTimeoutReply, ptr, "timeout %s bounds the whole attempt of %s, the reply it relays to the client included: a reply longer than %s is cut after the client got HTTP 200 (a stream ends without [DONE])", n.timeout, quote(n.id), n.timeout)
				d.Hint = "remove timeout (or set timeout: 0s) and bound the leg with the node's ttfb_timeout and stream_idle_timeout params"
			}
		case n.timeout > 0:
			fromDefaults = append(fromDefaults, quote(n.id))
		}
		for k := range n.targets {
			t := &n.targets[k]
			if t.sel.Timeout != nil && *t.sel.Timeout > 0 {
				d := c.warnf(RuleTimeoutReply, schema.Ptr(c.specs[i].ptr, "target", k, "timeout"), "timeout %s bounds the whole attempt of %s, the reply it relays to the client included: a reply longer than %s is cut after the client got HTTP 200 (a stream ends without [DONE])", *t.sel.Timeout, quote(n.id), *t.sel.Timeout)
				d.Hint = "use ttfb_timeout and stream_idle_timeout in this rule instead"
			}
		}
	}
	if len(fromDefaults) > 0 {
		which := "which relays"
		if len(fromDefaults) > 1 {
			which = "which relay"
		}
		d := c.warnf(RuleTimeoutReply, "/defaults/timeout", "defaults.timeout %s applies to %s, %s the client's reply: a reply longer than %s is cut after the client got HTTP 200 (a stream ends without [DONE])", c.defs.timeout, strings.Join(fromDefaults, ", "), which, c.defs.timeout)
		d.Hint = "set timeout: 0s on those nodes (bound them with ttfb_timeout and stream_idle_timeout), or set timeout on the nodes that need one instead of in defaults"
	}
}
