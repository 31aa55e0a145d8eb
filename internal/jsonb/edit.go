package jsonb

import (
	"io"
	"sort"
	"unicode/utf8"
)

func (e *Editor) splice(start, end int, repl []byte) {
	e.edits = append(e.edits, edit{start: start, end: end, repl: repl})
}

// member op kinds
const (
	opNone = iota
	opSet
	opDelete
)

// memberOp is what happens to one existing member. child is the editor
// Object returned for it: over the existing object, or (created) a fresh
// object that replaces a null.
type memberOp struct {
	kind    int
	raw     []byte
	child   *ObjectEditor
	created bool
}

type addedMember struct {
	key   string
	raw   []byte
	child *ObjectEditor // a created nested object, rendered at flush
}

// objState is an ObjectEditor's pending work. Existing members are known
// by index and added ones by name; no name is ever used as a marker (a
// client's key may be any string, NUL bytes included).
type objState struct {
	ops     []memberOp // per existing member
	added   []addedMember
	flushed bool
}

func (oe *ObjectEditor) st() *objState {
	if oe.state == nil {
		oe.state = &objState{}
		if oe.o != nil {
			oe.state.ops = make([]memberOp, len(oe.o.Members))
		}
		if oe.e != nil {
			oe.e.objs = append(oe.e.objs, oe)
		}
	}
	return oe.state
}

func (oe *ObjectEditor) set(key string, raw []byte) {
	s := oe.st()
	key = normName(key)
	if oe.o != nil {
		if i := oe.o.find(key); i >= 0 {
			s.ops[i] = memberOp{kind: opSet, raw: raw}
			return
		}
	}
	for i := range s.added {
		if s.added[i].key == key {
			s.added[i] = addedMember{key: key, raw: raw}
			return
		}
	}
	s.added = append(s.added, addedMember{key: key, raw: raw})
}

func (oe *ObjectEditor) setIfPresent(key string, raw []byte) {
	if oe.o != nil && oe.o.find(key) >= 0 {
		oe.set(key, raw)
	}
}

func (oe *ObjectEditor) del(key string) {
	s := oe.st()
	key = normName(key)
	if oe.o != nil {
		if i := oe.o.find(key); i >= 0 {
			s.ops[i] = memberOp{kind: opDelete}
		}
	}
	for i := range s.added {
		if s.added[i].key == key {
			s.added = append(s.added[:i], s.added[i+1:]...)
			break
		}
	}
}

func (oe *ObjectEditor) object(key string) (*ObjectEditor, bool) {
	s := oe.st()
	key = normName(key)
	if oe.o != nil {
		if i := oe.o.find(key); i >= 0 {
			op := &s.ops[i]
			if op.child != nil && (op.kind == opNone || op.created) {
				return op.child, true // the same editor for the same member
			}
			m := oe.o.Members[i]
			switch oe.o.Buf[m.ValStart] {
			case '{':
				sub, err := objectAt(oe.o.Buf, m.ValStart)
				if err != nil {
					return nil, false
				}
				child := &ObjectEditor{e: oe.e, o: sub}
				*op = memberOp{child: child}
				return child, true
			case 'n': // null: replaced by a created object
				child := &ObjectEditor{}
				*op = memberOp{kind: opSet, child: child, created: true}
				return child, true
			default:
				return nil, false
			}
		}
	}
	for i := range s.added {
		if s.added[i].key == key && s.added[i].child != nil {
			return s.added[i].child, true
		}
	}
	child := &ObjectEditor{}
	oe.set(key, nil)
	for i := range s.added {
		if s.added[i].key == key {
			s.added[i].child = child
		}
	}
	return child, true
}

// render builds a created (not pre-existing) object from its additions.
func (oe *ObjectEditor) render() []byte {
	out := []byte{'{'}
	if oe.state != nil {
		for i, a := range oe.state.added {
			if i > 0 {
				out = append(out, ',')
			}
			out = AppendQuote(out, a.key)
			out = append(out, ':')
			if a.child != nil {
				out = append(out, a.child.render()...)
			} else {
				out = append(out, a.raw...)
			}
		}
	}
	return append(out, '}')
}

// flush turns an editor over an existing object into splices.
func (oe *ObjectEditor) flush() {
	s := oe.state
	if s == nil || s.flushed || oe.o == nil {
		return
	}
	s.flushed = true
	e, o := oe.e, oe.o
	n := len(o.Members)
	lastKept := -1
	for i := 0; i < n; i++ {
		op := &s.ops[i]
		switch op.kind {
		case opSet:
			raw := op.raw
			if op.created {
				raw = op.child.render()
			}
			m := o.Members[i]
			e.splice(m.ValStart, m.ValEnd, raw)
			lastKept = i
		case opNone:
			if op.child != nil {
				op.child.flush()
			}
			lastKept = i
		}
	}
	// Deletions: each maximal run of deleted members goes with its separator.
	for i := 0; i < n; {
		if s.ops[i].kind != opDelete {
			i++
			continue
		}
		j := i
		for j < n && s.ops[j].kind == opDelete {
			j++
		}
		switch {
		case j < n: // a kept member follows: drop up to its key
			e.splice(o.Members[i].KeyStart, o.Members[j].KeyStart, nil)
		case i > 0: // run at the end: drop from the previous value's end
			e.splice(o.Members[i-1].ValEnd, o.Members[j-1].ValEnd, nil)
		default: // everything deleted
			e.splice(o.Members[0].KeyStart, o.Members[n-1].ValEnd, nil)
		}
		i = j
	}
	if len(s.added) == 0 {
		return
	}
	var ins []byte
	var at int
	if lastKept >= 0 {
		at = o.Members[lastKept].ValEnd
	} else {
		at = o.Start + 1
	}
	for i, a := range s.added {
		if i > 0 || lastKept >= 0 {
			ins = append(ins, ',')
		}
		ins = AppendQuote(ins, a.key)
		ins = append(ins, ':')
		if a.child != nil {
			ins = append(ins, a.child.render()...)
		} else {
			ins = append(ins, a.raw...)
		}
	}
	e.splice(at, at, ins)
}

func (e *Editor) body() *Body {
	for _, oe := range e.objs {
		oe.flush()
	}
	ed := e.edits
	sort.SliceStable(ed, func(i, j int) bool {
		if ed[i].start != ed[j].start {
			return ed[i].start < ed[j].start
		}
		return ed[i].end < ed[j].end
	})
	b := &Body{segs: make([][]byte, 0, 2*len(ed)+1)}
	pos := 0
	for _, x := range ed {
		if x.start < pos { // overlapping edit: a caller bug; keep the first
			continue
		}
		if x.start > pos {
			b.add(e.buf[pos:x.start])
		}
		if len(x.repl) > 0 {
			b.add(x.repl)
		}
		pos = x.end
	}
	if pos < len(e.buf) {
		b.add(e.buf[pos:])
	}
	return b
}

func (b *Body) add(p []byte) {
	b.segs = append(b.segs, p)
	b.n += len(p)
}

// bodyReader reads the segments in order without copying them.
type bodyReader struct {
	segs [][]byte
}

func (r *bodyReader) Read(p []byte) (int, error) {
	n := 0
	for len(r.segs) > 0 && n < len(p) {
		c := copy(p[n:], r.segs[0])
		n += c
		if c == len(r.segs[0]) {
			r.segs = r.segs[1:]
		} else {
			r.segs[0] = r.segs[0][c:]
		}
	}
	if n == 0 && len(r.segs) == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *bodyReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for len(r.segs) > 0 {
		n, err := w.Write(r.segs[0])
		total += int64(n)
		if err != nil {
			return total, err
		}
		r.segs = r.segs[1:]
	}
	return total, nil
}

func (b *Body) reader() io.Reader {
	segs := make([][]byte, len(b.segs))
	copy(segs, b.segs)
	return &bodyReader{segs: segs}
}

func (b *Body) bytes() []byte {
	out := make([]byte, 0, b.n)
	for _, s := range b.segs {
		out = append(out, s...)
	}
	return out
}

func (b *Body) writeTo(w io.Writer) (int64, error) {
	return (&bodyReader{segs: b.segs}).WriteTo(w)
}

// Raw wraps bytes as a Body (one segment).
func Raw(p []byte) *Body { return &Body{segs: [][]byte{p}, n: len(p)} }

// AppendQuote appends s as a JSON string.
func AppendQuote(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Quote returns s as a JSON string.
func Quote(s string) []byte { return AppendQuote(nil, s) }
