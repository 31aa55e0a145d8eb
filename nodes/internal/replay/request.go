package replay

import (
	"bytes"
	"math"
	"strconv"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// Check says whether a client request could be continued exactly on
// another worker: "" when it can, else the refusal (an outcome label).
// It reads the client body only; what the stream itself reveals (a tool
// call or reasoning in flight, a worker without token ids) is judged when
// the leg breaks.
func Check(route engine.Route, obj *jsonb.Object, media int) string {
	if media > 0 {
		return RefusedMedia
	}
	if route == engine.RouteGenerate {
		// Tokens in, tokens out: the sampling parameters are one object.
		sp, ok := obj.Get("sampling_params")
		if !ok || bytes.Equal(sp, null) {
			return ""
		}
		spObj, err := jsonb.ObjectAt(sp, jsonb.SkipWS(sp, 0))
		if err != nil {
			return ""
		}
		return Check(engine.RouteCompletions, spObj, 0)
	}
	get := func(k string) []byte {
		v, ok := obj.Get(k)
		if !ok || bytes.Equal(v, null) {
			return nil
		}
		return v
	}
	for _, k := range []string{"n", "best_of"} {
		if v := get(k); v != nil && !bytes.Equal(v, []byte("1")) {
			return RefusedN
		}
	}
	// A completions prompt that is a list of prompts (strings or id lists)
	// is a batch: one choice per prompt.
	if v := get("prompt"); route == engine.RouteCompletions && v != nil && v[0] == '[' {
		if i := jsonb.SkipWS(v, 1); i < len(v) && (v[i] == '"' || v[i] == '[') {
			return RefusedN
		}
	}
	// Guided decoding: its grammar state would restart at the break, so the
	// continuation could leave the grammar (Dynamo refuses it too).
	if v := get("response_format"); v != nil {
		if t, ok := member(v, "type"); ok && !bytes.Equal(t, []byte(`"text"`)) {
			return RefusedGuided
		}
	}
	for _, k := range []string{"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"} {
		if get(k) != nil {
			return RefusedGuided
		}
	}
	// Logprobs of the continuation would be conditioned right, but the
	// top_logprobs and prompt_logprobs of a token-id prompt are the
	// continuation's, not the client's: refused rather than approximated.
	if v := get("logprobs"); v != nil && !bytes.Equal(v, []byte("false")) {
		return RefusedLogprobs
	}
	for _, k := range []string{"top_logprobs", "prompt_logprobs"} {
		if v := get(k); v != nil && !bytes.Equal(v, []byte("0")) {
			return RefusedLogprobs
		}
	}
	if v := get("echo"); v != nil && !bytes.Equal(v, []byte("false")) {
		return RefusedLogprobs
	}
	// A token-id continuation goes through /v1/completions, which runs no
	// tool parser: with tools in play, a call could start after the break
	// and reach the client as text.
	if v := get("tools"); v != nil && !bytes.Equal(v, []byte("[]")) {
		if c := get("tool_choice"); c == nil || !bytes.Equal(c, []byte(`"none"`)) {
			return RefusedTools
		}
	}
	return ""
}

var null = []byte("null")

// member is a member of the JSON object raw (already valid JSON).
func member(raw []byte, key string) ([]byte, bool) {
	i := jsonb.SkipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	vs, ve, ok := jsonb.Lookup(raw, i, key)
	if !ok {
		return nil, false
	}
	return raw[vs:ve], true
}

// chatOnly are chat request members a completions request has no use for
// (vLLM ignores unknown members with a warning; these are dropped so the
// continuation is what it says: a token-id prompt and the sampling
// parameters).
var chatOnly = []string{"messages", "tokens", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
	"max_completion_tokens", "chat_template", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
	"documents", "mm_processor_kwargs", "reasoning_effort", "response_format", "logprobs", "top_logprobs", "n",
	"modalities", "audio", "prediction", "web_search_options", "store", "metadata"}

// completionsDefaultMax is vLLM's max_tokens of a completions request that
// sets none (its CompletionRequest default).
const completionsDefaultMax = 16

// Continuation builds the /v1/completions request that goes on with a reply
// after generated tokens: the client's body (chat or completions) with the
// prompt replaced by ids (the prompt's token ids followed by the generated
// ones), the token budget reduced by what was generated (max_tokens, or
// chat's max_completion_tokens; chat without a limit sends max_tokens null,
// which vLLM reads as the model's remaining context), min_tokens likewise,
// the same sampling parameters, streaming, and return_token_ids so that a
// second break can go on again. model is a target rule's model (nil: the
// client's). left is false when the budget is already spent (the reply
// ends with finish_reason "length" without another leg).
func Continuation(route engine.Route, body []byte, obj *jsonb.Object, ids []int64, generated int, model []byte) (out []byte, left bool) {
	if route == engine.RouteGenerate {
		return generateContinuation(body, obj, ids, generated, model)
	}
	ed := jsonb.NewEditor(body)
	oe := ed.In(obj)
	maxRaw, hasMax := obj.Get("max_tokens")
	if route == engine.RouteChat {
		if v, ok := obj.Get("max_completion_tokens"); ok && !bytes.Equal(v, null) {
			maxRaw, hasMax = v, true
		}
		for _, k := range chatOnly {
			oe.Delete(k)
		}
	} else {
		oe.Delete("echo")
		oe.Delete("suffix")
	}
	if hasMax && bytes.Equal(maxRaw, null) {
		hasMax = false
	}
	switch {
	case hasMax:
		m, ok := tokenCount(maxRaw)
		if !ok {
			m = 0 // not a count: no continuation can keep to it
		}
		rest := m - int64(generated)
		if rest < 1 {
			return nil, false
		}
		oe.Set("max_tokens", strconv.AppendInt(nil, rest, 10))
	case route == engine.RouteCompletions:
		rest := completionsDefaultMax - int64(generated)
		if rest < 1 {
			return nil, false
		}
		oe.Set("max_tokens", strconv.AppendInt(nil, rest, 10))
	default:
		oe.Set("max_tokens", null)
	}
	if v, ok := obj.Get("min_tokens"); ok && !bytes.Equal(v, null) {
		if m, ok := tokenCount(v); ok {
			oe.Set("min_tokens", strconv.AppendInt(nil, max(m-int64(generated), 0), 10))
		}
	}
	if model != nil {
		oe.Set("model", model)
	}
	oe.Set("prompt", mm.AppendTokenIDs(make([]byte, 0, 7*len(ids)+2), ids))
	oe.Set("stream", []byte("true"))
	oe.Set("return_token_ids", []byte("true"))
	return ed.Body().Bytes(), true
}

// ClientAsked reports whether the client asked for token ids itself.
func ClientAsked(obj *jsonb.Object) bool {
	v, ok := obj.Get("return_token_ids")
	return ok && bytes.Equal(v, []byte("true"))
}

// IncludeUsage reports stream_options.include_usage: true.
func IncludeUsage(obj *jsonb.Object) bool {
	v, ok := obj.Get("stream_options")
	if !ok {
		return false
	}
	u, ok := member(v, "include_usage")
	return ok && bytes.Equal(u, []byte("true"))
}

// generateContinuation is Continuation for the generate route: the same
// route, token_ids replaced, sampling_params' max_tokens and min_tokens
// reduced (vLLM's SamplingParams default of 16 when it sets none).
func generateContinuation(body []byte, obj *jsonb.Object, ids []int64, generated int, model []byte) ([]byte, bool) {
	ed := jsonb.NewEditor(body)
	oe := ed.In(obj)
	oe.Set("token_ids", mm.AppendTokenIDs(make([]byte, 0, 7*len(ids)+2), ids))
	if model != nil {
		oe.Set("model", model)
	}
	sp, ok := oe.Object("sampling_params")
	if !ok {
		return nil, false
	}
	var spObj *jsonb.Object
	if raw, ok := obj.Get("sampling_params"); ok && !bytes.Equal(raw, null) {
		spObj, _ = jsonb.ObjectAt(raw, jsonb.SkipWS(raw, 0))
	}
	m := int64(completionsDefaultMax)
	if spObj != nil {
		if v, ok := spObj.Get("max_tokens"); ok && !bytes.Equal(v, null) {
			x, ok := tokenCount(v)
			if !ok {
				return nil, false // not a count: no continuation can keep to it
			}
			m = x
		}
		if v, ok := spObj.Get("min_tokens"); ok && !bytes.Equal(v, null) {
			if x, ok := tokenCount(v); ok {
				sp.Set("min_tokens", strconv.AppendInt(nil, max(x-int64(generated), 0), 10))
			}
		}
	}
	rest := m - int64(generated)
	if rest < 1 {
		return nil, false
	}
	sp.Set("max_tokens", strconv.AppendInt(nil, rest, 10))
	return ed.Body().Bytes(), true
}

// tokenCount reads a token count as vLLM's request models do (pydantic,
// lax): an integer, or a number with an integral value (10.0, 1e1, which
// the first leg was served with); ok is false for anything else (raw is
// valid JSON: the body was parsed).
func tokenCount(raw []byte) (int64, bool) {
	if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return v, true
	}
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}
