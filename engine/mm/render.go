package mm

import (
	"fmt"
	"math"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/engine/jsonb"
)

// ParseRenderChat reads a chat render reply (PROTOCOL 4.1): one object whose
// token_ids become T and whose features are assigned to the request's items
// by position within each modality (item k of modality m takes entry k).
// media is the request's items in order (from fetch-media or ScanParts); the
// result is a fresh copy with Hash/Offset/Length/Kwargs/HasFeatures set.
//
// features absent or null: no item gets features (the llm-d simulator omits
// them). kwargs_data absent or null as a whole: every item is a cache hit
// (Kwargs = JSON null). A count mismatch for any modality, a span outside T,
// or a reply that is not one object is KindUpstreamProtocol (502).
// T.JSON aliases resp.
func ParseRenderChat(resp []byte, media []engine.MediaItem) (engine.Tokens, []engine.MediaItem, *engine.Error) {
	out := append([]engine.MediaItem(nil), media...)
	obj, err := jsonb.Parse(resp)
	if err != nil {
		return engine.Tokens{}, nil, protoErr("reply is not one JSON object", err)
	}
	t, e := renderTokens(resp, obj)
	if e != nil {
		return engine.Tokens{}, nil, e
	}
	i := lastMember(obj, "features")
	if i < 0 {
		return t, out, nil
	}
	m := obj.Members[i]
	feats, err := parseFeatures(resp, m.ValStart, m.ValEnd, len(t.IDs), featureRules{kwargsPerModality: true})
	if err != nil {
		return engine.Tokens{}, nil, protoErr("reply "+err.Error(), nil)
	}
	if resp[m.ValStart] == 'n' {
		return t, out, nil
	}
	// Every modality on either side must have the same count.
	have := map[string]int{}
	for _, it := range out {
		have[it.Modality]++
	}
	got := map[string]int{}
	for _, f := range feats {
		got[f.Modality]++
	}
	for _, mod := range modalityUnion(out, feats) {
		if have[mod] != got[mod] {
			return engine.Tokens{}, nil, protoErr(fmt.Sprintf(
				"reply features list %d %s item(s), the request has %d", got[mod], mod, have[mod]), nil)
		}
	}
	for j := range out {
		for _, f := range feats {
			if f.Modality == out[j].Modality && f.Part == out[j].Part {
				out[j].Hash, out[j].Offset, out[j].Length = f.Hash, f.Offset, f.Length
				out[j].Kwargs, out[j].HasFeatures = f.Kwargs, true
				break
			}
		}
	}
	return t, out, nil
}

func modalityUnion(a, b []engine.MediaItem) []string {
	var mods []string
	add := func(m string) {
		for _, x := range mods {
			if x == m {
				return
			}
		}
		mods = append(mods, m)
	}
	for _, it := range a {
		add(it.Modality)
	}
	for _, it := range b {
		add(it.Modality)
	}
	return mods
}

// ParseRenderCompletions reads a completions render reply (PROTOCOL 4.2): a
// JSON array holding exactly one object whose token_ids become T. Any other
// shape is KindUpstreamProtocol. T.JSON aliases resp; FromRender is set.
func ParseRenderCompletions(resp []byte) (engine.Tokens, *engine.Error) {
	if !jsonb.Valid(resp) {
		return engine.Tokens{}, protoErr("reply is not JSON", nil)
	}
	start := ws(resp, 0)
	if resp[start] != '[' {
		return engine.Tokens{}, protoErr("reply must be a JSON array of one object, got "+kindOf(resp[start:]), nil)
	}
	var elems [][2]int
	_ = eachElem(resp, start, func(vs, ve int) bool {
		elems = append(elems, [2]int{vs, ve})
		return len(elems) <= 2
	})
	if len(elems) != 1 {
		n := fmt.Sprint(len(elems))
		if len(elems) > 2 {
			n = "more than 2"
		}
		return engine.Tokens{}, protoErr("reply must be an array of exactly one object, got "+n+" elements", nil)
	}
	obj, err := jsonb.ObjectAt(resp, elems[0][0])
	if err != nil {
		return engine.Tokens{}, protoErr("reply[0] is not an object", nil)
	}
	return renderTokens(resp, obj)
}

func renderTokens(resp []byte, obj *jsonb.Object) (engine.Tokens, *engine.Error) {
	i := lastMember(obj, "token_ids")
	if i < 0 {
		return engine.Tokens{}, protoErr("reply has no token_ids", nil)
	}
	raw := resp[obj.Members[i].ValStart:obj.Members[i].ValEnd]
	ids, err := ParseTokenIDs(raw)
	if err != nil {
		return engine.Tokens{}, protoErr("reply token_ids"+pathErr(err), nil)
	}
	return engine.Tokens{Known: true, FromRender: true, IDs: ids, JSON: raw[:len(raw):len(raw)]}, nil
}

func protoErr(msg string, cause error) *engine.Error {
	e := engine.Errorf(engine.KindUpstreamProtocol, "%s", msg)
	e.Cause = cause
	return e
}

// PromptKind is the shape of a completions prompt (PROTOCOL 4.3).
type PromptKind uint8

const (
	PromptString PromptKind = iota + 1 // render is called
	PromptTokens                       // T is the prompt itself, no call
)

// ParseCompletionsPrompt classifies a completions body's prompt (PROTOCOL
// 4.3). For a token array it returns T (JSON aliasing the body, FromRender
// false: the prompt is left as sent). `[]`, batched prompts ([]string,
// [][]int), negative/fractional/non-numeric elements, a missing prompt and
// any other type are KindInvalidRequest. obj may be nil.
func ParseCompletionsPrompt(body []byte, obj *jsonb.Object) (PromptKind, engine.Tokens, *engine.Error) {
	var vs, ve int
	var ok bool
	if obj != nil {
		if i := lastMember(obj, "prompt"); i >= 0 {
			vs, ve, ok = obj.Members[i].ValStart, obj.Members[i].ValEnd, true
		}
	} else {
		vs, ve, ok = lookup(body, ws(body, 0), "prompt")
	}
	bad := func(format string, args ...any) (PromptKind, engine.Tokens, *engine.Error) {
		return 0, engine.Tokens{}, engine.Errorf(engine.KindInvalidRequest, format, args...)
	}
	if !ok {
		return bad("prompt: required")
	}
	raw := body[vs:ve]
	switch raw[0] {
	case '"':
		return PromptString, engine.Tokens{}, nil
	case '[':
	default:
		return bad("prompt: must be a string or an array of token ids, got %s", kindOf(raw))
	}
	first := -1
	_ = eachElem(raw, 0, func(es, _ int) bool { first = es; return false })
	if first < 0 {
		return bad("prompt: must not be empty")
	}
	if c := raw[first]; c == '"' || c == '[' {
		return bad("prompt: batched prompts are not supported")
	}
	ids, err := ParseTokenIDs(raw)
	if err != nil {
		return bad("prompt%s", pathErr(err))
	}
	return PromptTokens, engine.Tokens{Known: true, IDs: ids, JSON: raw[:len(raw):len(raw)]}, nil
}

// CheckLimits applies render's limits (PROTOCOL 4.5; 0 = off): len(T)
// against maxTotal, and the sum of placeholder lengths (computed without
// overflow) against maxPlaceholder. Messages carry both numbers.
func CheckLimits(t engine.Tokens, media []engine.MediaItem, maxTotal, maxPlaceholder int64) *engine.Error {
	if maxTotal > 0 && t.Known && int64(len(t.IDs)) > maxTotal {
		return engine.Errorf(engine.KindInvalidRequest, "too many total tokens: got %d, max %d", len(t.IDs), maxTotal)
	}
	if maxPlaceholder <= 0 {
		return nil
	}
	var sum int64
	for _, it := range media {
		l := int64(it.Length)
		if l > math.MaxInt64-sum {
			return engine.Errorf(engine.KindInvalidRequest, "too many placeholder tokens: got more than %d, max %d", int64(math.MaxInt64), maxPlaceholder)
		}
		sum += l
	}
	if sum > maxPlaceholder {
		return engine.Errorf(engine.KindInvalidRequest, "too many placeholder tokens: got %d, max %d", sum, maxPlaceholder)
	}
	return nil
}
