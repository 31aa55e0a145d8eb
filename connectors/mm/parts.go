// Package mm holds the multimodal and tokens-in rules shared by the HTTP front
// and the nodes: finding media parts in a chat body, parsing and validating
// token ids and features, and building the small `tokens` / `features` JSON
// fragments that legs splice into bodies (docs/protocol.md: fetch-media,
// render, and the worker legs). It is pure: no network, no logging, no engine
// state.
package mm

import (
	"fmt"
	"strings"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// Modalities in their canonical order.
const (
	Image = "image"
	Video = "video"
	Audio = "audio"
)

// PartRef is one media part found in messages[*].content[*]. Offsets are
// absolute in the scanned body.
type PartRef struct {
	// Type is the part's payload member and canonical part type:
	// "image_url", "video_url", "audio_url" or "input_audio".
	Type     string
	Modality string // "image", "video" or "audio"
	// Declared is the client's "type" ("" when absent or null; "input_image"
	// for the Responses-style image part, whose payload is image_url).
	Declared string
	// Bare: the payload member is the url string itself ("image_url":"…"),
	// not an object holding it ("image_url":{"url":"…"}).
	Bare  bool
	Index int // order of appearance over all modalities
	Part  int // k-th part of its modality
	// PartStart..PartEnd is the part object ({"type":…,…}).
	PartStart, PartEnd int
	// ObjStart..ObjEnd is the value of the "<type>" member (an object, or
	// the url string when Bare), the piece encode copies into its
	// single-part sub-request.
	ObjStart, ObjEnd int
	// ValStart..ValEnd is the url string (input_audio: the data string),
	// quotes included: the range fetch-media replaces with a data URI.
	ValStart, ValEnd int
	// Format is input_audio.format when it is a string, "" otherwise.
	Format string
}

// WrapOnRewrite reports whether a data URI replacing the url must be
// wrapped as {"url":…}: a typed part with a bare url string
// ({"type":"image_url","image_url":"…"}) is rewritten to the OpenAI object
// form, the one vLLM's typed parser validates. Typeless and input_image
// parts keep the bare string, the form vLLM reads for them.
func (p *PartRef) WrapOnRewrite() bool {
	return p.Bare && p.Declared == p.Type
}

// Inline reports whether the part carries its payload in the body: an
// input_audio part or a data: URL.
func (p *PartRef) Inline(body []byte) bool {
	if p.Type == "input_audio" {
		return true
	}
	v := body[p.ValStart+1 : p.ValEnd-1]
	return len(v) >= 5 && (v[0]|0x20) == 'd' && (v[1]|0x20) == 'a' && (v[2]|0x20) == 't' && (v[3]|0x20) == 'a' && v[4] == ':'
}

// ModalityOf maps a part type to its modality ("" for a non-media type).
func ModalityOf(partType string) string {
	switch partType {
	case "image_url":
		return Image
	case "video_url":
		return Video
	case "audio_url", "input_audio":
		return Audio
	}
	return ""
}

// ScanParts walks messages[*].content[*] of body and returns the media parts
// in order of appearance. obj is body's top-level index from jsonb.Parse, or
// nil (then body must still be valid JSON: it is walked, not validated).
//
// A part is media when vLLM's chat parser would read a media payload from it
// (docs/threat-model.md, Media shapes): a url in image_url / video_url /
// audio_url, as an object {"url":…} or as the bare string, with the
// matching "type", with "type":"input_image" (image_url), or with no type;
// or input_audio data. Shapes vLLM reads but celflow cannot guard
// (image_embeds, audio_embeds, image_pil) and ambiguous parts (two media
// members, or a type that names another member) are refused: an *Error
// (400 invalid_request) whose Param is the part's path.
//
// Shapes from which no parser reads media are skipped silently as
// docs/protocol.md (fetch-media) lists them (a non-object message, non-array
// content, a non-object part, a payload that is neither a string nor an
// object, a url or data that is not a string); a body without messages
// yields no parts. Bytes that are not JSON at all are the other error.
func ScanParts(body []byte, obj *jsonb.Object) ([]PartRef, error) {
	var ms int
	var ok bool
	if obj != nil {
		if i := obj.Find("messages"); i >= 0 {
			ms, ok = obj.Members[i].ValStart, true
		}
	} else {
		err := jsonb.EachMember(body, jsonb.SkipWS(body, 0), func(f jsonb.Field) bool {
			if f.KeyIs("messages") {
				ms, ok = f.ValStart, true
				return false
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	if !ok || body[ms] != '[' {
		return nil, nil
	}
	var parts []PartRef
	var counts [3]int
	var refused *Error
	mi := -1
	err := jsonb.EachElement(body, ms, func(msgS, _ int) bool {
		mi++
		if body[msgS] != '{' {
			return true
		}
		cs, _, ok := jsonb.Lookup(body, msgS, "content")
		if !ok || body[cs] != '[' {
			return true
		}
		pi := -1
		_ = jsonb.EachElement(body, cs, func(ps, pe int) bool {
			pi++
			p, ok, why := scanPart(body, ps, pe)
			if why != "" {
				param := fmt.Sprintf("messages[%d].content[%d]", mi, pi)
				refused = &Error{Kind: BadRequest, Param: param, Msg: param + ": " + why}
				return false
			}
			if ok {
				m := modalityIndex(p.Modality)
				p.Part = counts[m]
				counts[m]++
				p.Index = len(parts)
				parts = append(parts, p)
			}
			return true
		})
		return refused == nil
	})
	if refused != nil {
		return nil, refused
	}
	if err != nil {
		return nil, err
	}
	return parts, nil
}

func modalityIndex(m string) int {
	switch m {
	case Video:
		return 1
	case Audio:
		return 2
	}
	return 0
}

// Payload members scanPart reads: the url-bearing ones, input_audio, and
// the ones vLLM reads but celflow refuses. Indexes into scanPart's table.
const (
	mImage = iota
	mVideo
	mAudio
	mInputAudio
	mImagePIL
	mImageEmbeds
	mAudioEmbeds
	nMembers
)

const inputImage = "input_image" // Responses-style image part; its payload member is image_url

var memberNames = [nMembers]string{"image_url", "video_url", "audio_url", "input_audio", "image_pil", "image_embeds", "audio_embeds"}

// scanPart reads one content part at [ps,pe) the way vLLM's chat parser
// (vllm/entrypoints/chat_utils.py: MM_PARSER_MAP for a typed part, the
// typeless branch of _parse_chat_message_content_mm_part for a part without
// type or with a uuid) might, and errs on the side of media: vLLM validates
// the request with pydantic first, which may drop a "type" that does not
// fit and hand the part to the typeless branch, so a member is media
// whatever the type says. ok is a media part; why, when not "", is the
// refusal (a shape celflow cannot guard, or an ambiguous one). One walk
// over the part's members finds them all, so a large inline payload is
// skipped once here. Names are unique (the front's jsonb.Parse refused
// repeats); on bytes nobody checked, the first wins, as everywhere in jsonb.
func scanPart(body []byte, ps, pe int) (p PartRef, ok bool, why string) {
	if body[ps] != '{' {
		return PartRef{}, false, ""
	}
	var ts, te int
	var mem [nMembers][2]int
	_ = jsonb.EachMember(body, ps, func(f jsonb.Field) bool {
		if f.KeyIs("type") {
			if te == 0 {
				ts, te = f.ValStart, f.ValEnd
			}
			return true
		}
		for i, name := range memberNames {
			if mem[i][1] == 0 && f.KeyIs(name) {
				mem[i] = [2]int{f.ValStart, f.ValEnd}
			}
		}
		return true
	})
	// The type: "" with typed false when absent or null (vLLM's typeless
	// branch); any other non-string is invalid.
	// declared aliases the body (compared, converted only for a message):
	// a scan allocates nothing per part.
	var declared []byte
	typed, badType := false, false
	if te != 0 && !isNull(body, ts) {
		if t, ok := jsonb.Unquote(body[ts:te]); ok && body[ts] == '"' {
			declared, typed = t, true
		} else {
			badType = true
		}
	}
	for _, i := range [...]int{mImagePIL, mImageEmbeds, mAudioEmbeds} {
		name := memberNames[i]
		if string(declared) == name || mem[i][1] != 0 && !isNull(body, mem[i][0]) {
			return PartRef{}, false, "content part " + name + " is not accepted: celflow cannot inspect it " +
				"(send images, video and audio as image_url, video_url, audio_url or input_audio)"
		}
	}
	// Candidates: a url-bearing member with a string url (bare or in an
	// object), or input_audio with string data. Other values carry nothing
	// any parser would fetch: not media, as before. A candidate beside any
	// other media member, even a null one, is ambiguous: vLLM's typeless
	// branch reads the first member present, its validation may drop one.
	n, present := 0, 0
	var first PartRef
	for i := mImage; i <= mInputAudio; i++ {
		if mem[i][1] == 0 {
			continue
		}
		present++
		c, ok := payload(body, i, mem[i][0], mem[i][1])
		if !ok {
			continue
		}
		if n == 0 {
			first = c
		}
		n++
	}
	switch {
	case n == 0:
		return PartRef{}, false, ""
	case present > 1:
		var names []string // no slice before here: a scan allocates nothing per part
		for i := mImage; i <= mInputAudio; i++ {
			if mem[i][1] != 0 {
				names = append(names, memberNames[i])
			}
		}
		return PartRef{}, false, "a content part carries one media member, this one has " + strings.Join(names, " and ")
	case badType:
		return PartRef{}, false, "type must be a string"
	case typed && string(declared) != first.Type && (string(declared) != inputImage || first.Type != "image_url"):
		return PartRef{}, false, fmt.Sprintf("a content part of type %q must not carry %s", cutType(string(declared)), first.Type)
	}
	switch {
	case !typed:
	case string(declared) == first.Type:
		first.Declared = first.Type
	default:
		first.Declared = inputImage
	}
	first.Modality = ModalityOf(first.Type)
	first.PartStart, first.PartEnd = ps, pe
	return first, true, ""
}

// payload reads member i's value at [vs,ve): its url (or input_audio's data)
// string, or !ok when it carries none.
func payload(body []byte, i, vs, ve int) (PartRef, bool) {
	p := PartRef{Type: memberNames[i], ObjStart: vs, ObjEnd: ve}
	if i != mInputAudio && body[vs] == '"' {
		p.Bare, p.ValStart, p.ValEnd = true, vs, ve
		return p, true
	}
	if body[vs] != '{' {
		return PartRef{}, false
	}
	var us, ue int
	format := false
	_ = jsonb.EachMember(body, vs, func(f jsonb.Field) bool {
		switch {
		case i != mInputAudio && f.KeyIs("url"), i == mInputAudio && f.KeyIs("data"):
			if ue == 0 {
				us, ue = f.ValStart, f.ValEnd
			}
		case i == mInputAudio && !format && f.KeyIs("format"):
			format = true
			if v, ok := jsonb.Unquote(body[f.ValStart:f.ValEnd]); ok {
				p.Format = string(v)
			}
		}
		return true
	})
	if ue == 0 || body[us] != '"' {
		return PartRef{}, false
	}
	p.ValStart, p.ValEnd = us, ue
	return p, true
}

func isNull(body []byte, vs int) bool {
	return vs+4 <= len(body) && string(body[vs:vs+4]) == "null"
}

// cutType bounds a client's type in a message.
func cutType(s string) string { return engine.CutUTF8(s, 40) }

// PartAt re-reads the media part object at body[start:end] (the offsets an
// MediaItem carries), for legs that rebuild or annotate that part.
func PartAt(body []byte, start, end int) (PartRef, bool) {
	if start < 0 || end > len(body) || start >= end {
		return PartRef{}, false
	}
	p, ok, _ := scanPart(body, start, end)
	return p, ok
}

// MediaItems turns scanned parts into items (no type or size: nothing was
// fetched), for a render that runs without fetch-media.
func MediaItems(parts []PartRef) []MediaItem {
	if len(parts) == 0 {
		return nil
	}
	out := make([]MediaItem, len(parts))
	for i, p := range parts {
		out[i] = MediaItem{Index: p.Index, Modality: p.Modality, Part: p.Part, PartStart: p.PartStart, PartEnd: p.PartEnd}
	}
	return out
}
