package kvevents

import (
	"encoding/hex"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// golden reads a testdata .hex file: hex bytes, '#' starts a comment.
func golden(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		b.WriteString(strings.Join(strings.Fields(line), ""))
	}
	out, err := hex.DecodeString(b.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

func bytesHash(hexs string) Hash {
	b, _ := hex.DecodeString(hexs)
	h := fnv.New64a()
	h.Write(b)
	return Hash(h.Sum64())
}

func TestDecodeGolden(t *testing.T) {
	h1 := bytesHash("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	h2 := bytesHash("ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100")
	p := bytesHash("0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20")
	neg10 := int64(-10)
	cases := []struct {
		file string
		want *Batch
	}{
		{"array_int_hashes.hex", &Batch{TS: 1700000000.5, HasDP: true, Events: []Event{
			{Kind: BlockStored, BlockHashes: []Hash{1, Hash(^uint64(0) - 255)}, TokenIDs: []int64{10, 11, 12, 1000}, BlockSize: 2, Medium: "GPU"},
			{Kind: BlockRemoved, BlockHashes: []Hash{Hash(uint64(neg10))}, Medium: "GPU"},
			{Kind: AllBlocksCleared},
		}}},
		{"map_bytes_hashes.hex", &Batch{TS: 1712345678.25, DPRank: 1, HasDP: true, Events: []Event{
			{Kind: BlockStored, BlockHashes: []Hash{h1, h2}, Parent: p, HasParent: true, TokenIDs: []int64{1, 2, 3, 4}, BlockSize: 2,
				LoRAID: 7, LoRAName: "sql-lora", ExtraKeys: [][]string{{"sql-lora", "img-hash-1"}, nil}, HasGroup: true},
			{Kind: BlockRemoved, BlockHashes: []Hash{h2}, Medium: "GPU"},
		}}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			got, err := Decode(golden(t, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	arr := golden(t, "array_int_hashes.hex")
	cases := []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "ends inside"},
		{"truncated", arr[:len(arr)-3], "claims"},
		{"trailing", append(append([]byte{}, arr...), 0x00), "after the msgpack value"},
		{"not a container", []byte{0x01}, "neither an array nor a map"},
		{"huge bin header", []byte{0x91, 0xc6, 0xff, 0xff, 0xff, 0xff}, "beyond the payload"},
		{"huge array header", []byte{0xdd, 0x7f, 0xff, 0xff, 0xff}, "beyond the payload"},
		{"deep", []byte(strings.Repeat("\x91", 40) + "\x00"), "nested deeper"},
		{"unknown tag", []byte("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x91\x91\xa3Foo"), `unknown event tag "Foo"`},
		// ["BlockStored", [1], nil, [1, 2, 3], 2]: three tokens for one block of two.
		{"tokens vs blocks", []byte("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x91\x95\xabBlockStored\x91\x01\xc0\x93\x01\x02\x03\x02"), "3 tokens for 1 blocks of 2"},
		{"block size 0", []byte("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x91\x95\xabBlockStored\x91\x01\xc0\x90\x00"), "block_size 0"},
		{"map without type", []byte("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x91\x81\xa6medium\xc0"), `without "type"`},
		{"map batch without events", []byte("\x81\xa2ts\xcb\x00\x00\x00\x00\x00\x00\x00\x00"), `without "ts" or "events"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.payload)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
}

// A BlockStored without token ids (a vLLM re-announcing a group's blocks)
// is read, not refused: refusing it would mark the worker gapped.
func TestDecodeStoredWithoutTokens(t *testing.T) {
	// ["BlockStored", [1, 2], nil, [], 16, nil, "GPU", nil, nil, 1, "sliding_window"]
	b, err := Decode([]byte("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x91\x9b\xabBlockStored\x92\x01\x02\xc0\x90\x10\xc0\xa3GPU\xc0\xc0\x01\xaesliding_window"))
	if err != nil {
		t.Fatal(err)
	}
	e := b.Events[0]
	if len(e.TokenIDs) != 0 || len(e.BlockHashes) != 2 || !e.HasGroup || e.Group != 1 || e.SpecKind != "sliding_window" {
		t.Fatalf("%+v", e)
	}
}

func TestParseMessage(t *testing.T) {
	m, err := ParseMessage([][]byte{[]byte("kv@10.0.0.1:8000@m"), {0, 0, 0, 0, 0, 0, 1, 2}, {0x90}})
	if err != nil || m.Topic != "kv@10.0.0.1:8000@m" || m.Seq != 258 || len(m.Payload) != 1 {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := ParseMessage([][]byte{{}, {1}, {}}); err == nil {
		t.Fatal("a 1-byte seq was accepted")
	}
	if _, err := ParseMessage([][]byte{{}, {}}); err == nil {
		t.Fatal("two frames were accepted")
	}
}

// FuzzDecode holds the decoder to: no panic, no allocation beyond what the
// payload bounds (wellFormed runs first), and an accepted batch is
// self-consistent (every BlockStored has block_size tokens per block).
func FuzzDecode(f *testing.F) {
	f.Add(golden(f, "array_int_hashes.hex"))
	f.Add(golden(f, "map_bytes_hashes.hex"))
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := Decode(payload)
		if err != nil {
			return
		}
		if wellFormed(payload) != nil {
			t.Fatal("accepted a payload that is not well-formed msgpack")
		}
		for _, e := range b.Events {
			if e.Kind == BlockStored && (e.BlockSize <= 0 || len(e.TokenIDs) != len(e.BlockHashes)*e.BlockSize) {
				t.Fatalf("inconsistent BlockStored accepted: %+v", e)
			}
		}
	})
}
