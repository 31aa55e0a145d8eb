package graph

import (
	"slices"
	"testing"
)

func TestCycleAndTopo(t *testing.T) {
	tests := []struct {
		name  string
		preds [][]int
		cycle []int
		topo  []int
	}{
		{"chain", [][]int{{}, {0}, {1}}, nil, []int{0, 1, 2}},
		{"diamond", [][]int{{}, {0}, {0}, {1, 2}}, nil, []int{0, 1, 2, 3}},
		{"declared out of order", [][]int{{2}, {}, {1}}, nil, []int{1, 2, 0}},
		// ACCEPTANCE 40: the same cycle, starting at its lowest index, every time.
		{"three-cycle", [][]int{{2}, {0}, {1}, {}}, []int{0, 1, 2}, nil},
		{"self", [][]int{{}, {1}}, []int{1}, nil},
		{"cycle behind a root", [][]int{{}, {0, 3}, {1}, {2}}, []int{1, 2, 3}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &Graph{Preds: tc.preds}
			for range 3 {
				if got := g.Cycle(); !slices.Equal(got, tc.cycle) {
					t.Fatalf("cycle %v, want %v", got, tc.cycle)
				}
			}
			order, ok := g.Topo()
			if ok != (tc.cycle == nil) {
				t.Fatalf("topo ok=%v", ok)
			}
			if ok && !slices.Equal(order, tc.topo) {
				t.Fatalf("topo %v, want %v", order, tc.topo)
			}
		})
	}
}

func TestAncestorsReachable(t *testing.T) {
	// 0 → 1 → 3, 0 → 2 → 3 (3 joins), 4 needs 3 through a dead edge.
	g := &Graph{Preds: [][]int{{}, {0}, {0}, {1, 2}, {3}}}
	order, _ := g.Topo()
	anc := g.Ancestors(order)
	if !anc[3].Has(0) || !anc[3].Has(1) || !anc[3].Has(2) || anc[3].Has(4) || anc[1].Has(2) {
		t.Fatal("ancestors wrong")
	}
	dead := func(i, k int) bool { return !(i == 3 && k == 0) } // 1 → 3 can never fire
	r := g.Reachable(order, dead, make([]bool, 5))
	if !slices.Equal(r, []bool{true, true, true, false, false}) {
		t.Fatalf("join all: %v", r)
	}
	r = g.Reachable(order, dead, []bool{false, false, false, true, false})
	if !slices.Equal(r, []bool{true, true, true, true, true}) {
		t.Fatalf("join any: %v", r)
	}
}

func TestAvailableAndWitness(t *testing.T) {
	const tok = 1
	// 0 (guarded render) → 1 (prefill needs tok); 2 (render) → 3.
	g := &Graph{Preds: [][]int{{}, {0}, {}, {2}, {1, 3}}}
	order, _ := g.Topo()
	f := Flow{
		Gen:       []uint64{tok, 0, tok, 0, 0},
		Skippable: []bool{true, false, false, false, false},
		Any:       []bool{false, false, false, false, true},
		Carries:   func(i, k int) bool { return true },
	}
	in, out := g.Available(order, f)
	if in[1]&tok != 0 || in[3]&tok == 0 {
		t.Fatalf("in %v", in)
	}
	if in[4]&tok != 0 { // join any: only what every need brings
		t.Fatalf("join any in %v", in[4])
	}
	if w := g.Witness(order, f, in, out, 1, tok); !slices.Equal(w, []int{0, 1}) {
		t.Fatalf("witness %v", w)
	}
	if w := g.Witness(order, f, in, out, 3, tok); w != nil {
		t.Fatalf("witness %v for an available key", w)
	}
	// A conditional edge does not carry its source's keys.
	f.Carries = func(i, k int) bool { return i != 3 }
	in, _ = g.Available(order, f)
	if in[3]&tok != 0 {
		t.Fatal("conditional edge carried tokens")
	}
	f.Any[4] = false // join all: keys from any need count
	f.Carries = func(i, k int) bool { return true }
	in, _ = g.Available(order, f)
	if in[4]&tok == 0 {
		t.Fatal("join all lost tokens")
	}
}
