package upstream

// nameTable is the prefix index's name → slot map: open addressing with
// linear probing, specialised for keys that are already hashes (a block
// name is a mix64 output, so its low bits pick the home slot). Recording a
// new 50k-token prompt inserts ~3k names and evicts as many; with Go's map
// that was three hash-map operations per name, here each is a probe or two
// into one []int32.
//
// It stores indexes into the owner's keys slice, not the names: the caller
// keeps keys[i] equal to the name stored for i while i is in the table.
// Not safe for concurrent use (prefixIndex holds its lock).
type nameTable struct {
	slots []int32 // 1 + index into keys; 0 = empty
	mask  uint64
	n     int
}

// minTableSlots is the initial size; the table doubles to stay at most
// half full, so an index sized for 10k names grows lazily to 32k slots.
const minTableSlots = 1024

// find returns the index stored for h.
func (t *nameTable) find(keys []uint64, h uint64) (int32, bool) {
	if t.n == 0 {
		return 0, false
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		if keys[s-1] == h {
			return s - 1, true
		}
	}
}

// insert adds index idx, whose name keys[idx] is not in the table yet.
func (t *nameTable) insert(keys []uint64, idx int32) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow(keys)
		return
	}
	t.place(keys[idx], idx)
	t.n++
}

func (t *nameTable) place(h uint64, idx int32) {
	i := h & t.mask
	for t.slots[i] != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = idx + 1
}

// grow rebuilds the table at least twice as large from every index of
// keys: the owner's table holds all of them once idx is in (it appends
// names, then replaces them in place, never leaves a hole).
func (t *nameTable) grow(keys []uint64) {
	size := max(minTableSlots, 2*len(t.slots))
	for 2*len(keys) > size {
		size *= 2
	}
	t.slots = make([]int32, size)
	t.mask = uint64(size - 1)
	for i, h := range keys {
		t.place(h, int32(i))
	}
	t.n = len(keys)
}

// remove deletes h (which must be present) by backward shifting, so no
// tombstones slow later probes (Knuth 6.4, Algorithm R).
func (t *nameTable) remove(keys []uint64, h uint64) {
	i := h & t.mask
	for keys[t.slots[i]-1] != h {
		i = (i + 1) & t.mask
	}
	for j := i; ; {
		j = (j + 1) & t.mask
		s := t.slots[j]
		if s == 0 {
			break
		}
		// The entry at j may stay when its home k lies cyclically in (i, j].
		k := keys[s-1] & t.mask
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i] = s
		i = j
	}
	t.slots[i] = 0
	t.n--
}
