package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/celflow/celflow/engine/celenv"
	"github.com/celflow/celflow/engine/graph"
)

// dataflow proves, for every route the workflow serves, that each node's
// needs are provided on every path into it. A provider counts on a path only
// when it surely ran and succeeded there: not behind a guard that may be
// false on that route, not a fan-out (an empty list skips it), and reached
// through an unconditional edge (a conditional edge may fire on failure).
// The entry provides tokens, features and media on generate (the front
// parses them, docs/protocol.md) and media on completions (which has none).
// A guard decided by request.format alone is decided per route, so a
// `when: request.format == "chat"` render surely runs on chat and never on
// the other routes.
func (c *compiler) dataflow(g *graph.Graph, order []int, anc []graph.Set) {
	nodes := c.w.nodes
	// A key's name is its identity: two declarations of one name are the
	// same data to the check.
	bits := map[string]uint64{}
	keys := map[string]AnyKey{}
	bit := func(k AnyKey) uint64 {
		if b, ok := bits[k.Name()]; ok {
			return b
		}
		if len(bits) == 64 {
			return 0
		}
		b := uint64(1) << len(bits)
		bits[k.Name()], keys[k.Name()] = b, k
		return b
	}
	entryGenerate := bit(KeyTokens) | bit(KeyFeatures) | bit(KeyMedia)
	gen := make([]uint64, len(nodes))
	for i, n := range nodes {
		for _, k := range n.contract.Provides {
			gen[i] |= bit(k)
		}
	}
	type miss struct {
		node   int
		key    AnyKey
		routes []string
		path   []int
	}
	var misses []*miss
	find := func(i int, k AnyKey) *miss {
		for _, m := range misses {
			if m.node == i && sameKey(m.key, k) {
				return m
			}
		}
		return nil
	}
	for _, r := range Routes {
		if !c.w.routes[r] {
			continue
		}
		format := r.String()
		never := make([]bool, len(nodes))
		f := graph.Flow{
			Gen:       make([]uint64, len(nodes)),
			Skippable: make([]bool, len(nodes)),
			Any:       make([]bool, len(nodes)),
			Carries:   func(i, k int) bool { return nodes[i].needs[k].cond == nil },
		}
		switch r {
		case RouteGenerate:
			f.Entry = entryGenerate
		case RouteCompletions:
			f.Entry = bit(KeyMedia) // completions carry no media: the (empty) list is known at entry
		}
		for i, n := range nodes {
			t := n.when.OnRoute(format)
			never[i] = t == celenv.False
			f.Skippable[i] = t != celenv.True || n.foreach != nil
			if !never[i] {
				f.Gen[i] = gen[i]
			}
			f.Any[i] = n.joinAny
		}
		in, out := g.Available(order, f)
		for i, n := range nodes {
			if never[i] {
				continue
			}
			for _, need := range n.contract.Needs {
				if len(need.Routes) > 0 && !slices.Contains(need.Routes, r) {
					continue
				}
				b := bit(need.Key)
				if in[i]&b != 0 {
					continue
				}
				if m := find(i, need.Key); m != nil {
					m.routes = append(m.routes, format)
					continue
				}
				misses = append(misses, &miss{node: i, key: need.Key, routes: []string{format},
					path: g.Witness(order, f, in, out, i, b)})
			}
		}
	}
	for _, m := range misses {
		names := []string{"request"}
		for _, i := range m.path {
			names = append(names, nodes[i].id)
		}
		route := strings.Join(m.routes, " and ") + " route"
		if len(m.routes) > 1 {
			route += "s"
		}
		c.errf(RuleDataflow, c.specs[m.node].ptr+"/type",
			"node %s needs %s on the %s, but this path reaches it without %s surely provided: %s%s",
			quote(nodes[m.node].id), m.key, route, m.key, strings.Join(names, " → "), c.providers(m.key))
	}
	c.wanted(anc)
	// Two writers of one key must be ordered, or they race on the run state;
	// a rendezvous key is made by whichever of its unordered providers runs
	// first (Key.Meet), so it may have several.
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		k := keys[name]
		if k.meet() {
			continue
		}
		var ps []int
		for i, n := range nodes {
			if hasKey(n.contract.Provides, k) {
				ps = append(ps, i)
			}
		}
		for x := 0; x < len(ps); x++ {
			for y := x + 1; y < len(ps); y++ {
				a, b := ps[x], ps[y]
				if !anc[a].Has(b) && !anc[b].Has(a) {
					c.errf(RuleProviders, c.specs[b].ptr+"/type", "nodes %s and %s both provide %s and neither needs the other", quote(nodes[a].id), quote(nodes[b].id), k)
				}
			}
		}
	}
}

// providers names the nodes that provide k, for the dataflow message.
func (c *compiler) providers(k AnyKey) string {
	var ps []string
	for _, n := range c.w.nodes {
		if hasKey(n.contract.Provides, k) {
			ps = append(ps, quote(n.id))
		}
	}
	if len(ps) == 0 {
		return fmt.Sprintf(" (no node provides %s)", k)
	}
	return fmt.Sprintf(" (%s provided by %s, which is missing from this path, may be skipped by a guard or fan out over no items, or is behind a conditional edge)", k, strings.Join(ps, ", "))
}

// wanted warns about Contract.Wants: data that no node preceding the
// wanting node provides (and, for tokens and features, that the route's
// entry does not bring: generate), on a route the want lists.
func (c *compiler) wanted(anc []graph.Set) {
	c.tokenReads(anc)
	for i, n := range c.w.nodes {
		for _, w := range n.contract.Wants {
			var routes []string
			for _, r := range Routes {
				if !c.w.routes[r] || (len(w.Routes) > 0 && !slices.Contains(w.Routes, r)) {
					continue
				}
				if r == RouteGenerate && (sameKey(w.Key, KeyTokens) || sameKey(w.Key, KeyFeatures) || sameKey(w.Key, KeyMedia)) {
					continue // the front parses a generate body's tokens and features at entry
				}
				provided := false
				for j, p := range c.w.nodes {
					if anc[i].Has(j) && hasKey(p.contract.Provides, w.Key) && p.when.OnRoute(r.String()) != celenv.False {
						provided = true
						break
					}
				}
				if !provided {
					routes = append(routes, r.String())
				}
			}
			if len(routes) == 0 {
				continue
			}
			c.warnf(RuleWanted, c.specs[i].ptr+"/type", "node %s has no %s on the %s route(s): no node before it provides them; %s",
				quote(n.id), w.Key, strings.Join(routes, " and "), n.contract.Why)
		}
	}
}

// tokenReads warns about a guard or target condition that reads tokens on
// a route where no node before it provides them (chat and completions
// without render): tokens.count reads 0 there, so `tokens.count > N` never
// holds (found in review: it validated and silently never fired).
func (c *compiler) tokenReads(anc []graph.Set) {
	for i, n := range c.w.nodes {
		type read struct {
			x   *celenv.Expr
			ptr string
		}
		reads := []read{{n.when, c.specs[i].ptr + "/when"}}
		for k, t := range n.targets {
			reads = append(reads, read{t.cond, fmt.Sprintf("%s/target/%d/if", c.specs[i].ptr, k)})
		}
		for _, rd := range reads {
			// A check of tokens.known is how a workflow asks exactly this
			// question: only reads of the count or the ids are suspect.
			if rd.x == nil || !rd.x.ReadsTokens || strings.Contains(rd.x.Src, "tokens.known") ||
				!(strings.Contains(rd.x.Src, "tokens.count") || strings.Contains(rd.x.Src, "tokens.ids")) {
				continue
			}
			var routes []string
			for _, r := range []Route{RouteChat, RouteCompletions} {
				if !c.w.routes[r] || n.when.OnRoute(r.String()) == celenv.False {
					continue
				}
				provided := false
				for j, p := range c.w.nodes {
					if anc[i].Has(j) && hasKey(p.contract.Provides, KeyTokens) && p.when.OnRoute(r.String()) != celenv.False {
						provided = true
						break
					}
				}
				if !provided {
					routes = append(routes, r.String())
				}
			}
			if len(routes) > 0 {
				d := c.warnf(RuleWanted, rd.ptr, "reads tokens, but no node before %s provides them on the %s route(s): there the prompt's tokens are unknown and tokens.count reads 0",
					quote(n.id), strings.Join(routes, " and "))
				d.Hint = "put render before this node (a need), or restrict the expression to request.format == \"generate\", whose tokens the front parses"
			}
		}
	}
}
