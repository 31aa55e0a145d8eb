// Package ec holds the EC connectors: how encoder replies' ec_transfer_params
// are recorded and what the prefill leg then carries (docs/protocol.md, EC
// connectors). It imports nothing of celflow's: maps of json.RawMessage in
// and out.
package ec

import (
	"encoding/json"
	"errors"
	"github.com/celflow/celflow/connectors/internal/registry"
)

// The wire names of the known connectors.
const (
	SharedStorage = "ec-shared-storage"
	NIXL          = "ec-nixl"
)

// Params is one ec_transfer_params object: mm hash → descriptor.
type Params = map[string]json.RawMessage

// Connector is one EC handoff format. Implementations are stateless and safe
// for concurrent use.
type Connector interface {
	// Name is the wire name.
	Name() string
	// Merge records encoder replies given in item order (a nil or empty
	// reply is not recorded). The result is what the run keeps (its ec
	// key, nodes/internal/handoff.EC): a JSON object listing every recorded
	// (hash, descriptor) pair in order, duplicates and nulls included, so Prepare
	// can judge them; nil when nothing was recorded. Merge never fails:
	// conflicts are raised by Prepare, before prefill is sent.
	Merge(replies []Params) json.RawMessage
	// Prepare returns a fresh map for the prefill leg's ec_transfer_params
	// from what Merge recorded: nil (omit the field) when empty. Conflicting
	// descriptors for one hash are an error wrapping ErrConflict.
	Prepare(recorded json.RawMessage) (Params, error)
}

// ErrConflict marks two different descriptors for one hash; nodes map it to
// 502 upstream_protocol_error.
var ErrConflict = errors.New("conflicting ec_transfer_params")

var table = registry.Table[Connector]{Family: "ec", Default: SharedStorage, Entries: map[string]Connector{
	SharedStorage: sharedStorage{},
	NIXL:          nixl{},
}}

// Lookup returns the connector of that name; "" means ec-shared-storage.
// Unknown names are an error listing the known ones.
func Lookup(name string) (Connector, error) { return table.Lookup(name) }

// Names lists the known connector names, sorted.
func Names() []string { return table.Names() }

// sharedStorage: the encoder cache is shared storage; nothing travels.
type sharedStorage struct{}

func (sharedStorage) Name() string                            { return SharedStorage }
func (sharedStorage) Merge([]Params) json.RawMessage          { return nil }
func (sharedStorage) Prepare(json.RawMessage) (Params, error) { return nil, nil }

// Marshal encodes prepared params for a leg (keys sorted, values compacted
// but otherwise as written); nil for an empty map.
func Marshal(p Params) json.RawMessage {
	if len(p) == 0 {
		return nil
	}
	b, err := json.Marshal(p)
	if err != nil { // values came from json.Valid input; cannot happen
		return nil
	}
	return b
}

var (
	_ Connector = sharedStorage{}
	_ Connector = nixl{}
)
