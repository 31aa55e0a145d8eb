package kv

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// nixl: vLLM's NixlConnector. The prefill reply's kv_transfer_params locate
// the blocks; decode gets every key of it byte-exact, with the two flags
// forced (docs/protocol.md, KV connectors).
type nixl struct{}

var nixlPrefill = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

func (nixl) Name() string                   { return NIXL }
func (nixl) Bootstrap() bool                { return false }
func (nixl) PrefillParams() json.RawMessage { return nixlPrefill }

// Decode requires a non-empty object (celflow differs: the reference degrades
// to the two flags and sends decode after KV it cannot locate). Members keep
// their order and their value bytes; do_remote_decode and do_remote_prefill
// are replaced in place, or appended when absent.
func (nixl) Decode(reply json.RawMessage) (json.RawMessage, error) {
	ms, err := Members(reply)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: kv_transfer_params is an empty object", ErrHandoff)
	}
	out := make([]byte, 0, len(reply)+48)
	out = append(out, '{')
	seenDec, seenPre := false, false
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m.RawKey...)
		out = append(out, ':')
		switch m.Key {
		case "do_remote_decode":
			out, seenDec = append(out, "false"...), true
		case "do_remote_prefill":
			out, seenPre = append(out, "true"...), true
		default:
			out = append(out, m.Value...)
		}
	}
	if !seenDec {
		out = append(out, `,"do_remote_decode":false`...)
	}
	if !seenPre {
		out = append(out, `,"do_remote_prefill":true`...)
	}
	return append(out, '}'), nil
}

// Member is one key/value pair of a raw JSON object, in document order.
type Member struct {
	Key    string          // unescaped
	RawKey []byte          // the key as written, quotes included
	Value  json.RawMessage // the value as written
}

// Members splits a raw JSON object into its members in order, keeping each
// value's bytes. Anything but an object (absent, null, a string, an array)
// is an ErrHandoff.
func Members(raw json.RawMessage) ([]Member, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("%w: kv_transfer_params is missing or null", ErrHandoff)
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return nil, fmt.Errorf("%w: kv_transfer_params is not an object", ErrHandoff)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, fmt.Errorf("%w: %v", ErrHandoff, err)
	}
	var ms []Member
	for dec.More() {
		start := dec.InputOffset()
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrHandoff, err)
		}
		key, _ := t.(string)
		end := dec.InputOffset()
		rk := bytes.TrimLeft(raw[start:end], " \t\r\n,")
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrHandoff, err)
		}
		ms = append(ms, Member{Key: key, RawKey: rk, Value: v})
	}
	return ms, nil
}
