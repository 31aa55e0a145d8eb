package graph

// Flow is a must-availability dataflow problem over bit masks of data keys
// (at most 64 keys). A key is available at a node when it is available on
// every way the node can be reached.
type Flow struct {
	Entry uint64 // keys the request itself provides
	// Gen[i] are the keys node i provides when it runs and succeeds.
	Gen []uint64
	// Carries(i, k) reports whether edge k of node i only fires after its
	// predecessor succeeded (so the predecessor's Gen travels along it).
	// An edge that can fire on a skip or a failure does not carry Gen.
	Carries func(i, k int) bool
	// Skippable[i]: node i may not run (a guard, an empty fan-out), so the
	// keys it generates are not certain even along a carrying edge.
	Skippable []bool
	// Any[i]: node i joins any, so only keys available on every fired
	// need count; a join-all node has every need fired, so keys from any
	// of them count.
	Any []bool
}

// Available computes, for every node, the keys certainly available when it
// starts (In) and when it is done (Out). order is a topological order.
func (g *Graph) Available(order []int, f Flow) (in, out []uint64) {
	n := len(g.Preds)
	in, out = make([]uint64, n), make([]uint64, n)
	for _, i := range order {
		in[i] = g.edgeIn(i, f, in, out)
		out[i] = in[i]
		if !f.Skippable[i] {
			out[i] |= f.Gen[i]
		}
	}
	return in, out
}

// edgeOut is what edge k of node i brings into i.
func (g *Graph) edgeOut(i, k int, f Flow, in, out []uint64) uint64 {
	p := g.Preds[i][k]
	if f.Carries(i, k) {
		return out[p]
	}
	// Fired on skip or failure: only what was there before p.
	return in[p]
}

func (g *Graph) edgeIn(i int, f Flow, in, out []uint64) uint64 {
	ps := g.Preds[i]
	if len(ps) == 0 {
		return f.Entry
	}
	var acc uint64
	if f.Any[i] {
		acc = ^uint64(0)
	}
	for k := range ps {
		e := g.edgeOut(i, k, f, in, out)
		if f.Any[i] {
			acc &= e
		} else {
			acc |= e
		}
	}
	return acc
}

// Witness returns one path of nodes, from a root to i (inclusive), along
// which key (a single bit) is not available at i. in and out come from
// Available; the path is nil when key is available at i.
func (g *Graph) Witness(order []int, f Flow, in, out []uint64, i int, key uint64) []int {
	if in[i]&key != 0 {
		return nil
	}
	path := []int{i}
	for cur := i; len(g.Preds[cur]) > 0; {
		next := -1
		for k, p := range g.Preds[cur] {
			if g.edgeOut(cur, k, f, in, out)&key == 0 {
				next = p
				break
			}
		}
		if next < 0 {
			break
		}
		path = append(path, next)
		cur = next
	}
	for l, r := 0, len(path)-1; l < r; l, r = l+1, r-1 {
		path[l], path[r] = path[r], path[l]
	}
	return path
}
