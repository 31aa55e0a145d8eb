package celenv

import (
	"fmt"
	"reflect"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// MediaSource fills `media` on demand. The engine's run implements it, so
// the list is converted from the run's items only when an expression reads
// it, and again only after a node changed them (Activation.MediaChanged).
type MediaSource interface {
	CELMedia(dst []Media) []Media
}

// Activation is the one activation of a run: every guard, edge condition,
// fan-out list and retry predicate of one request is evaluated against it,
// by the scheduler's goroutine only. Names resolve lazily to values that
// live in the activation itself, so an evaluation allocates nothing for
// variables it does not read.
type Activation struct {
	Request Request
	Tokens  Tokens
	Nodes   Nodes
	Config  *Config
	// Outcome is the node an edge condition or retry predicate is about;
	// the scheduler sets it before such an evaluation.
	Outcome *NodeState
	Media   MediaSource

	p          *provider
	mediaItems []Media
	mediaList  mediaList
	mediaDirty bool
}

var _ interpreter.Activation = (*Activation)(nil)

// NewActivation prepares an activation for one run of env's workflow with
// n nodes; the caller fills Request, Tokens and Media.
func (e *Env) NewActivation(n int) *Activation {
	a := &Activation{Config: e.config, p: e.prov, mediaDirty: true}
	a.Nodes.States = make([]NodeState, n)
	return a
}

// Reset clears the per-request values so a pooled activation can serve
// another run of the same workflow.
func (a *Activation) Reset() {
	a.Request, a.Tokens, a.Outcome, a.Media = Request{}, Tokens{}, nil, nil
	clear(a.Nodes.States)
	clear(a.mediaItems)
	a.mediaItems, a.mediaList, a.mediaDirty = a.mediaItems[:0], mediaList{}, true
}

// MediaChanged tells the activation that the run's media items may have
// changed (a node that provides media or features finished).
func (a *Activation) MediaChanged() { a.mediaDirty = true }

// ResolveName implements interpreter.Activation.
func (a *Activation) ResolveName(name string) (any, bool) {
	switch name {
	case "request":
		return &a.Request, true
	case "tokens":
		return &a.Tokens, true
	case "nodes":
		return &a.Nodes, true
	case "config":
		return a.Config, a.Config != nil
	case "media":
		if a.mediaDirty {
			a.mediaDirty = false
			if a.Media != nil {
				a.mediaItems = a.Media.CELMedia(a.mediaItems[:0])
			}
			a.mediaList = mediaList{p: a.p, items: a.mediaItems}
		}
		return &a.mediaList, true
	case "outcome":
		return a.Outcome, a.Outcome != nil
	case "response":
		if a.Outcome == nil {
			return nil, false
		}
		return &a.Outcome.Response, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *Activation) Parent() interpreter.Activation { return nil }

// mediaList is `media` as a CEL list whose elements are celflow.Media objects.
type mediaList struct {
	p     *provider
	items []Media
}

var _ traits.Lister = (*mediaList)(nil)

var mediaListType = types.NewListType(types.NewObjectType(MediaType))

func (l *mediaList) ConvertToNative(t reflect.Type) (any, error) {
	if reflect.TypeOf(l.items).AssignableTo(t) {
		return l.items, nil
	}
	return nil, fmt.Errorf("celflow: cannot convert media to %v", t)
}

func (l *mediaList) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return types.ListType
	}
	if t.TypeName() == types.ListType.TypeName() {
		return l
	}
	return types.NewErr("celflow: cannot convert media to %s", t.TypeName())
}

func (l *mediaList) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.False
	}
	if types.Int(len(l.items)) != o.Size() {
		return types.False
	}
	for i := range l.items {
		if l.Get(types.Int(i)).Equal(o.Get(types.Int(i))) != types.True {
			return types.False
		}
	}
	return types.True
}

func (l *mediaList) Type() ref.Type { return types.ListType }
func (l *mediaList) Value() any     { return l.items }
func (l *mediaList) Size() ref.Val  { return types.Int(len(l.items)) }

func (l *mediaList) Get(index ref.Val) ref.Val {
	i, ok := index.(types.Int)
	if !ok {
		return types.ValOrErr(index, "no such overload")
	}
	if i < 0 || int(i) >= len(l.items) {
		return types.NewErr("index out of range: %d", i)
	}
	return l.p.NativeToValue(&l.items[i])
}

func (l *mediaList) Contains(v ref.Val) ref.Val {
	for i := range l.items {
		if l.Get(types.Int(i)).Equal(v) == types.True {
			return types.True
		}
	}
	return types.False
}

func (l *mediaList) Add(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.ValOrErr(other, "no such overload")
	}
	vals := make([]ref.Val, 0, len(l.items))
	for i := range l.items {
		vals = append(vals, l.Get(types.Int(i)))
	}
	return types.NewRefValList(l.p, vals).Add(o)
}

func (l *mediaList) Iterator() traits.Iterator { return &mediaIter{l: l} }

type mediaIter struct {
	l *mediaList
	i int
}

func (it *mediaIter) ConvertToNative(reflect.Type) (any, error) { return nil, fmt.Errorf("iterator") }
func (it *mediaIter) ConvertToType(ref.Type) ref.Val            { return types.NewErr("iterator") }
func (it *mediaIter) Equal(ref.Val) ref.Val                     { return types.False }
func (it *mediaIter) Type() ref.Type                            { return types.IteratorType }
func (it *mediaIter) Value() any                                { return nil }
func (it *mediaIter) HasNext() ref.Val                          { return types.Bool(it.i < len(it.l.items)) }
func (it *mediaIter) Next() ref.Val {
	if it.i >= len(it.l.items) {
		return nil
	}
	v := it.l.Get(types.Int(it.i))
	it.i++
	return v
}

var _ = mediaListType
