package mm

import (
	"encoding/json"
	"fmt"

	"github.com/celflow/celflow/engine/jsonb"
)

// mm sits below the engine core: the run state holds its Tokens and
// MediaItem (engine re-exports them as engine.Tokens and engine.MediaItem)
// and engine.AsError classifies its *Error, so mm imports nothing of the
// engine's and the engine → mm → jsonb direction holds (STYLE.md layout).

// MediaItem is one media part of the request.
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

// Tokens is the prompt's token ids when known.
type Tokens struct {
	Known bool
	// FromRender is true when T came from a render call (completions legs then
	// replace prompt with T).
	FromRender bool
	IDs        []int64
	// JSON is IDs encoded once as a JSON array, shared by every leg.
	JSON []byte
}

// ErrKind says whose input an *Error rejects; engine.AsError maps it to the
// engine's error kind (and so to the reply's status and code).
type ErrKind uint8

const (
	BadRequest ErrKind = iota + 1 // a client field: 400 invalid_request
	NotJSON                       // the client body is not a JSON object: 400 invalid_json
	BadReply                      // a render reply broke the protocol: 502 upstream_protocol_error
)

// Error is a rejected body or reply. Msg names the field's path and is
// safe to show a client; Cause is for logs only.
type Error struct {
	Kind  ErrKind
	Msg   string
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Msg + ": " + e.Cause.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Cause }

func errorf(k ErrKind, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// Unquote is jsonb.Unquote, and TopLevel jsonb.TopLevel: kept here for the
// nodes that read the body through mm.
func Unquote(raw []byte) ([]byte, bool) { return jsonb.Unquote(raw) }

func TopLevel(body []byte, key string) ([]byte, bool) { return jsonb.TopLevel(body, key) }
