package mm

import (
	"errors"
	"fmt"
	"math"

	"github.com/celflow/celflow/internal/jsonb"
)

// ParseRenderChat reads a chat render reply (docs/protocol.md, render): one object whose
// token_ids become T and whose features are assigned to the request's items
// by position within each modality (item k of modality m takes entry k).
// media is the request's items in order (from fetch-media or ScanParts); the
// result is a fresh copy with Hash/Offset/Length/Kwargs/HasFeatures set.
//
// features absent or null: no item gets features (the llm-d simulator omits
// them). kwargs_data absent or null as a whole: every item is a cache hit
// (Kwargs = JSON null). A count mismatch for any modality, a span outside T,
// or a reply that is not one object (or repeats a member name) is an
// *Error of kind BadReply (502 upstream_protocol_error). T.JSON aliases resp.
func ParseRenderChat(resp []byte, media []MediaItem) (Tokens, []MediaItem, error) {
	out := append([]MediaItem(nil), media...)
	obj, err := jsonb.Parse(resp)
	if err != nil {
		var dup *jsonb.DuplicateKeyError
		if errors.As(err, &dup) {
			return Tokens{}, nil, protoErr("reply repeats the member name "+dup.Path, err)
		}
		return Tokens{}, nil, protoErr("reply is not one JSON object", err)
	}
	t, e := renderTokens(resp, obj)
	if e != nil {
		return Tokens{}, nil, e
	}
	i := obj.Find("features")
	if i < 0 {
		return t, out, nil
	}
	m := obj.Members[i]
	feats, err := parseFeatures(resp, m.ValStart, m.ValEnd, len(t.IDs), featureRules{kwargsPerModality: true})
	if err != nil {
		return Tokens{}, nil, protoErr("reply "+err.Error(), nil)
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
			return Tokens{}, nil, protoErr(fmt.Sprintf(
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

func modalityUnion(a, b []MediaItem) []string {
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

// ParseRenderCompletions reads a completions render reply (docs/protocol.md, render): a
// JSON array holding exactly one object whose token_ids become T. Any other
// shape is an *Error of kind BadReply. T.JSON aliases resp; FromRender is set.
func ParseRenderCompletions(resp []byte) (Tokens, error) {
	if !jsonb.Valid(resp) {
		return Tokens{}, protoErr("reply is not JSON", nil)
	}
	start := jsonb.SkipWS(resp, 0)
	if resp[start] != '[' {
		return Tokens{}, protoErr("reply must be a JSON array of one object, got "+jsonb.KindOf(resp[start:]), nil)
	}
	var elems [][2]int
	_ = jsonb.EachElement(resp, start, func(vs, ve int) bool {
		elems = append(elems, [2]int{vs, ve})
		return len(elems) <= 2
	})
	if len(elems) != 1 {
		n := fmt.Sprint(len(elems))
		if len(elems) > 2 {
			n = "more than 2"
		}
		return Tokens{}, protoErr("reply must be an array of exactly one object, got "+n+" elements", nil)
	}
	obj, err := jsonb.ObjectAt(resp, elems[0][0])
	if err != nil {
		return Tokens{}, protoErr("reply[0] is not an object without repeated names", err)
	}
	t, e := renderTokens(resp, obj)
	if e != nil {
		return Tokens{}, e
	}
	return t, nil
}

func renderTokens(resp []byte, obj *jsonb.Object) (Tokens, *Error) {
	i := obj.Find("token_ids")
	if i < 0 {
		return Tokens{}, protoErr("reply has no token_ids", nil)
	}
	raw := resp[obj.Members[i].ValStart:obj.Members[i].ValEnd]
	ids, err := ParseTokenIDs(raw)
	if err != nil {
		return Tokens{}, protoErr("reply token_ids"+pathErr(err), nil)
	}
	return Tokens{Known: true, FromRender: true, IDs: ids, JSON: raw[:len(raw):len(raw)]}, nil
}

func protoErr(msg string, cause error) *Error {
	return &Error{Kind: BadReply, Msg: msg, Cause: cause}
}

// PromptKind is the shape of a completions prompt (docs/protocol.md, render).
type PromptKind uint8

const (
	PromptString PromptKind = iota + 1 // render is called
	PromptTokens                       // T is the prompt itself, no call
)

// ParseCompletionsPrompt classifies a completions body's prompt
// (docs/protocol.md, render). For a token array it returns T (JSON aliasing the
// body, FromRender false: the prompt is left as sent). `[]`, batched prompts
// ([]string, [][]int), negative/fractional/non-numeric elements, a missing
// prompt and any other type are an *Error of kind BadRequest. obj may be nil.
func ParseCompletionsPrompt(body []byte, obj *jsonb.Object) (PromptKind, Tokens, error) {
	var vs, ve int
	var ok bool
	if obj != nil {
		if i := obj.Find("prompt"); i >= 0 {
			vs, ve, ok = obj.Members[i].ValStart, obj.Members[i].ValEnd, true
		}
	} else {
		vs, ve, ok = jsonb.Lookup(body, jsonb.SkipWS(body, 0), "prompt")
	}
	bad := func(format string, args ...any) (PromptKind, Tokens, error) {
		return 0, Tokens{}, errorf(BadRequest, format, args...)
	}
	if !ok {
		return bad("prompt: required")
	}
	raw := body[vs:ve]
	switch raw[0] {
	case '"':
		return PromptString, Tokens{}, nil
	case '[':
	default:
		return bad("prompt: must be a string or an array of token ids, got %s", jsonb.KindOf(raw))
	}
	first := -1
	_ = jsonb.EachElement(raw, 0, func(es, _ int) bool { first = es; return false })
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
	return PromptTokens, Tokens{Known: true, IDs: ids, JSON: raw[:len(raw):len(raw)]}, nil
}

// CheckLimits applies render's limits (0 = off): len(T)
// against maxTotal, and the sum of placeholder lengths (computed without
// overflow) against maxPlaceholder. Messages carry both numbers.
func CheckLimits(t Tokens, media []MediaItem, maxTotal, maxPlaceholder int64) error {
	if maxTotal > 0 && t.Known && int64(len(t.IDs)) > maxTotal {
		return errorf(BadRequest, "too many total tokens: got %d, max %d", len(t.IDs), maxTotal)
	}
	if maxPlaceholder <= 0 {
		return nil
	}
	var sum int64
	for _, it := range media {
		l := int64(it.Length)
		if l > math.MaxInt64-sum {
			return errorf(BadRequest, "too many placeholder tokens: got more than %d, max %d", int64(math.MaxInt64), maxPlaceholder)
		}
		sum += l
	}
	if sum > maxPlaceholder {
		return errorf(BadRequest, "too many placeholder tokens: got %d, max %d", sum, maxPlaceholder)
	}
	return nil
}
