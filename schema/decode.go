package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Pos is where a decoded value sits: its JSON pointer in the document (for
// diagnostics through Doc.Diag) and its 1-based line and column.
type Pos struct {
	Ptr       string
	Line, Col int
}

// At returns the position itself; every wrapper embedding Pos has it.
func (p Pos) At() Pos { return p }

// Val is one decoded scalar (or raw JSON value) and where it came from. Set
// is false when the document does not have the field, or when the value has
// the wrong JSON type (the schema has already reported that); V is then the
// zero value.
type Val[T any] struct {
	V   T
	Set bool
	Pos
}

// Decoder is implemented by types that decode themselves from a Doc (unions
// such as a need, which is a string or an object).
type Decoder interface {
	DecodeDoc(d *Doc, ptr string)
}

// Decode fills dst (a pointer to a struct) from the value at ptr. Struct
// fields are named by their `json` tag, and must be Val[T], a struct, a
// pointer to a struct, a slice of those, or implement Decoder. It never
// fails: values of the wrong type are left unset, because the document has
// been validated against its JSON Schema first and that reported them. A
// struct field without a json tag is a programming error and panics, so a
// field cannot be added to a typed document without naming its key.
func Decode(d *Doc, ptr string, dst any) {
	decodeValue(d, ptr, reflect.ValueOf(dst).Elem())
}

var decoderType = reflect.TypeOf((*Decoder)(nil)).Elem()

func decodeValue(d *Doc, ptr string, v reflect.Value) {
	if v.CanAddr() && v.Addr().Type().Implements(decoderType) {
		v.Addr().Interface().(Decoder).DecodeDoc(d, ptr)
		return
	}
	raw, ok := d.Value(ptr)
	if !ok {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if _, isMap := raw.(map[string]any); !isMap {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		decodeValue(d, ptr, v.Elem())
	case reflect.Slice:
		list, isList := raw.([]any)
		if !isList {
			return
		}
		s := reflect.MakeSlice(v.Type(), len(list), len(list))
		for i := range list {
			decodeValue(d, Ptr(ptr, i), s.Index(i))
		}
		v.Set(s)
	case reflect.Struct:
		if _, isMap := raw.(map[string]any); !isMap {
			return
		}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous && f.Type == reflect.TypeOf(Pos{}) {
				v.Field(i).Set(reflect.ValueOf(d.posOf(ptr)))
				continue
			}
			name := JSONName(f)
			if name == "-" {
				continue
			}
			if name == "" {
				panic(fmt.Sprintf("schema.Decode: %s.%s has no json tag", t.Name(), f.Name))
			}
			decodeValue(d, Ptr(ptr, name), v.Field(i))
		}
	default:
		panic(fmt.Sprintf("schema.Decode: unsupported field type %s", v.Type()))
	}
}

// JSONName is the document key of a struct field ("" when it has none, "-"
// for a field that is not in the document).
func JSONName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	return name
}

func (d *Doc) posOf(ptr string) Pos {
	l, c := d.Pos(ptr)
	return Pos{Ptr: ptr, Line: l, Col: c}
}

// DecodeDoc implements Decoder: it converts the JSON value at ptr to T.
// Supported T: string, bool, int, int64, float64, time.Duration (a Go
// duration string), json.Number, any (the raw JSON value), map[string]any,
// []string and map[string]string.
func (v *Val[T]) DecodeDoc(d *Doc, ptr string) {
	v.Pos = d.posOf(ptr)
	raw, ok := d.Value(ptr)
	if !ok {
		return
	}
	v.Set = convert(raw, &v.V)
}

func convert(raw any, dst any) bool {
	switch p := dst.(type) {
	case *string:
		s, ok := raw.(string)
		*p = s
		return ok
	case *bool:
		b, ok := raw.(bool)
		*p = b
		return ok
	case *int:
		n, ok := raw.(json.Number)
		i, err := n.Int64()
		*p = int(i)
		return ok && err == nil
	case *int64:
		n, ok := raw.(json.Number)
		i, err := n.Int64()
		*p = i
		return ok && err == nil
	case *float64:
		n, ok := raw.(json.Number)
		f, err := n.Float64()
		*p = f
		return ok && err == nil
	case *json.Number:
		n, ok := raw.(json.Number)
		*p = n
		return ok
	case *time.Duration:
		s, ok := raw.(string)
		td, err := time.ParseDuration(s)
		*p = td
		return ok && err == nil
	case *any:
		*p = raw
		return true
	case *map[string]any:
		m, ok := raw.(map[string]any)
		*p = m
		return ok
	case *[]string:
		l, ok := raw.([]any)
		if !ok {
			return false
		}
		out := make([]string, 0, len(l))
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		*p = out
		return true
	case *map[string]string:
		m, ok := raw.(map[string]any)
		if !ok {
			return false
		}
		out := make(map[string]string, len(m))
		for k, e := range m {
			if s, ok := e.(string); ok {
				out[k] = s
			}
		}
		*p = out
		return true
	}
	panic(fmt.Sprintf("schema.Val: unsupported type %T", dst))
}

// Entry is one key of an ordered mapping, with the key's own position.
type Entry[T any] struct {
	Key    string
	KeyPos Pos
	V      T
}

// Map is a mapping decoded in source order (for `vars:`, `assume:`).
type Map[T any] []Entry[T]

// DecodeDoc implements Decoder.
func (m *Map[T]) DecodeDoc(d *Doc, ptr string) {
	if _, ok := d.Value(ptr); !ok {
		return
	}
	for _, k := range d.Keys(ptr) {
		cp := Ptr(ptr, k)
		l, c := d.KeyPos(cp)
		e := Entry[T]{Key: k, KeyPos: Pos{Ptr: cp, Line: l, Col: c}}
		decodeValue(d, cp, reflect.ValueOf(&e.V).Elem())
		*m = append(*m, e)
	}
}
