package engine

import "encoding/json"

// MediaItem is one media part of the request: an element of the workflow
// language's media list (CEL variable media). The core defines it because
// guards, targets and foreach read it; connectors/mm parses it from bodies and
// render replies.
type MediaItem struct {
	Index    int    // order of appearance over all modalities
	Modality string // "image", "video", "audio"
	Part     int    // k-th item of its modality
	Type     string // media type, e.g. image/png ("" when unknown, e.g. generate)
	Size     int    // decoded bytes (0 when unknown)
	Remote   bool   // came from a URL fetch-media downloaded
	// Location of the part in State.Body, for legs that rebuild or annotate it:
	// byte offsets of the part object (PartStart..PartEnd) within State.Body.
	PartStart, PartEnd int
	// After render (or from a generate body):
	Hash        string
	Offset      int             // placeholder offset in T
	Length      int             // placeholder length
	Kwargs      json.RawMessage // JSON string or null (cache hit); nil when render sent none
	HasFeatures bool
}

// Tokens is the prompt's token ids when known (CEL variable tokens).
type Tokens struct {
	Known bool
	// FromRender is true when T came from a render call (completions legs then
	// replace prompt with T).
	FromRender bool
	IDs        []int64
	// JSON is IDs encoded once as a JSON array, shared by every leg.
	JSON []byte
}
