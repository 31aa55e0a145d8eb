package prefill

import (
	"encoding/json"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// bodyIn is everything a prefill body is built from (docs/protocol.md, Prefill).
type bodyIn struct {
	Route    engine.Route
	TokensIn bool
	Body     []byte        // State.Body
	Obj      *jsonb.Object // its top-level index; nil: build parses Body
	ReqID    string
	Tokens   engine.Tokens
	Media    []engine.MediaItem
	KV       json.RawMessage // kv connector's prefill params; nil with kv-sglang
	EC       json.RawMessage // prepared ec_transfer_params; nil when empty
	Boot     *boot           // kv-sglang fields, nil otherwise
	Model    []byte          // a target rule's model (JSON string), nil: the client's
}

// boot is what a prefill leg carries with kv-sglang: port and room, plus
// the host in the concurrent shape.
type boot struct {
	Host string
	Port int
	Room uint64
}

var (
	one       = []byte("1")
	falseJSON = []byte("false")
)

// build returns the prefill body and its format path.
func build(in *bodyIn) (*jsonb.Body, string, *engine.Error) {
	obj, e := in.object()
	if e != nil {
		return nil, "", e
	}
	switch {
	case in.Route == engine.RouteChat && in.TokensIn:
		b, e := buildFreshGenerate(in, obj)
		return b, engine.RouteGenerate.Path(), e
	case in.Route == engine.RouteGenerate:
		b, e := buildGenerate(in, obj)
		return b, engine.RouteGenerate.Path(), e
	}
	ed := jsonb.NewEditor(in.Body)
	oe := ed.In(obj)
	setModel(oe, in.Model)
	capTop(oe)
	if in.Route == engine.RouteCompletions {
		if in.Tokens.Known {
			oe.Set("prompt", mm.TokenJSON(in.Tokens))
		}
		oe.Set("request_id", jsonb.Quote(in.ReqID))
	} else if tok := mm.ChatTokensJSON(in.Tokens, in.Media); tok != nil {
		oe.Set("tokens", tok)
	}
	transferTop(oe, in)
	return ed.Body(), in.Route.Path(), nil
}

func (in *bodyIn) object() (*jsonb.Object, *engine.Error) {
	if in.Obj != nil {
		return in.Obj, nil
	}
	return leg.ParseBody(nil, in.Body)
}

// setModel puts a target rule's model over the client's (nil: no change).
func setModel(oe *jsonb.ObjectEditor, model []byte) {
	if model != nil {
		oe.Set("model", model)
	}
}

// capTop applies the single-token cap to a chat or completions body
// (docs/protocol.md, Prefill). Keys are appended in this order when absent.
func capTop(oe *jsonb.ObjectEditor) {
	oe.Set("max_tokens", one)
	oe.Delete("min_tokens")
	oe.SetIfPresent("max_completion_tokens", one)
	oe.SetIfPresent("max_output_tokens", one)
	oe.SetIfPresent("n", one)
	oe.Set("stream", falseJSON)
	oe.Delete("stream_options")
}

// transferTop places the transfer params at the top level (chat, completions).
func transferTop(oe *jsonb.ObjectEditor, in *bodyIn) {
	if in.Boot != nil {
		leg.SetBootstrap(oe, in.Boot.Host, in.Boot.Port, in.Boot.Room)
	} else if in.KV != nil {
		oe.Set("kv_transfer_params", in.KV)
	}
	if in.EC != nil {
		oe.Set("ec_transfer_params", in.EC)
	}
}

// buildGenerate edits a client generate body: the cap goes inside
// sampling_params (created when absent or null, other keys kept), the
// transfer params under sampling_params.extra_args, request_id on top.
func buildGenerate(in *bodyIn, obj *jsonb.Object) (*jsonb.Body, *engine.Error) {
	ed := jsonb.NewEditor(in.Body)
	oe := ed.In(obj)
	setModel(oe, in.Model)
	// Output-length keys are read from sampling_params; cap any stray
	// top-level ones too, as the endpoint may accept them.
	oe.SetIfPresent("max_tokens", one)
	oe.Delete("min_tokens")
	oe.SetIfPresent("max_completion_tokens", one)
	oe.SetIfPresent("max_output_tokens", one)
	oe.SetIfPresent("n", one)
	sp, ok := oe.Object("sampling_params")
	if !ok {
		return nil, engine.Errorf(engine.KindInvalidRequest, "sampling_params must be an object or null")
	}
	sp.Set("max_tokens", one)
	sp.Delete("min_tokens")
	sp.SetIfPresent("max_completion_tokens", one)
	sp.SetIfPresent("max_output_tokens", one)
	sp.SetIfPresent("n", one)
	if in.KV != nil || in.EC != nil {
		ea, ok := sp.Object("extra_args")
		if !ok {
			return nil, engine.Errorf(engine.KindInvalidRequest, "sampling_params.extra_args must be an object or null")
		}
		if in.KV != nil {
			ea.Set("kv_transfer_params", in.KV)
		}
		if in.EC != nil {
			ea.Set("ec_transfer_params", in.EC)
		}
	}
	oe.Set("stream", falseJSON)
	oe.Delete("stream_options")
	oe.Set("request_id", jsonb.Quote(in.ReqID))
	return ed.Body(), nil
}

// buildFreshGenerate builds the generate body of a tokens-in chat prefill:
// request_id, model, token_ids, stream:false, features with kwargs when
// there are items, and sampling_params {max_tokens:1, extra_args:{…}}.
func buildFreshGenerate(in *bodyIn, obj *jsonb.Object) (*jsonb.Body, *engine.Error) {
	if !in.Tokens.Known {
		return nil, engine.Errorf(engine.KindInternal, "tokens-in prefill needs the prompt's tokens, and no render ran")
	}
	ids := mm.TokenJSON(in.Tokens)
	feats := mm.FeaturesJSON(in.Media, true)
	model, hasModel := obj.Get("model")
	if in.Model != nil {
		model, hasModel = in.Model, true
	}
	out := make([]byte, 0, len(ids)+len(feats)+len(model)+len(in.KV)+len(in.EC)+160)
	out = append(out, `{"request_id":`...)
	out = jsonb.AppendQuote(out, in.ReqID)
	if hasModel {
		out = append(out, `,"model":`...)
		out = append(out, model...)
	}
	out = append(out, `,"token_ids":`...)
	out = append(out, ids...)
	out = append(out, `,"stream":false`...)
	if feats != nil {
		out = append(out, `,"features":`...)
		out = append(out, feats...)
	}
	out = append(out, `,"sampling_params":{"max_tokens":1`...)
	if in.KV != nil || in.EC != nil {
		out = append(out, `,"extra_args":{`...)
		if in.KV != nil {
			out = append(out, `"kv_transfer_params":`...)
			out = append(out, in.KV...)
		}
		if in.EC != nil {
			if in.KV != nil {
				out = append(out, ',')
			}
			out = append(out, `"ec_transfer_params":`...)
			out = append(out, in.EC...)
		}
		out = append(out, '}')
	}
	out = append(out, "}}"...)
	return jsonb.Raw(out), nil
}

func jsonUnquote(raw []byte, s *string) error { return json.Unmarshal(raw, s) }
