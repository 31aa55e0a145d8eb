package jsonb

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math"
	"strconv"
	"unicode/utf8"
)

// Duplicate member names (RFC 8259 leaves them undefined, I-JSON forbids
// them) are refused by Parse and ObjectAt in the same pass that validates:
// celflow's editor, its lookups and the Python workers that read a leg
// after it (last one wins) would otherwise each pick their own member.
//
// Names are compared as encoding/json decodes them ("a" and "\u0061" are
// the same name; an invalid UTF-8 byte equals U+FFFD). The common case, an
// object of a few dozen escape-free keys, costs a length comparison per
// earlier key of the same object and no allocation: the keys of the
// objects being scanned sit on a fixed stack inside the scanner. An object
// with more than linearMax keys (or one nested deeper than the stack
// holds) moves its keys to a hashed set, so a hostile object of 100k keys
// stays linear.

// linearMax is the number of keys an object keeps on the stack before it
// switches to a hashed set: up to a few dozen short keys, comparing
// lengths beats hashing every key (BenchmarkObjectKeys).
const linearMax = 32

// stackKeys is the stack's capacity: two levels of full objects at once,
// more than real request bodies nest names. Past it, objects use a hashed
// set: correct, just not allocation-free. The stack is zeroed with every
// scanner, so it stays small (16 bytes a key).
const stackKeys = 64

// DuplicateKeyError reports a member name that occurs twice in one object.
type DuplicateKeyError struct {
	// Offset is the byte offset of the second occurrence's opening quote.
	Offset int
	// Path is the JSON path of the second occurrence, relative to the
	// object Parse or ObjectAt was given: members joined by '.', array
	// elements as [i], and a name that is not [A-Za-z0-9_-]+ written as a
	// JSON string in brackets (["a.b"]); names over 64 bytes are cut with
	// "…". Examples: sampling_params.max_tokens, messages[1].content,
	// ["x y"].
	Path string
}

func (e *DuplicateKeyError) Error() string {
	return "duplicate member name " + e.Path + " at offset " + strconv.Itoa(e.Offset)
}

// keyRef is one key on the stack: its quotes [start,end) and whether it
// is plain. Offsets are 32-bit; a buffer over 4 GiB never uses the stack.
type keyRef struct {
	start, end uint32
	tail       uint32 // the name's last four bytes: most names of one length differ there
	plain      bool
}

// tailOf packs the last four bytes of a quoted key's text (fewer when shorter).
func tailOf(q []byte) uint32 {
	in := q[1 : len(q)-1]
	if len(in) >= 4 {
		return binary.LittleEndian.Uint32(in[len(in)-4:])
	}
	var v uint32
	for _, c := range in {
		v = v<<8 | uint32(c)
	}
	return v
}

type keyStack struct {
	refs  [stackKeys]keyRef
	n     int
	limit int // usable slots: stackKeys, or 0 for a buffer too long for keyRef
}

func (st *keyStack) init(buf []byte) {
	if uint64(len(buf)) <= math.MaxUint32 {
		st.limit = stackKeys
	}
}

// wideRef is a key in a bigSet.
type wideRef struct {
	start, end int
	h          uint32
}

// memberSet is the names seen so far in one object: n keys on the stack
// from base, or a hashed set once the object outgrew the stack.
type memberSet struct {
	base, n int
	big     *bigSet
}

// bigSet indexes the keys of a large object in an open-addressing table
// of their hashes (linear probing, at most half full); equal hashes are
// confirmed by sameKey. It allocates only when it grows (doubling), never
// per key, and costs about as much per key as the scan of the key itself.
type bigSet struct {
	refs  []wideRef
	slots []int32 // 1 + index into refs, 0 = empty; len is a power of two
}

var keySeed = maphash.MakeSeed()

// keyHash hashes a key's decoded text: escape-free keys in place, others
// (rare) after decoding, so "a" and "\u0061" hash alike. 32 bits are
// plenty: equal hashes are only a hint, confirmed by sameKey, and the seed
// is chosen per process, so a client cannot aim at collisions.
func keyHash(q []byte, plain bool) uint32 {
	if plain {
		return uint32(maphash.Bytes(keySeed, q[1:len(q)-1]))
	}
	return uint32(maphash.String(keySeed, unquoteKey(q)))
}

// add records the key b[ks:ke] and reports whether the object already
// had it. On the stack, a plain key is compared with each earlier one by
// length and then bytes (different names almost always differ in length
// or in their last bytes); only a key that is not plain is decoded.
func (ms *memberSet) add(st *keyStack, b []byte, ks, ke int, plain bool) bool {
	if ms.big == nil {
		if ms.n < linearMax && st.n < st.limit {
			dup := false
			tail, n := tailOf(b[ks:ke]), uint32(ke-ks)
			for j := ms.base; j < st.n; j++ {
				r := &st.refs[j]
				if plain && r.plain {
					if r.end-r.start == n && r.tail == tail && string(b[r.start:r.end]) == string(b[ks:ke]) {
						dup = true
						break
					}
				} else if sameKey(b, int(r.start), int(r.end), ks, ke) {
					dup = true
					break
				}
			}
			st.refs[st.n] = keyRef{start: uint32(ks), end: uint32(ke), tail: tail, plain: plain}
			st.n++
			ms.n++
			return dup
		}
		bs := &bigSet{refs: make([]wideRef, 0, 2*linearMax), slots: make([]int32, 4*linearMax)}
		for j := ms.base; j < ms.base+ms.n; j++ {
			r := &st.refs[j]
			bs.insert(b, int(r.start), int(r.end), keyHash(b[r.start:r.end], r.plain)) // distinct: a repeat was already reported
		}
		ms.big = bs
		st.n = ms.base // the nested objects that follow reuse the slots
	}
	ms.n++
	return ms.big.insert(b, ks, ke, keyHash(b[ks:ke], plain))
}

// insert adds the key b[ks:ke] and reports whether an equal key was there already.
func (bs *bigSet) insert(b []byte, ks, ke int, h uint32) bool {
	if 2*(len(bs.refs)+1) > len(bs.slots) {
		bs.grow()
	}
	mask := uint32(len(bs.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := bs.slots[i]
		if sl == 0 {
			bs.refs = append(bs.refs, wideRef{start: ks, end: ke, h: h})
			bs.slots[i] = int32(len(bs.refs))
			return false
		}
		if r := &bs.refs[sl-1]; r.h == h && sameKey(b, r.start, r.end, ks, ke) {
			return true
		}
	}
}

func (bs *bigSet) grow() {
	bs.slots = make([]int32, 2*len(bs.slots))
	mask := uint32(len(bs.slots) - 1)
	for k := range bs.refs {
		i := bs.refs[k].h & mask
		for bs.slots[i] != 0 {
			i = (i + 1) & mask
		}
		bs.slots[i] = int32(k + 1)
	}
}

// sameKey compares the keys b[xs:xe] and b[ys:ye] (equal hashes) by their
// decoded text.
func sameKey(b []byte, xs, xe, ys, ye int) bool {
	if bytes.Equal(b[xs:xe], b[ys:ye]) {
		return true
	}
	return unquoteKey(b[xs:xe]) == unquoteKey(b[ys:ye])
}

// plainKey reports whether a quoted key reads as its own bytes: no escape
// and valid UTF-8.
func plainKey(q []byte) bool {
	high := false
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			high = true
		}
	}
	return !high || utf8.Valid(q)
}

// normName turns a Go key name into the form unquoteKey gives: each byte
// that is not valid UTF-8 becomes U+FFFD (encoding/json's reading, and what
// AppendQuote writes), so a lookup and an insertion of the same name agree.
func normName(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	out := make([]byte, 0, len(name)+8)
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, name[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

// duplicateAt builds the error for the duplicate key whose quote is at off,
// walking from the object at root (the document is valid by now).
func duplicateAt(b []byte, root, off int) *DuplicateKeyError {
	var path []byte
	i := root
	for range maxDepth + 1 {
		next, done := -1, false
		switch b[i] {
		case '{':
			_ = EachMember(b, i, func(f Field) bool {
				switch {
				case f.KeyStart == off:
					path, done = appendSegment(path, f.RawKey), true
				case off > f.ValStart && off < f.ValEnd:
					path, next = appendSegment(path, f.RawKey), f.ValStart
				default:
					return true
				}
				return false
			})
		case '[':
			k := 0
			_ = EachElement(b, i, func(vs, ve int) bool {
				if off > vs && off < ve {
					path = append(path, '[')
					path = strconv.AppendInt(path, int64(k), 10)
					path = append(path, ']')
					next = vs
					return false
				}
				k++
				return true
			})
		}
		if done || next < 0 {
			break
		}
		i = next
	}
	return &DuplicateKeyError{Offset: off, Path: string(path)}
}

// maxSegment bounds one name in a path: the path is shown to the client.
const maxSegment = 64

func appendSegment(path, rawKey []byte) []byte {
	name := unquoteKey(rawKey)
	if isIdent(name) {
		if len(path) > 0 {
			path = append(path, '.')
		}
		return append(path, name...)
	}
	if len(name) > maxSegment {
		n := maxSegment
		for n > 0 && !utf8.RuneStart(name[n]) {
			n--
		}
		name = name[:n] + "…"
	}
	path = append(path, '[')
	path = AppendQuote(path, name)
	return append(path, ']')
}

func isIdent(s string) bool {
	if s == "" || len(s) > maxSegment {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
