// Package kv holds the KV connectors: the wire formats of the prefill → decode
// KV handoff (docs/protocol.md, KV connectors). A connector turns nothing into
// the prefill leg's kv_transfer_params and the prefill reply's
// kv_transfer_params into the decode leg's. It imports nothing of celflow's:
// raw JSON in, raw JSON out.
package kv

import (
	"encoding/json"
	"errors"
	"github.com/celflow/celflow/connectors/internal/registry"
)

// The wire names of the known connectors.
const (
	SharedStorage = "kv-shared-storage"
	NIXL          = "kv-nixl"
	SGLang        = "kv-sglang"
)

// Connector is one KV handoff format. Implementations are stateless and safe
// for concurrent use.
type Connector interface {
	// Name is the wire name (kv-nixl, ...).
	Name() string
	// PrefillParams is the kv_transfer_params object for the prefill leg,
	// or nil when the connector sends none (kv-sglang). Callers must not
	// modify the returned bytes.
	PrefillParams() json.RawMessage
	// Decode builds the decode leg's kv_transfer_params from the prefill
	// reply's raw kv_transfer_params value (nil when the reply had none).
	// It returns nil params when decode gets none (kv-sglang); an error
	// (wrapping ErrHandoff) when the reply breaks the protocol.
	Decode(reply json.RawMessage) (json.RawMessage, error)
	// Bootstrap reports whether the connector uses SGLang's bootstrap
	// fields instead of kv_transfer_params.
	Bootstrap() bool
}

// ErrHandoff marks a prefill reply whose KV handoff is missing or malformed;
// nodes map it to 502 upstream_protocol_error.
var ErrHandoff = errors.New("kv handoff missing or malformed")

var table = registry.Table[Connector]{Family: "kv", Default: SharedStorage, Entries: map[string]Connector{
	SharedStorage: sharedStorage{},
	NIXL:          nixl{},
	SGLang:        sglang{},
}}

// Lookup returns the connector of that name; "" means kv-shared-storage.
// Unknown names are an error listing the known ones.
func Lookup(name string) (Connector, error) { return table.Lookup(name) }

// Names lists the known connector names, sorted.
func Names() []string { return table.Names() }

// sharedStorage: the workers share a KV store; only the two flags travel.
type sharedStorage struct{}

var (
	sharedPrefill = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false}`)
	sharedDecode  = json.RawMessage(`{"do_remote_decode":false,"do_remote_prefill":true}`)
)

func (sharedStorage) Name() string                   { return SharedStorage }
func (sharedStorage) PrefillParams() json.RawMessage { return sharedPrefill }
func (sharedStorage) Bootstrap() bool                { return false }

// Decode ignores the reply, even a malformed one.
func (sharedStorage) Decode(json.RawMessage) (json.RawMessage, error) { return sharedDecode, nil }

// sglang: the bootstrap fields replace kv_transfer_params on both legs; the
// nodes set them (they need the picked prefill host and a per-request room).
type sglang struct{}

func (sglang) Name() string                                    { return SGLang }
func (sglang) PrefillParams() json.RawMessage                  { return nil }
func (sglang) Bootstrap() bool                                 { return true }
func (sglang) Decode(json.RawMessage) (json.RawMessage, error) { return nil, nil }

var (
	_ Connector = sharedStorage{}
	_ Connector = nixl{}
	_ Connector = sglang{}
)
