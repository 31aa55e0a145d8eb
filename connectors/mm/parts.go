// Package mm holds the multimodal and tokens-in rules shared by the HTTP front
// and the nodes: finding media parts in a chat body, parsing and validating
// token ids and features, and building the small `tokens` / `features` JSON
// fragments that legs splice into bodies (docs/protocol.md: fetch-media,
// render, and the worker legs). It is pure: no network, no logging, no engine
// state.
package mm

import (
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
	Type     string // part type: "image_url", "video_url", "audio_url" or "input_audio"
	Modality string // "image", "video" or "audio"
	Index    int    // order of appearance over all modalities
	Part     int    // k-th part of its modality
	// PartStart..PartEnd is the part object ({"type":…,…}).
	PartStart, PartEnd int
	// ObjStart..ObjEnd is the value of the "<type>" member (an object), the
	// piece encode copies into its single-part sub-request.
	ObjStart, ObjEnd int
	// ValStart..ValEnd is the url string (input_audio: the data string),
	// quotes included: the range fetch-media replaces with a data URI.
	ValStart, ValEnd int
	// Format is input_audio.format when it is a string, "" otherwise.
	Format string
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
// Malformed shapes are skipped silently as docs/protocol.md (fetch-media) lists
// them (a non-object message, non-array content, a non-object part or <type>
// member, a url or data that is not a string); a body without messages yields
// no parts. The error is reserved for bytes that are not JSON at all.
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
	err := jsonb.EachElement(body, ms, func(msgS, _ int) bool {
		if body[msgS] != '{' {
			return true
		}
		cs, _, ok := jsonb.Lookup(body, msgS, "content")
		if !ok || body[cs] != '[' {
			return true
		}
		_ = jsonb.EachElement(body, cs, func(ps, pe int) bool {
			if p, ok := scanPart(body, ps, pe); ok {
				m := modalityIndex(p.Modality)
				p.Part = counts[m]
				counts[m]++
				p.Index = len(parts)
				parts = append(parts, p)
			}
			return true
		})
		return true
	})
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

// scanPart recognises one media part object at [ps,pe). One walk over the
// part's members finds "type" and every candidate payload member, so a
// large inline payload is skipped once here. Names are unique (the front's
// jsonb.Parse refused repeats); on bytes nobody checked, the first wins, as
// everywhere in jsonb.
func scanPart(body []byte, ps, pe int) (PartRef, bool) {
	if body[ps] != '{' {
		return PartRef{}, false
	}
	var ts, te int
	var obj [4][2]int // image_url, video_url, audio_url, input_audio values
	_ = jsonb.EachMember(body, ps, func(f jsonb.Field) bool {
		if f.KeyIs("type") {
			if te == 0 {
				ts, te = f.ValStart, f.ValEnd
			}
			return true
		}
		for i, name := range partTypes {
			if obj[i][1] == 0 && f.KeyIs(name) {
				obj[i] = [2]int{f.ValStart, f.ValEnd}
			}
		}
		return true
	})
	if te == 0 {
		return PartRef{}, false
	}
	t, ok := jsonb.Unquote(body[ts:te])
	if !ok {
		return PartRef{}, false
	}
	ti := -1
	for i, name := range partTypes {
		if string(t) == name {
			ti = i
		}
	}
	if ti < 0 || obj[ti][1] == 0 || body[obj[ti][0]] != '{' {
		return PartRef{}, false
	}
	p := PartRef{Type: partTypes[ti], Modality: ModalityOf(partTypes[ti]), PartStart: ps, PartEnd: pe}
	p.ObjStart, p.ObjEnd = obj[ti][0], obj[ti][1]
	var vs, ve int
	format := false
	_ = jsonb.EachMember(body, p.ObjStart, func(f jsonb.Field) bool {
		switch {
		case p.Type != "input_audio" && f.KeyIs("url"), p.Type == "input_audio" && f.KeyIs("data"):
			if ve == 0 {
				vs, ve = f.ValStart, f.ValEnd
			}
		case p.Type == "input_audio" && !format && f.KeyIs("format"):
			format = true
			if v, ok := jsonb.Unquote(body[f.ValStart:f.ValEnd]); ok {
				p.Format = string(v)
			}
		}
		return true
	})
	if ve == 0 || body[vs] != '"' {
		return PartRef{}, false
	}
	p.ValStart, p.ValEnd = vs, ve
	return p, true
}

var partTypes = [4]string{"image_url", "video_url", "audio_url", "input_audio"}

// PartAt re-reads the media part object at body[start:end] (the offsets an
// MediaItem carries), for legs that rebuild or annotate that part.
func PartAt(body []byte, start, end int) (PartRef, bool) {
	if start < 0 || end > len(body) || start >= end {
		return PartRef{}, false
	}
	return scanPart(body, start, end)
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
