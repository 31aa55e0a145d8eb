package encode

import (
	"fmt"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// chatBody is one item's chat-format sub-request (docs/protocol.md, Encode):
//
//	{"model":M,"messages":[{"role":"user","content":[{"type":T,"<T>":<client object>,"uuid":H}]}],
//	 "tokens":{…item tokens, features without kwargs…},"max_tokens":1,"stream":false}
//
// The part is rebuilt from its "<T>" member (a bare url string is wrapped as
// {"url":…}) and that member is referenced,
// not copied: the body is three segments around the client's bytes. A
// client uuid on the part is not carried; the part's uuid is the item's
// hash (render's), so an encoder keys its cache and its ec_transfer_params
// by it (vLLM's multimodal uuid, issue 10), as on the decode leg
// (docs/protocol.md, Decode). tokens and uuid are omitted when render gave the item no
// features (no hash).
func chatBody(st *engine.State, it *engine.MediaItem, model []byte) (*jsonb.Body, error) {
	p, ok := mm.PartAt(st.Body, it.PartStart, it.PartEnd)
	if !ok {
		return nil, fmt.Errorf("media item %d: its part is not in the body", it.Index)
	}
	var tokens []byte
	if it.HasFeatures {
		var err error
		if tokens, err = mm.ItemChatTokensJSON(st.Tokens, it); err != nil {
			return nil, err
		}
	}
	pre := make([]byte, 0, 96+len(p.Type)*2)
	pre = append(pre, '{')
	if m, ok := modelOf(st, model); ok {
		pre = append(pre, `"model":`...)
		pre = append(pre, m...)
		pre = append(pre, ',')
	}
	pre = append(pre, `"messages":[{"role":"user","content":[{"type":`...)
	pre = jsonb.AppendQuote(pre, p.Type)
	pre = append(pre, ',')
	pre = jsonb.AppendQuote(pre, p.Type)
	pre = append(pre, ':')
	post := make([]byte, 0, len(tokens)+len(it.Hash)+64)
	if p.Bare {
		// A bare url string ({"image_url":"…"}, input_image, no type) is
		// sent in the OpenAI object form, the one every encoder parses.
		pre = append(pre, `{"url":`...)
		post = append(post, '}')
	}
	if it.HasFeatures && it.Hash != "" {
		post = append(post, `,"uuid":`...)
		post = jsonb.AppendQuote(post, it.Hash)
	}
	post = append(post, `}]}]`...)
	if tokens != nil {
		post = append(post, `,"tokens":`...)
		post = append(post, tokens...)
	}
	post = append(post, `,"max_tokens":1,"stream":false}`...)
	ed := jsonb.NewEditor(st.Body)
	ed.Splice(0, p.ObjStart, pre)
	ed.Splice(p.ObjEnd, len(st.Body), post)
	return ed.Body(), nil
}

// generateBody is one item's generate-format sub-request
// (docs/protocol.md, Encode):
//
//	{"model":M,"token_ids":[…],"features":{…with kwargs, null for a cache hit…},
//	 "sampling_params":{"max_tokens":1},"stream":false}
//
// No request_id, no min_tokens.
func generateBody(st *engine.State, it *engine.MediaItem, model []byte) (*jsonb.Body, error) {
	if !it.HasFeatures {
		return nil, fmt.Errorf("media item %d has no render features (hash, placeholder)", it.Index)
	}
	ids, err := mm.ItemTokensJSON(st.Tokens, it)
	if err != nil {
		return nil, err
	}
	f := mm.ItemFeaturesJSON(it, true)
	out := make([]byte, 0, len(ids)+len(f)+128)
	out = append(out, '{')
	if m, ok := modelOf(st, model); ok {
		out = append(out, `"model":`...)
		out = append(out, m...)
		out = append(out, ',')
	}
	out = append(out, `"token_ids":`...)
	out = append(out, ids...)
	out = append(out, `,"features":`...)
	out = append(out, f...)
	out = append(out, `,"sampling_params":{"max_tokens":1},"stream":false}`...)
	return jsonb.Raw(out), nil
}

// modelOf is a target rule's model (a JSON string) when set, else the
// client's.
func modelOf(st *engine.State, model []byte) ([]byte, bool) {
	if model != nil {
		return model, true
	}
	return mm.TopLevel(st.Body, "model")
}
