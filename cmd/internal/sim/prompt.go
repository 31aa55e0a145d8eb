package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// modalities in the order features list them.
var modalities = []string{"image", "video", "audio"}

// item is one multimodal item of a prompt.
type item struct {
	Modality       string
	Hash           string
	Offset, Length int
	Kwargs         *string // base64 blob; nil is a cache hit (JSON null)
}

// promptInfo is a prompt as the worker sees it: its token ids T and items.
type promptInfo struct {
	Tokens []int
	Items  []item // in offset order
	// LoRA is the adapter the request runs under ("" for the base model)
	// and LoRAID its lora_int_id (lora.go): the adapter is folded into
	// every block's key.
	LoRA   string
	LoRAID int
}

// Key identifies the prompt's KV: sha256 over the tokens and, per item, its
// offset, length and hash (vLLM's prefix hashes fold mm hashes in too).
func (p promptInfo) Key() string {
	h := sha256.New()
	if p.LoRA != "" {
		fmt.Fprintf(h, "lora:%s|", p.LoRA)
	}
	var b [8]byte
	for _, t := range p.Tokens {
		binary.LittleEndian.PutUint64(b[:], uint64(t))
		h.Write(b[:])
	}
	for _, it := range p.Items {
		fmt.Fprintf(h, "|%d:%d:%s", it.Offset, it.Length, it.Hash)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// chatPart is one element of a message's content array.
type chatPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ImageURL   *mediaURL       `json:"image_url"`
	VideoURL   *mediaURL       `json:"video_url"`
	AudioURL   *mediaURL       `json:"audio_url"`
	InputAudio *inputAudio     `json:"input_audio"`
	UUID       json.RawMessage `json:"uuid"`
}

type mediaURL struct {
	URL string `json:"url"`
}

// UnmarshalJSON takes the object {"url":…} or the bare url string, as
// vLLM's chat parser does (CustomChatCompletionContentSimpleImageParam and
// friends, input_image).
func (m *mediaURL) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &m.URL)
	}
	type plain mediaURL
	return json.Unmarshal(b, (*plain)(m))
}

type inputAudio struct {
	Data   string `json:"data"`
	Format string `json:"format"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// mediaPart is a media part found in messages, in order of appearance.
type mediaPart struct {
	Modality string
	Data     []byte // decoded payload, or the URL bytes for a remote URL
	Size     int    // decoded size; 0 for a remote URL
	UUID     string // the part's uuid, "" when absent
}

// renderChat applies the fake chat template: BOS, then every message's text
// words and media placeholders in order. A part's uuid is its hash, as in
// vLLM; otherwise the hash is sha256 of the media bytes.
func renderChat(messages json.RawMessage) (promptInfo, []mediaPart, error) {
	var msgs []chatMessage
	if err := json.Unmarshal(messages, &msgs); err != nil {
		return promptInfo{}, nil, fmt.Errorf("messages: %v", err)
	}
	if len(msgs) == 0 {
		return promptInfo{}, nil, fmt.Errorf("messages: must be a non-empty array")
	}
	p := promptInfo{Tokens: []int{BOS}}
	var parts []mediaPart
	for i, m := range msgs {
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || string(c) == "null":
		case c[0] == '"':
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return promptInfo{}, nil, fmt.Errorf("messages[%d].content: %v", i, err)
			}
			p.Tokens = Tokenize(p.Tokens, s)
		case c[0] == '[':
			var ps []chatPart
			if err := json.Unmarshal(c, &ps); err != nil {
				return promptInfo{}, nil, fmt.Errorf("messages[%d].content: %v", i, err)
			}
			for j, part := range ps {
				mp, ok, err := partMedia(part)
				if err != nil {
					return promptInfo{}, nil, fmt.Errorf("messages[%d].content[%d]: %v", i, j, err)
				}
				if !ok {
					p.Tokens = Tokenize(p.Tokens, part.Text)
					continue
				}
				parts = append(parts, mp)
				hash := mp.UUID
				if hash == "" {
					hash = MediaHash(mp.Data)
				}
				n := PlaceholderLen(mp.Size)
				p.Items = append(p.Items, item{Modality: mp.Modality, Hash: hash, Offset: len(p.Tokens), Length: n})
				for range n {
					p.Tokens = append(p.Tokens, PlaceholderToken(mp.Modality))
				}
			}
		default:
			return promptInfo{}, nil, fmt.Errorf("messages[%d].content: must be a string or an array", i)
		}
	}
	return p, parts, nil
}

// partMedia extracts the media of a part; ok is false for a non-media part.
func partMedia(p chatPart) (mediaPart, bool, error) {
	var mp mediaPart
	var url string
	typ := p.Type
	if typ == "" || len(p.UUID) > 0 && string(p.UUID) != "null" {
		// vLLM's typeless branch (no type, or a uuid): the first media
		// member present decides.
		switch {
		case p.ImageURL != nil:
			typ = "image_url"
		case p.AudioURL != nil:
			typ = "audio_url"
		case p.InputAudio != nil:
			typ = "input_audio"
		case p.VideoURL != nil:
			typ = "video_url"
		}
	}
	switch {
	case (typ == "image_url" || typ == "input_image") && p.ImageURL != nil:
		mp.Modality, url = "image", p.ImageURL.URL
	case typ == "video_url" && p.VideoURL != nil:
		mp.Modality, url = "video", p.VideoURL.URL
	case typ == "audio_url" && p.AudioURL != nil:
		mp.Modality, url = "audio", p.AudioURL.URL
	case typ == "input_audio" && p.InputAudio != nil:
		b, err := base64.StdEncoding.DecodeString(p.InputAudio.Data)
		if err != nil {
			return mp, false, fmt.Errorf("input_audio.data: invalid base64")
		}
		mp.Modality, mp.Data, mp.Size = "audio", b, len(b)
	default:
		return mp, false, nil
	}
	if len(p.UUID) > 0 && string(p.UUID) != "null" {
		if err := json.Unmarshal(p.UUID, &mp.UUID); err != nil {
			return mp, false, fmt.Errorf("uuid: must be a string")
		}
	}
	if mp.Data != nil {
		return mp, true, nil
	}
	if !strings.HasPrefix(url, "data:") {
		mp.Data = []byte(url)
		return mp, true, nil
	}
	comma := strings.IndexByte(url, ',')
	if comma < 0 || !strings.HasSuffix(url[:comma], ";base64") {
		return mp, false, fmt.Errorf("%s: invalid data URI", mp.Modality)
	}
	b, err := base64.StdEncoding.DecodeString(url[comma+1:])
	if err != nil {
		return mp, false, fmt.Errorf("%s: data URI payload is not valid base64", mp.Modality)
	}
	mp.Data, mp.Size = b, len(b)
	return mp, true, nil
}

// placeholder is one {offset,length} span of features.mm_placeholders.
type placeholder struct {
	Offset int `json:"offset"`
	Length int `json:"length"`
}

// parseFeatures checks raw features against tokens and returns the items in
// offset order. Absent or null features mean no items.
func parseFeatures(raw json.RawMessage, ntok int) ([]item, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var f struct {
		MMHashes       map[string][]string      `json:"mm_hashes"`
		MMPlaceholders map[string][]placeholder `json:"mm_placeholders"`
		KwargsData     map[string][]*string     `json:"kwargs_data"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("features: %v", err)
	}
	var items []item
	for m, hashes := range f.MMHashes {
		phs := f.MMPlaceholders[m]
		if len(phs) != len(hashes) {
			return nil, fmt.Errorf("features: %d %s hashes but %d placeholders", len(hashes), m, len(phs))
		}
		kw, hasKw := f.KwargsData[m]
		if f.KwargsData != nil && hasKw && len(kw) != len(hashes) {
			return nil, fmt.Errorf("features: %d %s hashes but %d kwargs", len(hashes), m, len(kw))
		}
		for k, h := range hashes {
			ph := phs[k]
			if ph.Offset < 0 || ph.Length < 0 || ph.Offset >= ntok || ph.Length > ntok-ph.Offset {
				return nil, fmt.Errorf("features: %s placeholder %d {offset:%d,length:%d} is outside the %d prompt tokens", m, k, ph.Offset, ph.Length, ntok)
			}
			it := item{Modality: m, Hash: h, Offset: ph.Offset, Length: ph.Length}
			if hasKw {
				it.Kwargs = kw[k]
			}
			items = append(items, it)
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].Offset < items[j].Offset })
	return items, nil
}

// featuresJSON builds the wire features of items; kwargs adds kwargs_data.
func featuresJSON(items []item, kwargs bool) any {
	if len(items) == 0 {
		return nil
	}
	hashes := map[string][]string{}
	phs := map[string][]placeholder{}
	kw := map[string][]*string{}
	for _, it := range items {
		hashes[it.Modality] = append(hashes[it.Modality], it.Hash)
		phs[it.Modality] = append(phs[it.Modality], placeholder{it.Offset, it.Length})
		kw[it.Modality] = append(kw[it.Modality], it.Kwargs)
	}
	out := map[string]any{"mm_hashes": hashes, "mm_placeholders": phs}
	if kwargs {
		out["kwargs_data"] = kw
	}
	return out
}
