package upstream

import (
	"math/rand/v2"
	"testing"
)

// The table behaves as a map under the owner's usage (append, then replace
// in place), with names crowded onto a few home slots at the end of the
// table so probes wrap and deletions shift entries across the wrap.
func TestNameTableMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, capacity := range []int{1, 7, 600, 3000} {
		var tab nameTable
		var keys []uint64
		want := map[uint64]int32{}
		name := func() uint64 {
			for {
				// Home slot in the last 8 of 1024 (or of a larger table
				// after growth: still crowded) or anywhere.
				h := r.Uint64()
				if r.IntN(2) == 0 {
					h = h&^1023 | uint64(1016+r.IntN(8))
				}
				if _, dup := want[h]; !dup {
					return h
				}
			}
		}
		for op := range 4 * capacity {
			h := name()
			if len(keys) < capacity {
				keys = append(keys, h)
				tab.insert(keys, int32(len(keys)-1))
				want[h] = int32(len(keys) - 1)
			} else {
				victim := r.IntN(capacity)
				tab.remove(keys, keys[victim])
				delete(want, keys[victim])
				keys[victim] = h
				tab.insert(keys, int32(victim))
				want[h] = int32(victim)
			}
			if op%97 == 0 || op == 4*capacity-1 {
				if tab.n != len(want) {
					t.Fatalf("cap %d op %d: n = %d, want %d", capacity, op, tab.n, len(want))
				}
				for k, v := range want {
					if got, ok := tab.find(keys, k); !ok || got != v {
						t.Fatalf("cap %d op %d: find(%x) = %d %v, want %d", capacity, op, k, got, ok, v)
					}
				}
				for range 50 {
					k := name()
					if _, ok := tab.find(keys, k); ok {
						t.Fatalf("cap %d: absent name %x found", capacity, k)
					}
				}
			}
		}
		if 2*tab.n > len(tab.slots) {
			t.Fatalf("cap %d: %d names in %d slots", capacity, tab.n, len(tab.slots))
		}
	}
}

func TestNameTableEmpty(t *testing.T) {
	var tab nameTable
	if _, ok := tab.find(nil, 42); ok {
		t.Fatal("found a name in an empty table")
	}
}
