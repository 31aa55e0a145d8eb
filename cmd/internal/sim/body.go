package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// format is the body layout of a worker request (docs/protocol.md, Terms).
type format int

const (
	fmtChat format = iota
	fmtCompletions
	fmtGenerate
)

// optInt is an optional JSON integer: null or absent leaves it unset; an
// integral float (5.0) is accepted as pydantic's lax mode does.
type optInt struct {
	Set bool
	V   int64
}

func (o *optInt) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("must be an integer")
	}
	if v, err := n.Int64(); err == nil {
		o.Set, o.V = true, v
		return nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("must be an integer, got %s", n)
	}
	o.Set, o.V = true, int64(f)
	return nil
}

type wireBody struct {
	Model               json.RawMessage `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	TokenIDs            json.RawMessage `json:"token_ids"`
	Tokens              json.RawMessage `json:"tokens"`
	Features            json.RawMessage `json:"features"`
	MaxTokens           optInt          `json:"max_tokens"`
	MaxCompletionTokens optInt          `json:"max_completion_tokens"`
	MinTokens           optInt          `json:"min_tokens"`
	N                   optInt          `json:"n"`
	Stream              json.RawMessage `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	SamplingParams *struct {
		MaxTokens   optInt          `json:"max_tokens"`
		MinTokens   optInt          `json:"min_tokens"`
		N           optInt          `json:"n"`
		Temperature json.RawMessage `json:"temperature"`
		ExtraArgs   *struct {
			KV json.RawMessage `json:"kv_transfer_params"`
			EC json.RawMessage `json:"ec_transfer_params"`
		} `json:"extra_args"`
	} `json:"sampling_params"`
	KV            json.RawMessage `json:"kv_transfer_params"`
	EC            json.RawMessage `json:"ec_transfer_params"`
	BootstrapHost *string         `json:"bootstrap_host"`
	BootstrapPort optInt          `json:"bootstrap_port"`
	BootstrapRoom json.RawMessage `json:"bootstrap_room"`
	RequestID     *string         `json:"request_id"`
	// CacheHitThreshold: vLLM RFC #24256, chat and completions only.
	CacheHitThreshold *float64 `json:"cache_hit_threshold"`
	// Temperature and ReturnTokenIDs stay raw: only a number 0 and true
	// mean something here, and a body the simulator used to accept with
	// other values there must stay accepted.
	Temperature    json.RawMessage `json:"temperature"`
	ReturnTokenIDs json.RawMessage `json:"return_token_ids"` // chat and completions
}

// bootstrap is SGLang's PD rendezvous (docs/protocol.md, kv-sglang).
type bootstrap struct {
	Host string
	Port int64
	Room uint64
}

// request is a parsed worker request.
type request struct {
	Format       format
	Model        string
	Prompt       promptInfo
	Media        []mediaPart // chat: media parts of messages, in order
	MaxTokens    optInt
	MinTokens    int64
	N            int
	Stream       bool
	IncludeUsage bool
	KV           map[string]json.RawMessage // nil when absent or null
	EC           map[string]json.RawMessage
	Bootstrap    *bootstrap
	RequestID    string // body request_id
	// CacheHitThreshold is the request's cache_hit_threshold (chat and
	// completions), nil when absent; always within 0..1.
	CacheHitThreshold *float64
	// Greedy: temperature 0 was asked for (deterministic, continuable
	// answers; determ.go).
	Greedy bool
	// ReturnTokenIDs: vLLM's return_token_ids (chat and completions; the
	// generate route always answers token ids).
	ReturnTokenIDs bool
}

// parseRequest reads a worker body the way vLLM's endpoint for f would.
// Every error is a 400 with the returned message.
func parseRequest(f format, body []byte) (*request, error) {
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("the request body must be a JSON object")
	}
	var b wireBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("invalid request body: %v", err)
	}
	r := &request{Format: f, N: 1}
	if isSet(b.Model) {
		if err := json.Unmarshal(b.Model, &r.Model); err != nil {
			return nil, fmt.Errorf("model: must be a string")
		}
	}
	if b.RequestID != nil {
		r.RequestID = *b.RequestID
	}
	r.Stream = string(bytes.TrimSpace(b.Stream)) == "true"
	if t := b.CacheHitThreshold; t != nil && f != fmtGenerate {
		if *t < 0 || *t > 1 {
			return nil, fmt.Errorf("cache_hit_threshold: must be between 0 and 1, got %v", *t)
		}
		r.CacheHitThreshold = t
	}
	r.IncludeUsage = r.Stream && b.StreamOptions != nil && b.StreamOptions.IncludeUsage
	r.ReturnTokenIDs = f != fmtGenerate && string(bytes.TrimSpace(b.ReturnTokenIDs)) == "true"
	temp := b.Temperature
	if f == fmtGenerate {
		temp = nil
		if b.SamplingParams != nil {
			temp = b.SamplingParams.Temperature
		}
	}
	var t float64
	r.Greedy = isSet(temp) && json.Unmarshal(temp, &t) == nil && t == 0
	var err error
	var n optInt
	switch f {
	case fmtChat:
		err = r.chatPrompt(b)
		r.MaxTokens, r.MinTokens, n = b.MaxTokens, b.MinTokens.V, b.N
		if b.MaxCompletionTokens.Set {
			r.MaxTokens = b.MaxCompletionTokens
		}
		if err == nil {
			r.KV, r.EC, err = transferParams(b.KV, b.EC)
		}
	case fmtCompletions:
		err = r.completionsPrompt(b.Prompt)
		r.MaxTokens, r.MinTokens, n = b.MaxTokens, b.MinTokens.V, b.N
		if err == nil {
			r.KV, r.EC, err = transferParams(b.KV, b.EC)
		}
	case fmtGenerate:
		err = r.generatePrompt(b)
		// vLLM's generate endpoint reads transfer params from
		// sampling_params.extra_args only; top-level ones are ignored.
		if sp := b.SamplingParams; sp != nil {
			r.MaxTokens, r.MinTokens, n = sp.MaxTokens, sp.MinTokens.V, sp.N
			if sp.ExtraArgs != nil && err == nil {
				r.KV, r.EC, err = transferParams(sp.ExtraArgs.KV, sp.ExtraArgs.EC)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if n.Set {
		r.N = int(n.V)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	if f != fmtGenerate && isSet(b.BootstrapRoom) {
		var room uint64
		if err := json.Unmarshal(b.BootstrapRoom, &room); err != nil || room > math.MaxInt64 {
			return nil, fmt.Errorf("bootstrap_room: must be an integer in [0, 2^63-1], got %s", b.BootstrapRoom)
		}
		r.Bootstrap = &bootstrap{Room: room, Port: b.BootstrapPort.V}
		if b.BootstrapHost != nil {
			r.Bootstrap.Host = *b.BootstrapHost
		}
	}
	return r, nil
}

func (r *request) validate() error {
	if r.MaxTokens.Set && r.MaxTokens.V < 1 {
		return fmt.Errorf("max_tokens must be at least 1, got %d.", r.MaxTokens.V)
	}
	if r.MinTokens < 0 {
		return fmt.Errorf("min_tokens must be greater than or equal to 0, got %d.", r.MinTokens)
	}
	if r.MaxTokens.Set && r.MinTokens > r.MaxTokens.V {
		return fmt.Errorf("min_tokens must be less than or equal to max_tokens=%d, got %d.", r.MaxTokens.V, r.MinTokens)
	}
	if r.N < 1 || r.N > 16 {
		return fmt.Errorf("n must be in [1, 16], got %d.", r.N)
	}
	return nil
}

func (r *request) chatPrompt(b wireBody) error {
	if !isSet(b.Messages) {
		return fmt.Errorf("messages: field required")
	}
	rendered, media, err := renderChat(b.Messages)
	if err != nil {
		return err
	}
	r.Media = media
	if !isSet(b.Tokens) {
		r.Prompt = rendered
		return nil
	}
	// Pre-rendered tokens (the P/D chat extension): T and items come from
	// them, and the media parts of messages must match the items.
	var t struct {
		TokenIDs json.RawMessage `json:"token_ids"`
		Features json.RawMessage `json:"features"`
	}
	if err := json.Unmarshal(b.Tokens, &t); err != nil {
		return fmt.Errorf("tokens: must be an object")
	}
	ids, err := tokenIDs("tokens.token_ids", t.TokenIDs)
	if err != nil {
		return err
	}
	items, err := parseFeatures(t.Features, len(ids))
	if err != nil {
		return fmt.Errorf("tokens.%v", err)
	}
	r.Prompt = promptInfo{Tokens: ids, Items: items}
	return checkParts(media, items)
}

// checkParts verifies that messages carry one media part per item, in the
// same per-modality order, and that a part's uuid equals its item's hash.
func checkParts(media []mediaPart, items []item) error {
	byMod := map[string][]item{}
	for _, it := range items {
		byMod[it.Modality] = append(byMod[it.Modality], it)
	}
	seen := map[string]int{}
	for _, mp := range media {
		k := seen[mp.Modality]
		seen[mp.Modality]++
		if k >= len(byMod[mp.Modality]) {
			continue
		}
		if h := byMod[mp.Modality][k].Hash; mp.UUID != "" && mp.UUID != h {
			return fmt.Errorf("%s part %d: uuid %q does not match tokens.features.mm_hashes.%s[%d] %q", mp.Modality, k, mp.UUID, mp.Modality, k, h)
		}
	}
	for _, m := range modalities {
		if seen[m] != len(byMod[m]) {
			return fmt.Errorf("messages carry %d %s parts but tokens.features lists %d", seen[m], m, len(byMod[m]))
		}
	}
	return nil
}

func (r *request) completionsPrompt(raw json.RawMessage) error {
	t := bytes.TrimSpace(raw)
	switch {
	case len(t) == 0 || string(t) == "null":
		return fmt.Errorf("prompt: field required")
	case t[0] == '"':
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return fmt.Errorf("prompt: %v", err)
		}
		r.Prompt = promptInfo{Tokens: Tokenize([]int{BOS}, s)}
		return nil
	case t[0] == '[':
		ids, err := tokenIDs("prompt", t)
		if err != nil {
			return fmt.Errorf("%v (batched prompts are not supported)", err)
		}
		r.Prompt = promptInfo{Tokens: ids}
		return nil
	}
	return fmt.Errorf("prompt: must be a string or an array of token ids")
}

func (r *request) generatePrompt(b wireBody) error {
	ids, err := tokenIDs("token_ids", b.TokenIDs)
	if err != nil {
		return err
	}
	items, err := parseFeatures(b.Features, len(ids))
	if err != nil {
		return err
	}
	r.Prompt = promptInfo{Tokens: ids, Items: items}
	return nil
}

// tokenIDs parses a non-empty array of non-negative integers.
func tokenIDs(name string, raw json.RawMessage) ([]int, error) {
	if !isSet(raw) {
		return nil, fmt.Errorf("%s: field required", name)
	}
	var nums []json.Number
	if err := json.Unmarshal(raw, &nums); err != nil {
		return nil, fmt.Errorf("%s: must be an array of integers", name)
	}
	if len(nums) == 0 {
		return nil, fmt.Errorf("%s: must not be empty", name)
	}
	ids := make([]int, len(nums))
	for i, n := range nums {
		v, err := strconv.ParseInt(string(n), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s[%d]: must be a non-negative integer, got %s", name, i, n)
		}
		ids[i] = int(v)
	}
	return ids, nil
}

// transferParams decodes kv/ec params: absent or null is nil, an object is
// its members, anything else is an error.
func transferParams(kv, ec json.RawMessage) (k, e map[string]json.RawMessage, err error) {
	if isSet(kv) {
		if err := json.Unmarshal(kv, &k); err != nil || k == nil {
			return nil, nil, fmt.Errorf("kv_transfer_params: must be an object")
		}
	}
	if isSet(ec) {
		if err := json.Unmarshal(ec, &e); err != nil || e == nil {
			return nil, nil, fmt.Errorf("ec_transfer_params: must be an object")
		}
	}
	return k, e, nil
}

// isSet reports whether a raw member is present and not null.
func isSet(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}
