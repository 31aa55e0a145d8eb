package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is an event's type, as its msgspec tag names it.
type Kind uint8

const (
	BlockStored Kind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Hash is an engine block hash. vLLM sends an int (older releases: Python's
// hash, signed or unsigned 64-bit) or bytes (sha256 and its cbor variant);
// bytes are folded to 64 bits with FNV-1a. Only equality matters: the
// engine's hashes are used to apply BlockRemoved, never as index keys.
type Hash uint64

// Event is one KV cache event. Fields a kind does not carry are zero.
type Event struct {
	Kind        Kind
	BlockHashes []Hash
	Parent      Hash    // BlockStored: the block before the first one; valid when HasParent
	HasParent   bool    // parent_block_hash was not nil
	TokenIDs    []int64 // BlockStored: the tokens of every block, in order
	BlockSize   int     // BlockStored: tokens per block
	LoRAID      int64   // BlockStored: lora_id; 0 when nil
	LoRAName    string  // BlockStored: lora_name; "" when nil or absent
	Medium      string  // "" when nil (vLLM's GPU)
	// Group is group_idx (HasGroup: present and not nil): the KV cache
	// group of a hybrid model (full attention, sliding window...); SpecKind is
	// BlockStored's kv_cache_spec_kind ("full_attention", ...), "" when absent.
	Group    int64
	HasGroup bool
	SpecKind string
	// ExtraKeys holds, per block, the strings of that block's extra_keys
	// entry (multimodal item identifiers, the LoRA name, a cache salt), nil
	// for a block without one; nil when the event has no extra_keys.
	ExtraKeys [][]string
}

// Batch is one KVEventBatch.
type Batch struct {
	TS     float64 // the publisher's time.time() when the batch was made
	Events []Event
	DPRank int  // data_parallel_rank; 0 when absent
	HasDP  bool // data_parallel_rank was present and not nil
}

// Message is one multipart message of a publisher: [topic, seq, payload].
type Message struct {
	Topic   string
	Seq     int64
	Payload []byte
}

// ParseMessage splits a publisher's multipart message.
func ParseMessage(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("kv event message has %d frames, want 3 (topic, seq, payload)", len(frames))
	}
	if len(frames[1]) != 8 {
		return Message{}, fmt.Errorf("kv event seq frame has %d bytes, want 8", len(frames[1]))
	}
	return Message{Topic: string(frames[0]), Seq: int64(binary.BigEndian.Uint64(frames[1])), Payload: frames[2]}, nil
}

// Decode reads a KVEventBatch payload in either msgspec encoding (array_like
// or named fields). It never panics and allocates no more than the payload's
// length allows: the decoder faces whatever reaches the socket.
func Decode(payload []byte) (*Batch, error) {
	if err := wellFormed(payload); err != nil {
		return nil, fmt.Errorf("kv event batch: %w", err)
	}
	r := bytes.NewReader(payload)
	d := &dec{r: r, d: msgpack.NewDecoder(r)}
	b, err := d.batch()
	if err != nil {
		return nil, fmt.Errorf("kv event batch: %w", err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("kv event batch: %d bytes after the batch", r.Len())
	}
	return b, nil
}

type dec struct {
	r *bytes.Reader
	d *msgpack.Decoder
}

var errShape = errors.New("unexpected msgpack type")

func (d *dec) peek() (byte, error) { return d.d.PeekCode() }

func isNil(c byte) bool { return c == msgpcode.Nil }

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// arrayLen reads an array header and refuses a length the rest of the
// input cannot hold (each element takes at least one byte).
func (d *dec) arrayLen() (int, error) {
	n, err := d.d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 0 || n > d.r.Len() {
		return 0, fmt.Errorf("array of %d elements in %d bytes", n, d.r.Len())
	}
	return n, nil
}

func (d *dec) mapLen() (int, error) {
	n, err := d.d.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if n < 0 || 2*n > d.r.Len() {
		return 0, fmt.Errorf("map of %d entries in %d bytes", n, d.r.Len())
	}
	return n, nil
}

func (d *dec) batch() (*Batch, error) {
	c, err := d.peek()
	if err != nil {
		return nil, err
	}
	b := &Batch{}
	switch {
	case isArray(c): // [ts, events, data_parallel_rank?]
		n, err := d.arrayLen()
		if err != nil {
			return nil, err
		}
		if n < 2 || n > 3 {
			return nil, fmt.Errorf("array batch of %d fields, want 2 or 3", n)
		}
		if b.TS, err = d.d.DecodeFloat64(); err != nil {
			return nil, fmt.Errorf("ts: %w", err)
		}
		if b.Events, err = d.events(); err != nil {
			return nil, err
		}
		if n == 3 {
			if err := d.dpRank(b); err != nil {
				return nil, err
			}
		}
	case isMap(c):
		n, err := d.mapLen()
		if err != nil {
			return nil, err
		}
		var haveTS, haveEvents bool
		for range n {
			k, err := d.d.DecodeString()
			if err != nil {
				return nil, fmt.Errorf("batch field name: %w", err)
			}
			switch k {
			case "ts":
				if b.TS, err = d.d.DecodeFloat64(); err != nil {
					return nil, fmt.Errorf("ts: %w", err)
				}
				haveTS = true
			case "events":
				if b.Events, err = d.events(); err != nil {
					return nil, err
				}
				haveEvents = true
			case "data_parallel_rank":
				if err := d.dpRank(b); err != nil {
					return nil, err
				}
			default: // a field of a later vLLM: skipped, as msgspec does
				if err := d.d.Skip(); err != nil {
					return nil, err
				}
			}
		}
		if !haveTS || !haveEvents {
			return nil, errors.New(`map batch without "ts" or "events"`)
		}
	default:
		return nil, fmt.Errorf("batch is neither an array nor a map: %w", errShape)
	}
	return b, nil
}

func (d *dec) dpRank(b *Batch) error {
	c, err := d.peek()
	if err != nil {
		return err
	}
	if isNil(c) {
		return d.d.DecodeNil()
	}
	v, err := d.d.DecodeInt64()
	if err != nil {
		return fmt.Errorf("data_parallel_rank: %w", err)
	}
	b.DPRank, b.HasDP = int(v), true
	return nil
}

func (d *dec) events() ([]Event, error) {
	n, err := d.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	evs := make([]Event, 0, n)
	for i := range n {
		e, err := d.event()
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

func kindOf(tag string) (Kind, error) {
	switch tag {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	}
	return 0, fmt.Errorf("unknown event tag %q", tag)
}

// Field orders of the array_like encoding (after the tag), as the structs
// declare them; trailing fields left at their defaults are omitted
// (omit_defaults), and a later vLLM may append fields, which are skipped.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

func (d *dec) event() (Event, error) {
	c, err := d.peek()
	if err != nil {
		return Event{}, err
	}
	var e Event
	switch {
	case isArray(c):
		n, err := d.arrayLen()
		if err != nil {
			return e, err
		}
		if n < 1 {
			return e, errors.New("event array without a tag")
		}
		tag, err := d.d.DecodeString()
		if err != nil {
			return e, fmt.Errorf("tag: %w", err)
		}
		if e.Kind, err = kindOf(tag); err != nil {
			return e, err
		}
		var names []string
		switch e.Kind {
		case BlockStored:
			names = storedFields
			if n-1 < 4 { // block_hashes, parent, token_ids, block_size have no default
				return e, fmt.Errorf("BlockStored array of %d fields, want at least 4", n-1)
			}
		case BlockRemoved:
			names = removedFields
			if n-1 < 1 {
				return e, errors.New("BlockRemoved array without block_hashes")
			}
		}
		for i := 1; i < n; i++ {
			name := ""
			if i-1 < len(names) {
				name = names[i-1]
			}
			if err := d.field(&e, name); err != nil {
				return e, err
			}
		}
	case isMap(c):
		n, err := d.mapLen()
		if err != nil {
			return e, err
		}
		// msgspec writes the tag first, but nothing requires it: fields are
		// kept until the kind is known.
		seen := map[string]bool{}
		for range n {
			k, err := d.d.DecodeString()
			if err != nil {
				return e, fmt.Errorf("event field name: %w", err)
			}
			if k == "type" {
				tag, err := d.d.DecodeString()
				if err != nil {
					return e, fmt.Errorf("tag: %w", err)
				}
				if e.Kind, err = kindOf(tag); err != nil {
					return e, err
				}
				continue
			}
			seen[k] = true
			if err := d.field(&e, k); err != nil {
				return e, err
			}
		}
		switch e.Kind {
		case 0:
			return e, errors.New(`map event without "type"`)
		case BlockStored:
			for _, f := range storedFields[:4] {
				if !seen[f] {
					return e, fmt.Errorf("BlockStored without %q", f)
				}
			}
		case BlockRemoved:
			if !seen["block_hashes"] {
				return e, errors.New(`BlockRemoved without "block_hashes"`)
			}
		}
	default:
		return e, fmt.Errorf("event is neither an array nor a map: %w", errShape)
	}
	if e.Kind == BlockStored {
		if e.BlockSize <= 0 {
			return e, fmt.Errorf("BlockStored block_size %d", e.BlockSize)
		}
		// Token ids may be left out (a vLLM that re-announces a group's
		// blocks sends none): such blocks cannot be named, and are skipped.
		if len(e.TokenIDs) != 0 && len(e.TokenIDs) != len(e.BlockHashes)*e.BlockSize {
			return e, fmt.Errorf("BlockStored has %d tokens for %d blocks of %d", len(e.TokenIDs), len(e.BlockHashes), e.BlockSize)
		}
		if e.ExtraKeys != nil && len(e.ExtraKeys) != len(e.BlockHashes) {
			return e, fmt.Errorf("BlockStored has %d extra_keys entries for %d blocks", len(e.ExtraKeys), len(e.BlockHashes))
		}
	}
	return e, nil
}

// field reads one named field into e; an unknown name is skipped.
func (d *dec) field(e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		e.BlockHashes, err = d.hashes()
	case "parent_block_hash":
		var c byte
		if c, err = d.peek(); err == nil {
			if isNil(c) {
				err = d.d.DecodeNil()
			} else {
				e.Parent, err = d.hash()
				e.HasParent = err == nil
			}
		}
	case "token_ids":
		e.TokenIDs, err = d.ints()
	case "block_size":
		var v int64
		v, err = d.d.DecodeInt64()
		if err == nil && (v <= 0 || v > 1<<20) {
			err = fmt.Errorf("block_size %d", v)
		}
		e.BlockSize = int(v)
	case "lora_id":
		e.LoRAID, err = d.optInt()
	case "medium":
		e.Medium, err = d.optString()
	case "lora_name":
		e.LoRAName, err = d.optString()
	case "extra_keys":
		e.ExtraKeys, err = d.extraKeys()
	case "group_idx":
		var c byte
		if c, err = d.peek(); err == nil {
			if isNil(c) {
				err = d.d.DecodeNil()
			} else {
				e.Group, err = d.d.DecodeInt64()
				e.HasGroup = err == nil
			}
		}
	case "kv_cache_spec_kind":
		e.SpecKind, err = d.optString()
	default:
		err = d.d.Skip()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (d *dec) hashes() ([]Hash, error) {
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	hs := make([]Hash, n)
	for i := range hs {
		if hs[i], err = d.hash(); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

func (d *dec) hash() (Hash, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Uint64:
		v, err := d.d.DecodeUint64()
		return Hash(v), err
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		b, err := d.d.DecodeBytes()
		if err != nil {
			return 0, err
		}
		h := fnv.New64a()
		h.Write(b)
		return Hash(h.Sum64()), nil
	default:
		v, err := d.d.DecodeInt64()
		return Hash(uint64(v)), err
	}
}

func (d *dec) ints() ([]int64, error) {
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range out {
		if out[i], err = d.d.DecodeInt64(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *dec) optInt() (int64, error) {
	c, err := d.peek()
	if err != nil {
		return 0, err
	}
	if isNil(c) {
		return 0, d.d.DecodeNil()
	}
	return d.d.DecodeInt64()
}

func (d *dec) optString() (string, error) {
	c, err := d.peek()
	if err != nil {
		return "", err
	}
	if isNil(c) {
		return "", d.d.DecodeNil()
	}
	return d.d.DecodeString()
}

// extraKeys reads extra_keys: nil, or one entry per block, each nil or a
// tuple whose string (or bytes) members are kept in order; other members
// (numbers, nested tuples) are skipped.
func (d *dec) extraKeys() ([][]string, error) {
	c, err := d.peek()
	if err != nil {
		return nil, err
	}
	if isNil(c) {
		return nil, d.d.DecodeNil()
	}
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([][]string, n)
	for i := range out {
		if c, err = d.peek(); err != nil {
			return nil, err
		}
		if isNil(c) {
			if err := d.d.DecodeNil(); err != nil {
				return nil, err
			}
			continue
		}
		m, err := d.arrayLen()
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, m)
		for range m {
			if c, err = d.peek(); err != nil {
				return nil, err
			}
			if msgpcode.IsString(c) || msgpcode.IsBin(c) {
				b, err := d.d.DecodeBytes()
				if err != nil {
					return nil, err
				}
				keys = append(keys, string(b))
				continue
			}
			if err := d.d.Skip(); err != nil {
				return nil, err
			}
		}
		out[i] = keys
	}
	return out, nil
}
