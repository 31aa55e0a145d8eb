// Package handoff declares the per-request data the worker nodes hand each
// other: encode's ec_transfer_params to prefill, prefill's KV handoff to
// decode. The engine core knows these only as keys named in contracts; the
// types live here, with the nodes that make and read them.
package handoff

import (
	"encoding/json"
	"time"

	"github.com/celflow/celflow/engine"
)

// EC is the merged ec_transfer_params object (encode + the EC connector),
// nil when empty; prefill carries it.
var EC = engine.NewKey[json.RawMessage]("ec")

// KV is what prefill handed to decode. A stubbed prefill (explain, tests:
// blocks) reports that it ran, with no parameters.
var KV = engine.NewKey[KVHandoff]("kv").Stub(func(engine.Probe) KVHandoff {
	return KVHandoff{PrefillRan: true}
})

// KVHandoff is the prefill → decode handoff.
type KVHandoff struct {
	PrefillRan bool
	// Params is the kv_transfer_params object decode must carry (already
	// prepared by the KV connector), nil for none.
	Params json.RawMessage
	// Bootstrap fields (kv-sglang) to set at the top level of both legs.
	Bootstrap *Bootstrap
	// ReadyAt is when prefill's answer was read and the handoff recorded;
	// decode measures the hand-over time from it (docs/benchmarks.md,
	// Hand-over).
	ReadyAt time.Time
}

// Bootstrap is SGLang's rendezvous (docs/protocol.md, kv-sglang).
type Bootstrap struct {
	Host string
	Port int
	Room uint64
}
