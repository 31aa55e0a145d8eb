package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxDepth bounds nesting: a KVEventBatch nests four deep (batch, events,
// event, extra_keys entry, tuple); anything far deeper is not one.
const maxDepth = 16

// wellFormed checks that b is exactly one msgpack value whose every length
// fits in the bytes that follow it, nested at most maxDepth deep. Decode
// runs it first, so the msgpack library (which allocates what a header
// claims) only ever sees sizes the payload itself bounds.
func wellFormed(b []byte) error {
	i := 0
	need := func(n int) error {
		if n < 0 || n > len(b)-i {
			return fmt.Errorf("msgpack value at byte %d claims %d bytes, %d left", i, n, len(b)-i)
		}
		return nil
	}
	u := func(size int) (int, error) {
		if err := need(size); err != nil {
			return 0, err
		}
		var v uint64
		switch size {
		case 1:
			v = uint64(b[i])
		case 2:
			v = uint64(binary.BigEndian.Uint16(b[i:]))
		case 4:
			v = uint64(binary.BigEndian.Uint32(b[i:]))
		}
		i += size
		if v > uint64(len(b)) {
			return 0, fmt.Errorf("msgpack length %d beyond the payload's %d bytes", v, len(b))
		}
		return int(v), nil
	}
	// stack holds how many values each open container still expects.
	stack := []int{1}
	for len(stack) > 0 {
		if stack[len(stack)-1] == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		stack[len(stack)-1]--
		if i >= len(b) {
			return errors.New("msgpack payload ends inside a value")
		}
		c := b[i]
		i++
		var skip, items int
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0: // fixint
		case c >= 0x80 && c <= 0x8f:
			items = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			items = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = int(c & 0x1f)
		case c == 0xc0, c == 0xc2, c == 0xc3: // nil, false, true
		case c == 0xc4 || c == 0xd9: // bin8, str8
			skip, err = u(1)
		case c == 0xc5 || c == 0xda:
			skip, err = u(2)
		case c == 0xc6 || c == 0xdb:
			skip, err = u(4)
		case c == 0xc7: // ext8: len, type
			skip, err = u(1)
			skip++
		case c == 0xc8:
			skip, err = u(2)
			skip++
		case c == 0xc9:
			skip, err = u(4)
			skip++
		case c == 0xca:
			skip = 4
		case c == 0xcb:
			skip = 8
		case c == 0xcc || c == 0xd0:
			skip = 1
		case c == 0xcd || c == 0xd1:
			skip = 2
		case c == 0xce || c == 0xd2:
			skip = 4
		case c == 0xcf || c == 0xd3:
			skip = 8
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16 (+ type byte)
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			items, err = u(2)
		case c == 0xdd:
			items, err = u(4)
		case c == 0xde:
			items, err = u(2)
			items *= 2
		case c == 0xdf:
			items, err = u(4)
			items *= 2
		default: // 0xc1 is never used
			return fmt.Errorf("msgpack code 0x%02x at byte %d", c, i-1)
		}
		if err != nil {
			return err
		}
		if err := need(skip); err != nil {
			return err
		}
		i += skip
		if items > 0 {
			if items > len(b)-i {
				return fmt.Errorf("msgpack container of %d values in %d bytes", items, len(b)-i)
			}
			if len(stack) >= maxDepth {
				return fmt.Errorf("msgpack nested deeper than %d", maxDepth)
			}
			stack = append(stack, items)
		}
	}
	if i != len(b) {
		return fmt.Errorf("%d bytes after the msgpack value", len(b)-i)
	}
	return nil
}
