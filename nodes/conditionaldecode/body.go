package conditionaldecode

import (
	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// build edits the client body for the conditional-decode leg
// (docs/protocol.md, Conditional decode):
// chat adds `tokens` when T is known (features without kwargs, only with
// items); completions gets prompt = T when T came from render; generate is
// sent as is. Never kv_transfer_params, never uuid; stream is the client's.
// threshold, when not nil (worker mode, chat and completions only), is set
// as the top-level cache_hit_threshold, replacing any the client sent.
func build(x *engine.Exec, route engine.Route, body []byte, t engine.Tokens, media []engine.MediaItem, threshold []byte) (*jsonb.Body, *engine.Error) {
	var key string
	var val []byte
	switch route {
	case engine.RouteChat:
		key, val = "tokens", mm.ChatTokensJSON(t, media)
	case engine.RouteCompletions:
		if t.FromRender {
			key, val = "prompt", mm.TokenJSON(t)
		}
	}
	model := leg.Model(x)
	if val == nil && threshold == nil && model == nil {
		return jsonb.Raw(body), nil
	}
	obj, e := leg.ParseBody(x, body)
	if e != nil {
		return nil, e
	}
	ed := jsonb.NewEditor(body)
	oe := ed.In(obj)
	if model != nil {
		oe.Set("model", model)
	}
	if val != nil {
		oe.Set(key, val)
	}
	if threshold != nil {
		oe.Set("cache_hit_threshold", threshold)
	}
	return ed.Body(), nil
}
