package celenv

import (
	"fmt"
	"reflect"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// CEL type names of celflow's object types.
const (
	RequestType   = "celflow.Request"
	MediaType     = "celflow.Media"
	TokensType    = "celflow.Tokens"
	ResponseType  = "celflow.Response"
	NodeStateType = "celflow.NodeState"
	NodesType     = "celflow.Nodes"
	ConfigType    = "celflow.Config"
	// OutputsType prefixes each node's outputs type (celflow.Outputs.<id>).
	OutputsType = "celflow.Outputs"
)

// nodeOutputs is a NodeState seen as its node's outputs object: the same
// memory, a distinct Go type so the provider can tell the two apart.
type nodeOutputs NodeState

// field is one field of an object type: its CEL type and a getter over the
// Go value (always a pointer to one of the structs in values.go).
type field struct {
	name  string
	typ   *types.Type
	get   func(any) any
	isSet func(any) bool // nil: always set
}

type structDecl struct {
	typ    *types.Type
	names  []string
	fields map[string]*types.FieldType
}

func newDecl(name string, fs []field) *structDecl {
	d := &structDecl{typ: types.NewObjectType(name), fields: map[string]*types.FieldType{}}
	for _, f := range fs {
		get, isSet := f.get, f.isSet
		if isSet == nil {
			isSet = func(any) bool { return true }
		}
		d.names = append(d.names, f.name)
		d.fields[f.name] = &types.FieldType{
			Type:    f.typ,
			IsSet:   isSet,
			GetFrom: func(v any) (any, error) { return get(v), nil },
		}
	}
	return d
}

var (
	strStrMap   = types.NewMapType(types.StringType, types.StringType)
	emptyOutput = map[string]any{}
)

var baseDecls = map[string]*structDecl{
	RequestType: newDecl(RequestType, []field{
		{name: "id", typ: types.StringType, get: func(v any) any { r := v.(*Request); return r.str(0, r.ID) }},
		{name: "format", typ: types.StringType, get: func(v any) any { r := v.(*Request); return r.str(1, r.Format) }},
		{name: "path", typ: types.StringType, get: func(v any) any { r := v.(*Request); return r.str(2, r.Path) }},
		{name: "model", typ: types.StringType, get: func(v any) any { r := v.(*Request); return r.str(3, r.Model) }},
		{name: "stream", typ: types.BoolType, get: func(v any) any { return v.(*Request).Stream }},
		{name: "headers", typ: strStrMap, get: func(v any) any { return v.(*Request).Headers() }},
	}),
	MediaType: newDecl(MediaType, []field{
		{name: "index", typ: types.IntType, get: func(v any) any { return intVal(v.(*Media).Index) }},
		{name: "modality", typ: types.StringType, get: func(v any) any { return v.(*Media).Modality }},
		{name: "type", typ: types.StringType, get: func(v any) any { return v.(*Media).Type }},
		{name: "size", typ: types.IntType, get: func(v any) any { return v.(*Media).Size }},
		{name: "remote", typ: types.BoolType, get: func(v any) any { return v.(*Media).Remote }},
		{name: "hash", typ: types.StringType, get: func(v any) any { return v.(*Media).Hash }},
	}),
	TokensType: newDecl(TokensType, []field{
		{name: "known", typ: types.BoolType, get: func(v any) any { return v.(*Tokens).Known }},
		{name: "count", typ: types.IntType, get: func(v any) any { return intVal(v.(*Tokens).Count) }},
	}),
	ResponseType: newDecl(ResponseType, []field{
		{name: "status", typ: types.IntType, get: func(v any) any { return intVal(v.(*Response).Status) }},
		{name: "headers", typ: strStrMap, get: func(v any) any { return v.(*Response).Headers() }},
	}),
	// outcome's type: the predecessor's outputs are untyped there.
	NodeStateType: newDecl(NodeStateType, nodeStateFields(types.NewMapType(types.StringType, types.DynType), func(v any) any {
		if o := v.(*NodeState).Outputs; o != nil {
			return o
		}
		return emptyOutput
	})),
}

// nodeStateFields are NodeState's fields with outputs of the given type.
func nodeStateFields(outputs *types.Type, getOutputs func(any) any) []field {
	return []field{
		{name: "status", typ: types.StringType, get: func(v any) any { return strVal(v.(*NodeState).Status) }},
		{name: "reason", typ: types.StringType, get: func(v any) any { return v.(*NodeState).Reason }},
		{name: "response", typ: types.NewObjectType(ResponseType), get: func(v any) any { return &v.(*NodeState).Response }},
		{name: "duration", typ: types.DurationType, get: func(v any) any { return v.(*NodeState).Duration }},
		{name: "attempt", typ: types.IntType, get: func(v any) any { return intVal(v.(*NodeState).Attempt) }},
		{name: "outputs", typ: outputs, get: getOutputs},
	}
}

// provider serves celflow's object types on top of cel-go's registry. One
// base provider serves every workflow's static types; each workflow adds
// its own Nodes and Config types (their fields are node ids and var names).
type provider struct {
	*types.Registry
	decls map[string]*structDecl
}

func newProvider(extra map[string]*structDecl) (*provider, error) {
	reg, err := types.NewRegistry()
	if err != nil {
		return nil, err
	}
	p := &provider{Registry: reg, decls: map[string]*structDecl{}}
	for k, v := range baseDecls {
		p.decls[k] = v
	}
	for k, v := range extra {
		p.decls[k] = v
	}
	return p, nil
}

func (p *provider) FindStructType(name string) (*types.Type, bool) {
	if d, ok := p.decls[name]; ok {
		return types.NewTypeTypeWithParam(d.typ), true
	}
	return p.Registry.FindStructType(name)
}

func (p *provider) FindStructFieldNames(name string) ([]string, bool) {
	if d, ok := p.decls[name]; ok {
		return d.names, true
	}
	return p.Registry.FindStructFieldNames(name)
}

func (p *provider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if d, ok := p.decls[name]; ok {
		f, ok := d.fields[field]
		return f, ok
	}
	return p.Registry.FindStructFieldType(name, field)
}

func (p *provider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if _, ok := p.decls[name]; ok {
		return types.NewErr("celflow: %s values cannot be constructed in expressions", name)
	}
	return p.Registry.NewValue(name, fields)
}

// NativeToValue wraps celflow's Go values as CEL objects; everything else
// goes to cel-go's registry.
func (p *provider) NativeToValue(v any) ref.Val {
	var name string
	switch v.(type) {
	case *Request:
		name = RequestType
	case *Media:
		name = MediaType
	case *Tokens:
		name = TokensType
	case *Response:
		name = ResponseType
	case *NodeState:
		name = NodeStateType
	case *Nodes:
		name = NodesType
	case *Config:
		name = ConfigType
	case *nodeOutputs:
		// A whole outputs object (`"x" in nodes.a.outputs`) is its map.
		if o := v.(*nodeOutputs).Outputs; o != nil {
			return p.Registry.NativeToValue(o)
		}
		return p.Registry.NativeToValue(emptyOutput)
	default:
		return p.Registry.NativeToValue(v)
	}
	d, ok := p.decls[name]
	if !ok {
		return types.NewErr("celflow: no type %s in this environment", name)
	}
	return &object{p: p, d: d, v: v}
}

// object is a celflow Go value seen as a CEL object (when an expression
// uses a whole object, e.g. `outcome` as a function argument or a list
// element of `media`). Field reads on declared types normally bypass it.
type object struct {
	p *provider
	d *structDecl
	v any
}

var _ traits.Indexer = (*object)(nil)
var _ traits.FieldTester = (*object)(nil)

func (o *object) ConvertToNative(t reflect.Type) (any, error) {
	if reflect.TypeOf(o.v).AssignableTo(t) {
		return o.v, nil
	}
	return nil, fmt.Errorf("celflow: cannot convert %s to %v", o.d.typ.TypeName(), t)
}

func (o *object) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return o.d.typ
	}
	if t.TypeName() == o.d.typ.TypeName() {
		return o
	}
	return types.NewErr("celflow: cannot convert %s to %s", o.d.typ.TypeName(), t.TypeName())
}

func (o *object) Equal(other ref.Val) ref.Val {
	x, ok := other.(*object)
	return types.Bool(ok && x.d == o.d && x.v == o.v)
}

func (o *object) Type() ref.Type { return o.d.typ }
func (o *object) Value() any     { return o.v }

func (o *object) Get(index ref.Val) ref.Val {
	name, ok := index.(types.String)
	if !ok {
		return types.ValOrErr(index, "no such overload")
	}
	f, ok := o.d.fields[string(name)]
	if !ok {
		return types.NewErr("no such field '%s'", name)
	}
	v, _ := f.GetFrom(o.v)
	return o.p.NativeToValue(v)
}

func (o *object) IsSet(field ref.Val) ref.Val {
	name, ok := field.(types.String)
	if !ok {
		return types.ValOrErr(field, "no such overload")
	}
	_, ok = o.d.fields[string(name)]
	return types.Bool(ok)
}
