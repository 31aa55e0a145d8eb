package engine

import "strconv"

// AnyKey is a key of any value type: what a Contract's Needs and Provides
// name. A key's name is its identity for the compiler (the dataflow check
// treats two keys of one name as the same data), in diagnostics and in
// explain's stubs; its value lives on the Run, under the declaration.
type AnyKey interface {
	Name() string
	String() string
	// stub does what a node providing the key does, for a stubbed run
	// (explain, a tests: block). Unexported: keys are made by NewKey or
	// are the core's own (media, tokens, features).
	stub(r *Run, p Probe)
	// meet reports a rendezvous key (see Key.Meet).
	meet() bool
}

// Key names one piece of per-request data of type T. The package that owns
// the data declares it once, as a package variable:
//
//	var KV = engine.NewKey[KVHandoff]("kv")
//
// and its nodes name it in their contracts and read and write its value on
// the run with Get, Set and GetOrMake. The core never knows T.
type Key[T any] struct {
	name    string
	stubFn  func(p Probe) T
	hasStub bool
	isMeet  bool
}

// NewKey declares a key. name is its identity in contracts (see AnyKey).
func NewKey[T any](name string) *Key[T] {
	if name == "" {
		panic("engine: NewKey with an empty name")
	}
	return &Key[T]{name: name}
}

// Stub sets what a stubbed node that provides k leaves in the run (explain
// and tests: blocks run no worker): mk's value, set as if by the node. A key
// without a stub is left unset by stubs. It returns k, for declarations.
func (k *Key[T]) Stub(mk func(p Probe) T) *Key[T] {
	k.stubFn, k.hasStub = mk, mk != nil
	return k
}

// Meet marks k as a rendezvous: nodes that run side by side (no edge
// between them) make its value together with GetOrMake, whichever runs
// first (the concurrent SGLang session of prefill and decode). Several
// unordered nodes may then provide it; for any other key that is a race the
// compiler rejects. It returns k, for declarations.
func (k *Key[T]) Meet() *Key[T] {
	k.isMeet = true
	return k
}

// Name is the key's identity.
func (k *Key[T]) Name() string { return k.name }

// String is the name, for diagnostics.
func (k *Key[T]) String() string { return k.name }

func (k *Key[T]) meet() bool { return k.isMeet }

func (k *Key[T]) stub(r *Run, p Probe) {
	if k.hasStub {
		k.Set(r, k.stubFn(p))
	}
}

// slot is where one value lives on a run: the key's declaration and a
// scope (see GetOrMakeIn).
type slot struct {
	key   any
	scope string
}

// Get returns the run's value of k, and whether it was set.
func (k *Key[T]) Get(r *Run) (T, bool) {
	r.valsMu.Lock()
	defer r.valsMu.Unlock()
	v, ok := r.vals[slot{key: k}]
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

// Value is Get without the flag: T's zero value when unset.
func (k *Key[T]) Value(r *Run) T {
	v, _ := k.Get(r)
	return v
}

// Set records the run's value of k. Only a node whose contract provides k
// sets it, and the DAG orders it before every node that needs k.
func (k *Key[T]) Set(r *Run, v T) {
	r.valsMu.Lock()
	defer r.valsMu.Unlock()
	r.setLocked(slot{key: k}, v)
}

// GetOrMake returns the run's value of k, making it once with mk: nodes
// running at once that must agree on something drawn per request meet here
// (mk runs under the run's lock; keep it short).
func (k *Key[T]) GetOrMake(r *Run, mk func() T) T {
	return k.GetOrMakeIn(r, "", mk)
}

// GetOrMakeIn is GetOrMake for one scope of the key: a node's or a fan-out
// item's own value ("encode-1", "prefill/2"), so that one declaration
// serves every node of a type. Scoped values are private to their node:
// contracts do not name them.
func (k *Key[T]) GetOrMakeIn(r *Run, scope string, mk func() T) T {
	r.valsMu.Lock()
	defer r.valsMu.Unlock()
	s := slot{key: k, scope: scope}
	if v, ok := r.vals[s]; ok {
		return v.(T)
	}
	v := mk()
	r.setLocked(s, v)
	return v
}

func (r *Run) setLocked(s slot, v any) {
	if r.vals == nil {
		r.vals = make(map[slot]any, 4)
	}
	r.vals[s] = v
}

// stateKey is one of the core's own keys: data the workflow language reads
// (the CEL variables media and tokens), which lives in State.
type stateKey struct {
	name   string
	stubFn func(r *Run, p Probe)
}

func (k *stateKey) Name() string         { return k.name }
func (k *stateKey) String() string       { return k.name }
func (k *stateKey) meet() bool           { return false }
func (k *stateKey) stub(r *Run, p Probe) { k.stubFn(r, p) }

// sameKey compares keys as the compiler does: by name.
func sameKey(a, b AnyKey) bool { return a != nil && b != nil && a.Name() == b.Name() }

// hasKey reports whether ks names k.
func hasKey(ks []AnyKey, k AnyKey) bool {
	for _, x := range ks {
		if sameKey(x, k) {
			return true
		}
	}
	return false
}

// The core's keys. The front provides KeyTokens and KeyFeatures for the
// generate route (validated at entry, docs/protocol.md); everything else
// comes from nodes.
var (
	// KeyMedia is State.Media: the items found in the body (fetch-media).
	KeyMedia AnyKey = &stateKey{name: "media", stubFn: func(r *Run, p Probe) { r.State.Media = scanMedia(p.Route, p.Body) }}
	// KeyTokens is State.Tokens: the prompt's token ids T (render, generate entry).
	KeyTokens AnyKey = &stateKey{name: "tokens", stubFn: func(r *Run, p Probe) { r.State.Tokens = stubTokens(p) }}
	// KeyFeatures is each media item's hash, placeholder and kwargs (render, generate entry).
	KeyFeatures AnyKey = &stateKey{name: "features", stubFn: func(r *Run, _ Probe) {
		for i := range r.State.Media {
			r.State.Media[i].Hash = "h" + strconv.Itoa(i)
			r.State.Media[i].HasFeatures = true
		}
	}}
)
