package decode

import (
	"encoding/json"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/handoff"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// bodyIn is what a decode body is built from (docs/protocol.md, Decode).
type bodyIn struct {
	Route  engine.Route
	Body   []byte        // State.Body
	Obj    *jsonb.Object // its top-level index; nil: build parses Body
	Tokens engine.Tokens
	Media  []engine.MediaItem
	KV     json.RawMessage    // prepared decode kv_transfer_params; nil: none (no prefill ran, aggregated)
	Boot   *handoff.Bootstrap // kv-sglang fields, nil otherwise
	Model  []byte             // a target rule's model (JSON string), nil: the client's
	// TokenIDs asks the worker for return_token_ids (decode failover: the
	// continuation's prompt is built from them); chat and completions only.
	TokenIDs bool
}

// build edits the client body for the decode leg. It never adds
// ec_transfer_params, and the client's max_tokens, min_tokens, stream and
// stream_options pass untouched.
func build(in *bodyIn) (*jsonb.Body, *engine.Error) {
	obj := in.Obj
	if obj == nil {
		var e *engine.Error
		if obj, e = leg.ParseBody(nil, in.Body); e != nil {
			return nil, e
		}
	}
	ed := jsonb.NewEditor(in.Body)
	oe := ed.In(obj)
	if in.Model != nil {
		oe.Set("model", in.Model)
	}
	switch in.Route {
	case engine.RouteChat:
		if e := setUUIDs(ed, in); e != nil {
			return nil, e
		}
		if tok := mm.ChatTokensJSON(in.Tokens, in.Media); tok != nil {
			oe.Set("tokens", tok)
		}
	case engine.RouteCompletions:
		if in.Tokens.FromRender {
			oe.Set("prompt", mm.TokenJSON(in.Tokens))
		}
	case engine.RouteGenerate:
		if in.KV != nil {
			sp, ok := oe.Object("sampling_params")
			if !ok {
				return nil, engine.Errorf(engine.KindInvalidRequest, "sampling_params must be an object or null")
			}
			ea, ok := sp.Object("extra_args")
			if !ok {
				return nil, engine.Errorf(engine.KindInvalidRequest, "sampling_params.extra_args must be an object or null")
			}
			ea.Set("kv_transfer_params", in.KV)
		}
		return ed.Body(), nil
	}
	if in.TokenIDs {
		oe.Set("return_token_ids", trueJSON)
	}
	if in.Boot != nil {
		leg.SetBootstrap(oe, in.Boot.Host, in.Boot.Port, in.Boot.Room)
	} else if in.KV != nil {
		oe.Set("kv_transfer_params", in.KV)
	}
	return ed.Body(), nil
}

var trueJSON = []byte("true")

// setUUIDs gives each media part with a hash `uuid` = that hash, replacing a
// client uuid; the part's URL is left as it is. State.Media holds the part
// objects' offsets in State.Body.
func setUUIDs(ed *jsonb.Editor, in *bodyIn) *engine.Error {
	for i := range in.Media {
		it := &in.Media[i]
		if it.Hash == "" {
			continue
		}
		if it.PartStart < 0 || it.PartEnd > len(in.Body) || it.PartStart >= it.PartEnd || in.Body[it.PartStart] != '{' {
			return engine.Errorf(engine.KindInternal, "media item %d: part offsets [%d,%d) do not locate an object in the body", i, it.PartStart, it.PartEnd)
		}
		part, err := jsonb.ObjectAt(in.Body, it.PartStart)
		if err != nil {
			return engine.Errorf(engine.KindInternal, "media item %d: %v", i, err)
		}
		ed.In(part).Set("uuid", jsonb.Quote(it.Hash))
	}
	return nil
}
