package front

import (
	"strconv"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// ClientFields is the set of celflow-owned body field families an operator
// lets clients send (trust.client_fields). The zero value trusts none: every
// family is refused or stripped at the front (docs/threat-model.md).
type ClientFields uint8

// The families of body fields only celflow sets for a worker.
const (
	// kv_transfer_params at top level, under sampling_params.extra_args and
	// under vllm_xargs: where a worker pulls KV from (NIXL dials
	// remote_host:remote_port). Refused.
	FieldKVTransfer ClientFields = 1 << iota
	// ec_transfer_params, same places: where prefill pulls encoder output
	// from. Refused.
	FieldECTransfer
	// SGLang's bootstrap_host, bootstrap_port and bootstrap_room (top
	// level): the prefill server decode joins and the room it shares. Refused.
	FieldBootstrap
	// tokens on chat and completions: celflow's rendered T and item hashes.
	// A client value would replace the prompt that render checked, and its
	// features.mm_hashes could name another tenant's cached items. Refused.
	FieldTokens
	// uuid of a chat content part: vLLM uses it as the item's cache key in
	// place of the content hash. celflow keys items by render's hash. Stripped.
	FieldMediaUUID
	// cache_hit_threshold (top level, vLLM RFC #24256): conditional-decode
	// sets it in worker mode; on a final decode leg a client value would
	// let the worker answer "cache_threshold" with no tokens. Refused.
	FieldCacheHitThreshold
)

// clientFieldNames are the trust.client_fields spellings, in bit order.
var clientFieldNames = [...]string{"kv_transfer_params", "ec_transfer_params", "bootstrap", "tokens", "media_uuid", "cache_hit_threshold"}

// ParseClientFields maps trust.client_fields names to the set; ok is false
// for an unknown name (the config schema's enum rejects those first).
func ParseClientFields(names []string) (f ClientFields, ok bool) {
	for _, n := range names {
		found := false
		for i, want := range clientFieldNames {
			if n == want {
				f |= 1 << i
				found = true
			}
		}
		if !found {
			return f, false
		}
	}
	return f, true
}

func (f ClientFields) has(b ClientFields) bool { return f&b != 0 }

// GuardFields applies the body side of the trust boundary once, at the
// front, before any node runs (docs/threat-model.md): a celflow-owned field the
// operator did not trust is refused (400 reserved_field, param = its JSON
// path) or, for a content part's uuid, stripped, in which case the body and
// its index are replaced. It assumes each key appears once per object (the
// front refuses duplicates). One pass over the top-level index; nested
// objects are walked only when a cheap byte test says a reserved name may
// be there, so a body without one costs no allocation.
func GuardFields(route engine.Route, body []byte, obj *jsonb.Object, allow ClientFields) ([]byte, *jsonb.Object, *engine.Error) {
	var msgs *jsonb.Member
	// The index's name filter says, without another pass over the bytes,
	// whether a nested transfer-params member can exist at all.
	transfer := obj.MayHaveKey("kv_transfer_params") || obj.MayHaveKey("ec_transfer_params")
	for i := range obj.Members {
		m := &obj.Members[i]
		switch m.Key {
		case "kv_transfer_params":
			if !allow.has(FieldKVTransfer) {
				return nil, nil, reserved(m.Key, "kv_transfer_params")
			}
		case "ec_transfer_params":
			if !allow.has(FieldECTransfer) {
				return nil, nil, reserved(m.Key, "ec_transfer_params")
			}
		case "bootstrap_host", "bootstrap_port", "bootstrap_room":
			if !allow.has(FieldBootstrap) {
				return nil, nil, reserved(m.Key, "bootstrap")
			}
		case "tokens":
			if route != engine.RouteGenerate && !allow.has(FieldTokens) {
				return nil, nil, reserved(m.Key, "tokens")
			}
		case "cache_hit_threshold":
			if !allow.has(FieldCacheHitThreshold) {
				return nil, nil, reserved(m.Key, "cache_hit_threshold")
			}
		case "sampling_params":
			if !transfer {
				continue
			}
			if e := guardTransfer(body, m, "sampling_params", "extra_args", allow); e != nil {
				return nil, nil, e
			}
		case "vllm_xargs":
			if !transfer {
				continue
			}
			// vLLM merges vllm_xargs into SamplingParams.extra_args, where
			// its connectors look for the transfer params.
			if e := guardTransfer(body, m, "vllm_xargs", "", allow); e != nil {
				return nil, nil, e
			}
		case "messages":
			msgs = m
		}
	}
	if msgs == nil || route != engine.RouteChat || allow.has(FieldMediaUUID) || !obj.MayHaveKey("uuid") {
		return body, obj, nil
	}
	return stripPartUUIDs(body, obj, msgs)
}

// guardTransfer refuses kv/ec_transfer_params inside the object m holds
// (inner == "") or inside its member inner (extra_args). Values of other
// types are left to the workers (and to the generate entry checks).
func guardTransfer(body []byte, m *jsonb.Member, path, inner string, allow ClientFields) *engine.Error {
	if allow.has(FieldKVTransfer) && allow.has(FieldECTransfer) {
		return nil
	}
	if body[m.ValStart] != '{' {
		return nil
	}
	o, err := jsonb.ObjectAt(body, m.ValStart)
	if err != nil {
		return nil // cannot happen on a validated body
	}
	if inner != "" {
		i := o.Find(inner)
		if i < 0 || body[o.Members[i].ValStart] != '{' {
			return nil
		}
		path += "." + inner
		if o, err = jsonb.ObjectAt(body, o.Members[i].ValStart); err != nil {
			return nil
		}
	}
	for _, in := range o.Members {
		switch {
		case in.Key == "kv_transfer_params" && !allow.has(FieldKVTransfer):
			return reserved(path+"."+in.Key, "kv_transfer_params")
		case in.Key == "ec_transfer_params" && !allow.has(FieldECTransfer):
			return reserved(path+"."+in.Key, "ec_transfer_params")
		}
	}
	return nil
}

// stripPartUUIDs removes "uuid" from every object in messages[*].content[*]
// (whatever its type: vLLM reads a part's uuid on every media part type it
// knows, some of which celflow does not fetch) and re-indexes the new body.
// Only called when the bytes may contain one; the copy is made only when
// one is there.
func stripPartUUIDs(body []byte, obj *jsonb.Object, msgs *jsonb.Member) ([]byte, *jsonb.Object, *engine.Error) {
	if body[msgs.ValStart] != '[' {
		return body, obj, nil
	}
	var ed *jsonb.Editor
	ms, _ := jsonb.Elements(body, msgs.ValStart)
	for _, mr := range ms {
		if body[mr[0]] != '{' {
			continue
		}
		mo, err := jsonb.ObjectAt(body, mr[0])
		if err != nil {
			continue
		}
		c := mo.Find("content")
		if c < 0 || body[mo.Members[c].ValStart] != '[' {
			continue
		}
		ps, _ := jsonb.Elements(body, mo.Members[c].ValStart)
		for _, pr := range ps {
			if body[pr[0]] != '{' {
				continue
			}
			po, err := jsonb.ObjectAt(body, pr[0])
			if err != nil || po.Find("uuid") < 0 {
				continue
			}
			if ed == nil {
				ed = jsonb.NewEditor(body)
			}
			ed.In(po).Delete("uuid")
		}
	}
	if ed == nil {
		return body, obj, nil
	}
	nb := ed.Body().Bytes()
	no, err := jsonb.Parse(nb)
	if err != nil {
		return nil, nil, engine.Errorf(engine.KindInternal, "stripping content part uuids broke the body: %v", err)
	}
	return nb, no, nil
}

// reserved is the 400 for a celflow-owned field a client sent.
func reserved(path, family string) *engine.Error {
	e := engine.Errorf(engine.KindReservedField,
		"%s is set by celflow for its workers, not by clients (an operator may trust it with trust.client_fields: [%s])",
		strconv.Quote(path), family)
	e.Param = path
	return e
}
