// Package jsonb edits JSON bodies by splicing bytes: the client's body is
// indexed once and every leg is built from references into it plus small new
// pieces, never by decoding to generic maps and re-encoding (docs/protocol.md, Body).
// Unknown fields, key order and number spelling survive unless a field is
// deliberately edited; a replaced value keeps its key's position, an added
// key goes at the end of its object, a removed key leaves with its separator.
//
// jsonb is celflow's one JSON layer: scanning (Parse, ObjectAt, Valid),
// lookup (Object.Get, and the walk functions over validated bytes:
// EachMember, EachElement, Lookup, TopLevel) and editing (Editor) all read
// a member name the same way, as encoding/json decodes it. Parse and
// ObjectAt refuse a name repeated in any object of the document
// (*DuplicateKeyError), so an Object never has two members that one name
// could mean, and no reader downstream (the editor, mm, a Python worker
// where the last one wins) can pick a different one.
package jsonb

import "io"

// Object is an index of one JSON object's members inside a larger buffer.
// Offsets are absolute in Buf.
type Object struct {
	Buf        []byte
	Start, End int // the object's '{' and one past its '}'
	Members    []Member
	// names is a one-word Bloom filter over every member name in the
	// object and everything nested in it (Parse and ObjectAt fill it in
	// their single scan): MayHaveKey answers "surely absent" without
	// another pass over the bytes.
	names uint64
}

// MayHaveKey reports whether some object at any depth of o (o included)
// may have a member named name, compared after unescaping. False is
// certain: no such member exists. True may be a false positive (one bit of
// 64 per name), so a caller then looks for real.
func (o *Object) MayHaveKey(name string) bool {
	b := keyBit(name)
	return o.names&b == b
}

// Member is one key/value pair of an Object.
type Member struct {
	Key              string // unescaped
	KeyStart         int    // offset of the key's opening quote
	ValStart, ValEnd int    // the raw value
}

// Parse validates buf as JSON and indexes its top-level object. It fails
// when buf is not valid JSON (*SyntaxError, which wins when both apply),
// repeats a member name in any object (*DuplicateKeyError), or is not an
// object (ErrNotObject).
func Parse(buf []byte) (*Object, error) { return parse(buf) }

// ObjectAt indexes the object whose '{' is at start (buf already valid
// JSON); a repeated name inside it is a *DuplicateKeyError.
func ObjectAt(buf []byte, start int) (*Object, error) { return objectAt(buf, start) }

// Get returns a member's raw value.
func (o *Object) Get(key string) ([]byte, bool) { return o.get(key) }

// Find returns the index of a member, or -1.
func (o *Object) Find(key string) int { return o.find(key) }

// Elements returns the [start,end) ranges of the elements of the array whose
// '[' is at start.
func Elements(buf []byte, start int) ([][2]int, error) { return elements(buf, start) }

// Editor collects edits against one buffer and builds the new body.
// Edits may not overlap; nested edits go through ObjectEditor.
type Editor struct {
	buf   []byte
	edits []edit
	objs  []*ObjectEditor // object editors to flush into edits at Body()
}

type edit struct {
	start, end int
	repl       []byte
}

// NewEditor starts an edit of buf.
func NewEditor(buf []byte) *Editor { return &Editor{buf: buf} }

// Splice replaces buf[start:end] with repl (start == end inserts).
func (e *Editor) Splice(start, end int, repl []byte) { e.splice(start, end, repl) }

// In returns an editor of one object of the buffer (the top level or a nested one).
func (e *Editor) In(o *Object) *ObjectEditor {
	oe := &ObjectEditor{e: e, o: o}
	oe.st()
	return oe
}

// Body builds the result: segments referencing buf and the replacements.
func (e *Editor) Body() *Body { return e.body() }

// ObjectEditor edits the members of one object.
// An ObjectEditor over a key that was absent or null builds a fresh object.
type ObjectEditor struct {
	e     *Editor
	o     *Object // nil for a created object
	state *objState
}

// Set replaces key's value in place, or appends the member at the end.
func (oe *ObjectEditor) Set(key string, raw []byte) { oe.set(key, raw) }

// SetIfPresent replaces key's value only when the key exists.
func (oe *ObjectEditor) SetIfPresent(key string, raw []byte) { oe.setIfPresent(key, raw) }

// Delete removes the member and its separator when present.
func (oe *ObjectEditor) Delete(key string) { oe.del(key) }

// Object edits the nested object at key. When key is absent or null it is
// created (set to an object built from the edits made through the returned
// editor); when it holds a non-object, ok is false.
func (oe *ObjectEditor) Object(key string) (child *ObjectEditor, ok bool) { return oe.object(key) }

// Body is a built JSON body: a list of segments.
type Body struct {
	segs [][]byte
	n    int
}

// Len is the body's length in bytes.
func (b *Body) Len() int { return b.n }

// Reader returns a fresh reader over the segments (no copy).
func (b *Body) Reader() io.Reader { return b.reader() }

// Bytes materialises the body into one new slice (tests, logs).
func (b *Body) Bytes() []byte { return b.bytes() }

// WriteTo writes the segments to w.
func (b *Body) WriteTo(w io.Writer) (int64, error) { return b.writeTo(w) }
