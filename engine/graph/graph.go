// Package graph holds the pure DAG algorithms of the workflow compiler: no
// I/O, no CEL, no engine types. Nodes are indices in declaration order; an
// edge is "node i needs node j", stored as Preds[i][k] = j. Every result is
// deterministic: ties break by declaration order.
package graph

import "slices"

// Graph is a dependency graph. Preds[i] lists the nodes i needs, in the
// order the workflow declares them (edge k of node i is Preds[i][k]).
type Graph struct {
	Preds [][]int
}

// Len is the number of nodes.
func (g *Graph) Len() int { return len(g.Preds) }

// Succs returns, for every node, the nodes that need it, ascending.
func (g *Graph) Succs() [][]int {
	s := make([][]int, len(g.Preds))
	for i, ps := range g.Preds {
		for _, p := range ps {
			if !slices.Contains(s[p], i) {
				s[p] = append(s[p], i)
			}
		}
	}
	for _, x := range s {
		slices.Sort(x)
	}
	return s
}

// Cycle returns the nodes of one cycle in dependency order (each node is
// needed by the next, the last needed by the first), starting at the
// cycle's lowest index, or nil when the graph is acyclic. The same graph
// always yields the same cycle.
func (g *Graph) Cycle() []int {
	succ := g.Succs()
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(g.Preds))
	var stack []int
	var found []int
	var visit func(n int) bool
	visit = func(n int) bool {
		color[n] = grey
		stack = append(stack, n)
		for _, s := range succ[n] {
			switch color[s] {
			case grey:
				i := slices.Index(stack, s)
				found = slices.Clone(stack[i:])
				return true
			case white:
				if visit(s) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for n := range g.Preds {
		if color[n] == white && visit(n) {
			break
		}
	}
	if found == nil {
		return nil
	}
	lo := 0
	for i, n := range found {
		if n < found[lo] {
			lo = i
		}
	}
	return append(found[lo:], found[:lo]...)
}

// Topo returns a topological order (a node after everything it needs),
// preferring lower indices; ok is false when there is a cycle.
func (g *Graph) Topo() (order []int, ok bool) {
	n := len(g.Preds)
	indeg := make([]int, n)
	succ := g.Succs()
	for i, ps := range g.Preds {
		seen := map[int]bool{}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				indeg[i]++
			}
		}
	}
	done := make([]bool, n)
	for len(order) < n {
		next := -1
		for i := 0; i < n; i++ {
			if !done[i] && indeg[i] == 0 {
				next = i
				break
			}
		}
		if next < 0 {
			return order, false
		}
		done[next] = true
		order = append(order, next)
		for _, s := range succ[next] {
			indeg[s]--
		}
	}
	return order, true
}

// Set is a small bit set of node indices.
type Set []uint64

// NewSet makes a set able to hold n members.
func NewSet(n int) Set { return make(Set, (n+63)/64) }

func (s Set) Add(i int)      { s[i/64] |= 1 << (i % 64) }
func (s Set) Has(i int) bool { return i/64 < len(s) && s[i/64]&(1<<(i%64)) != 0 }
func (s Set) Union(o Set) {
	for i := range s {
		s[i] |= o[i]
	}
}

// Ancestors returns, for every node, the set of nodes it transitively
// needs (not itself). The graph must be acyclic.
func (g *Graph) Ancestors(order []int) []Set {
	anc := make([]Set, len(g.Preds))
	for _, n := range order {
		anc[n] = NewSet(len(g.Preds))
		for _, p := range g.Preds[n] {
			anc[n].Add(p)
			anc[n].Union(anc[p])
		}
	}
	return anc
}

// Reachable reports which nodes some path from a root can reach, given
// which edges can fire (live(i, k) for edge k of node i) and which nodes
// join any (one live, reached need suffices) rather than all. The graph
// must be acyclic; order is its topological order.
func (g *Graph) Reachable(order []int, live func(i, k int) bool, any []bool) []bool {
	r := make([]bool, len(g.Preds))
	for _, n := range order {
		ps := g.Preds[n]
		if len(ps) == 0 {
			r[n] = true
			continue
		}
		all, one := true, false
		for k, p := range ps {
			ok := r[p] && live(n, k)
			all = all && ok
			one = one || ok
		}
		r[n] = all || (any[n] && one)
	}
	return r
}
